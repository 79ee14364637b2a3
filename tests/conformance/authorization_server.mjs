// A real OAuth 2.1 / OpenID authorization server for the authorization tests: node oidc-provider (pinned in
// package.json), configured with resource indicators (RFC 8707) that issue JWT access tokens (RFC 9068) whose
// audience is the requested resource, client credentials, introspection (RFC 7662) and dynamic registration.
//
// usage: node authorization_server.mjs PORT [TTL_SECONDS]
// Prints "ready ISSUER" on stdout once it listens. Clients (secret "secret-<id>"):
//   gateway-tests: client_credentials, any resource, scopes "mcp:tools mcp:admin"
//   gateway-upstream: the gateway's own client for its upstream (client_credentials, introspection, and
//     token exchange, RFC 8693: see `tokenExchange`)
// Interactive clients register themselves (RFC 7591; public clients with loopback redirect URIs and
// token_endpoint_auth_method "none") and go through authorization code with PKCE without a human: every
// interaction logs in the fixed account ACCOUNT and consents to what was asked (see `interact`); refresh tokens
// are issued to every client allowed the refresh_token grant.
import { generateKeyPairSync } from 'node:crypto';
import { randomUUID } from 'node:crypto';
import { SignJWT, createLocalJWKSet, jwtVerify } from 'jose';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.argv[2] || 0);
const ttl = Number(process.argv[3] || 300);
const issuer = `http://127.0.0.1:${port}`;
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signing = { ...privateKey.export({ format: 'jwk' }), kid: 'signing-1', use: 'sig', alg: 'RS256' };
const SCOPES = 'mcp:tools mcp:admin';
const ACCOUNT = 'test-user';
const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';

// With PKJWT_JWKS set (a JSON key set of public keys), the client "gateway-pkjwt" authenticates with
// private_key_jwt (RFC 7523) signed by those keys, for client credentials.
function privateKeyJwtClient() {
  if (!process.env.PKJWT_JWKS) return [];
  return [{
    client_id: 'gateway-pkjwt', grant_types: ['client_credentials'], redirect_uris: [], response_types: [],
    scope: SCOPES, token_endpoint_auth_method: 'private_key_jwt', jwks: JSON.parse(process.env.PKJWT_JWKS),
  }];
}

const client = (id) => ({
  client_id: id, client_secret: `secret-${id}`, grant_types: ['client_credentials'], redirect_uris: [],
  response_types: [], scope: SCOPES,
});

const provider = new Provider(issuer, {
  jwks: { keys: [signing] },
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  issueRefreshToken: (ctx, c) => c.grantTypeAllowed('refresh_token'),
  clients: [client('gateway-tests'), { ...client('gateway-upstream'), grant_types: ['client_credentials', TOKEN_EXCHANGE] },
    ...privateKeyJwtClient()],
  scopes: ['openid', 'offline_access', 'mcp:tools', 'mcp:admin'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    // RFC 8628 for the stdio door's device login; the confirmation page's form is posted by the test's headless
    // user agent, and the login and consent that follow answer themselves like any interaction.
    deviceFlow: { enabled: true },
    introspection: { enabled: true },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, c, oneOf) => oneOf,
      useGrantedResource: () => true,
      // A resource whose path holds "/opaque/" gets opaque tokens (for the introspection tests), others JWTs.
      getResourceServerInfo: (ctx, resource) => ({
        scope: SCOPES, audience: resource, accessTokenTTL: ttl,
        accessTokenFormat: new URL(resource).pathname.includes('/opaque/') ? 'opaque' : 'jwt',
      }),
    },
  },
});
provider.proxy = false;

// The interaction a browser would show, answered at once: the login prompt with ACCOUNT, the consent prompt with a
// grant of exactly the OpenID scopes and resource scopes the request is missing.
async function interact(ctx) {
  const { prompt, params, session, grantId } = await provider.interactionDetails(ctx.req, ctx.res);
  if (prompt.name === 'login') {
    return { login: { accountId: ACCOUNT } };
  }
  const grant = grantId ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const { missingOIDCScope, missingOIDCClaims, missingResourceScopes } = prompt.details;
  if (missingOIDCScope) grant.addOIDCScope(missingOIDCScope.join(' '));
  if (missingOIDCClaims) grant.addOIDCClaims(missingOIDCClaims);
  for (const [resource, scopes] of Object.entries(missingResourceScopes || {})) {
    grant.addResourceScope(resource, scopes.join(' '));
  }
  return { consent: { grantId: await grant.save() } };
}

// RFC 7591 §3.2.1 lets a server replace the metadata a client asks for. The SDKs register with the scopes of
// their first challenge; a server that confined them to those could never grant a step-up (2025-11-25
// basic/authorization, "Scope Challenge Handling"), so like many servers this one drops `scope` at registration.
provider.use(async (ctx, next) => {
  if (ctx.method === 'POST' && ctx.path === '/reg' && ctx.is('application/json')) {
    const chunks = [];
    for await (const chunk of ctx.req) chunks.push(chunk);
    const { scope, ...metadata } = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
    ctx.request.body = metadata;
  }
  return next();
});

provider.use(async (ctx, next) => {
  if (ctx.method !== 'GET' || !/^\/interaction\/[^/]+$/.test(ctx.path)) return next();
  const result = await interact(ctx);
  ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false }));
});
// RFC 8693 token exchange, which oidc-provider does not build in: the subject token must be an access token this
// server signed (verified with its own public key); the issued token is a JWT access token for the requested
// `resource`, whose subject is the subject token's, whose client_id and `act` name the exchanging client, and
// whose scopes are those asked for that the subject token holds (never more).
const { d, p, q, dp, dq, qi, ...publicJwk } = signing;
const ownKeys = createLocalJWKSet({ keys: [publicJwk] });

async function tokenExchange(ctx) {
  const { params, client } = ctx.oidc;
  if (params.subject_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest(`subject_token_type must be ${ACCESS_TOKEN_TYPE}`);
  }
  const resource = Array.isArray(params.resource) ? params.resource : [params.resource].filter(Boolean);
  if (resource.length !== 1) throw new errors.InvalidTarget('exactly one resource is required');
  let subject;
  try {
    ({ payload: subject } = await jwtVerify(params.subject_token, ownKeys, { issuer, typ: 'at+jwt' }));
  } catch (err) {
    throw new errors.InvalidGrant(`subject_token: ${err.code || err.message}`);
  }
  const held = new Set(String(subject.scope || '').split(' ').filter(Boolean));
  const scope = (params.scope ? params.scope.split(' ') : [...held]).filter((s) => held.has(s)).join(' ');
  const now = Math.floor(Date.now() / 1000);
  const accessToken = await new SignJWT({ scope, client_id: client.clientId, act: { sub: client.clientId } })
    .setProtectedHeader({ alg: 'RS256', typ: 'at+jwt', kid: signing.kid })
    .setIssuer(issuer).setSubject(String(subject.sub)).setAudience(resource[0])
    .setIssuedAt(now).setExpirationTime(now + ttl).setJti(randomUUID())
    .sign(privateKey);
  ctx.body = {
    access_token: accessToken, issued_token_type: ACCESS_TOKEN_TYPE, token_type: 'Bearer', expires_in: ttl,
    scope,
  };
}
provider.registerGrantType(TOKEN_EXCHANGE, tokenExchange,
  ['subject_token', 'subject_token_type', 'resource', 'scope', 'requested_token_type', 'audience']);

const server = provider.listen(port, '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
