// The official TypeScript SDK's OAuth client through the gateway (2025-11-25 basic/authorization): a
// StreamableHTTPClientTransport with an OAuthClientProvider whose redirectToAuthorization follows the authorization
// URL headlessly (fetch with manual redirects and a cookie jar, as a browser would) to the loopback redirect URI,
// then transport.finishAuth(code). Discovery (the gateway's 401, its protected-resource metadata, the authorization
// server's metadata), dynamic registration as a public client, authorization code with PKCE and the token request,
// then the tool list, a tool with two live sampling rounds and a form elicitation. With TTL_SECONDS, it waits until
// the access token has expired and calls again: the SDK meets the 401, refreshes, and the call goes on in the same
// session with no second authorization. Exits non-zero on the first broken expectation; prints "ok - ..." lines and
// a last line "result JSON" (the session id, every access token it was given, its client id) for the test.
// With STEP_UP_TOOL (a tool the gateway's policy gives a scope the token lacks), it records how SDK 1.32.2 meets
// the gateway's 403 insufficient_scope: holding a refresh token, it refreshes with the same scope, meets the same
// 403 and gives up ("403 after trying upscoping"); holding none, it re-authorizes asking for the scopes the
// challenge names, and after finishAuth the call succeeds in the same session.
// Usage: node oauth_client.mjs http://HOST:PORT/mcp [TTL_SECONDS|0] [STEP_UP_TOOL]
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [target, ttlArg, stepUpTool] = process.argv.slice(2);
const url = new URL(target);
const ttl = Number(ttlArg || 0);

function check(ok, what) {
  if (!ok) { throw new Error(`expectation failed: ${what}`); }
  console.log(`ok - ${what}`);
}

// A user agent for the authorization endpoint: it keeps the authorization server's cookies (its login and consent
// interactions are tied to them) and stops at the client's redirect URI without loading it.
class HeadlessBrowser {
  cookies = new Map();

  async follow(authorizationUrl, redirectUrl) {
    let next = authorizationUrl.href;
    for (let hop = 0; hop < 10; hop += 1) {
      const cookie = [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
      const response = await fetch(next, { redirect: 'manual', headers: cookie ? { cookie } : {} });
      this.keep(response.headers.getSetCookie());
      const location = response.headers.get('location');
      if (response.status < 300 || response.status >= 400 || !location) {
        throw new Error(`the authorization server answered ${response.status}: ${await response.text()}`);
      }
      next = new URL(location, next).href;
      if (next.startsWith(redirectUrl)) return new URL(next).searchParams;
    }
    throw new Error('the authorization server never redirected to the client');
  }

  keep(setCookies) {
    for (const line of setCookies) {
      const [pair] = line.split(';');
      const at = pair.indexOf('=');
      const [name, value] = [pair.slice(0, at).trim(), pair.slice(at + 1).trim()];
      if (value) this.cookies.set(name, value); else this.cookies.delete(name);
    }
  }
}

class HeadlessProvider {
  redirectUrl = 'http://127.0.0.1:8976/callback'; // never loaded: the browser stops at it
  browser = new HeadlessBrowser();
  authorizations = [];
  issued = [];
  #client;
  #tokens;
  #verifier;
  #state;
  #code;

  get clientMetadata() {
    return {
      client_name: 'ts-sdk-oauth', redirect_uris: [this.redirectUrl], grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'], token_endpoint_auth_method: 'none',
    };
  }

  state() { this.#state = randomUUID(); return this.#state; }
  clientInformation() { return this.#client; }
  saveClientInformation(info) { this.#client = info; }
  tokens() { return this.#tokens; }
  saveTokens(tokens) { this.#tokens = tokens; this.issued.push(tokens); }
  saveCodeVerifier(verifier) { this.#verifier = verifier; }
  codeVerifier() { return this.#verifier; }

  async redirectToAuthorization(authorizationUrl) {
    this.authorizations.push(authorizationUrl);
    const answer = await this.browser.follow(authorizationUrl, this.redirectUrl);
    if (answer.get('error')) throw new Error(`authorization refused: ${answer.get('error')} ${answer.get('error_description')}`);
    if (answer.get('state') !== this.#state) throw new Error('the authorization response carries another state');
    this.#code = answer.get('code');
  }

  takeCode() { const code = this.#code; this.#code = undefined; return code; }
  forgetRefreshToken() { this.#tokens = { ...this.#tokens, refresh_token: undefined }; }
}

function connected(provider) {
  const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
  const told = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (version) => { transport.negotiated = version; told?.(version); };
  const client = new Client({ name: 'ts-sdk-oauth', version: '1.0.0' },
    { capabilities: { sampling: {}, elicitation: { form: {} } } });
  client.sampled = 0;
  client.elicited = 0;
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
    client.sampled += 1;
    const prompt = request.params.messages[0].content.text;
    const text = prompt.includes('JSON array') ? JSON.stringify(prompt.split('\n').slice(1, 4)) : 'A parser and a gateway.';
    return { role: 'assistant', content: { type: 'text', text }, model: 'ts-sdk-oauth', stopReason: 'endTurn' };
  });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    client.elicited += 1;
    const noteId = request.params.requestedSchema?.properties?.note_id?.enum?.[0];
    return { action: 'accept', content: { note_id: noteId, confirm: true } };
  });
  return { client, transport };
}

async function main() {
  const provider = new HeadlessProvider();
  let { client, transport } = connected(provider);
  try {
    await client.connect(transport);
    throw new Error('the gateway let an unauthorized client in');
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
  }
  check(provider.authorizations.length === 1, 'the 401 sent the SDK through discovery and registration to authorize');
  const asked = provider.authorizations[0].searchParams;
  check(asked.get('code_challenge_method') === 'S256' && asked.get('resource') === url.href,
    'the authorization request uses PKCE (S256) and names the gateway as the resource');
  await transport.finishAuth(provider.takeCode());
  check(provider.issued.length === 1, 'finishAuth exchanged the code for a token');
  await client.close();

  ({ client, transport } = connected(provider));
  await client.connect(transport);
  check(transport.negotiated === '2025-11-25', 'the session negotiates 2025-11-25 with the token');
  const session = transport.sessionId;
  const tools = await client.listTools();
  const names = new Set(tools.tools.map((tool) => tool.name));
  check(names.has('summarize_repo') && names.has('notes_delete'), 'the tool list comes through the gateway');
  const summary = await client.callTool({ name: 'summarize_repo', arguments: {} });
  check(!summary.isError && client.sampled === 2, 'summarize_repo answers after two live sampling rounds');
  const deleted = await client.callTool({ name: 'notes_delete',
    arguments: { workspaceUri: 'file:///work/notes', title: 'Standup' } });
  check(client.elicited === 1 && deleted.content[0].text.startsWith("Deleted 'Standup'"),
    'notes_delete answers after a form elicitation');
  if (ttl > 0) {
    await sleep((ttl + 0.5) * 1000);
    const again = await client.callTool({ name: 'echo', arguments: { text: 'after refresh' } });
    check(!again.isError && again.content[0].text.includes('after refresh'), 'a call after the token expired is answered');
    check(provider.issued.length === 2 && provider.issued[1].access_token !== provider.issued[0].access_token
      && provider.authorizations.length === 1, 'the SDK refreshed the token without authorizing again');
    check(transport.sessionId === session, 'the refreshed token kept the session');
  }
  if (stepUpTool) await stepUp(provider, client, transport, session);
  await client.close();
  console.log(`result ${JSON.stringify({
    session, client_id: provider.clientInformation().client_id,
    auth_method: provider.clientInformation().token_endpoint_auth_method,
    tokens: provider.issued.map((t) => t.access_token),
  })}`);
}

async function stepUp(provider, client, transport, session) {
  const call = () => client.callTool({ name: stepUpTool, arguments: { text: 'stepped up' } });
  const refused = await call().then(() => undefined, (error) => error);
  check(refused?.code === 403 && provider.authorizations.length === 1,
    'with a refresh token the SDK answers the step-up with a same-scope refresh, then gives up with the 403');
  await client.ping(); // a success clears the transport's memory of the challenge it tried
  provider.forgetRefreshToken();
  const redirected = await call().then(() => undefined, (error) => error);
  check(redirected instanceof UnauthorizedError && provider.authorizations.length === 2,
    'without a refresh token the SDK re-authorizes on the 403');
  const asked = provider.authorizations[1].searchParams.get('scope').split(' ');
  check(asked.includes('mcp:admin') && asked.includes('mcp:tools'), 'it asks for the scopes the challenge names');
  await transport.finishAuth(provider.takeCode());
  const stepped = await call();
  check(!stepped.isError && stepped.content[0].text.includes('stepped up') && transport.sessionId === session,
    'the stepped-up call is answered in the same session');
}

main().then(() => process.exit(0)).catch((error) => { console.error(error); process.exit(1); });
