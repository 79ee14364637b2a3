// The official TypeScript 2026 client (`@modelcontextprotocol/client`, pinned in package.json) with its version
// negotiation pinned to 2026-07-28, through the gateway's reverse bridge (docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge) to a 2025-11-25-only
// notes server: legacy_notes_server.mjs (TypeScript SDK 1.x) or tests/gateway/http/legacy_sdk1_server.py (Python
// `mcp` 1.x), which share tool names and answers. The client's own multi-round-trip driver answers each
// `input_required` round through the handlers below; the server asked for each question live.
// Exits non-zero on the first broken expectation, printing `ok - ...` for each one met.
//
// Usage: node reverse_client.mjs GATEWAY_URL
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = process.argv[2];
let elicitAction = 'accept'; // what the elicitation handler answers next
const updates = [];

function check(ok, what, seen) {
  if (!ok) throw new Error(`expectation failed: ${what}${seen === undefined ? '' : `: got ${JSON.stringify(seen)}`}`);
  console.log(`ok - ${what}`);
}

const textOf = (result) => result.content?.[0]?.text;

async function connect() {
  const client = new Client({ name: 'ts-2026-reverse', version: '1.0.0' }, {
    capabilities: { sampling: {}, elicitation: { form: {}, url: {} }, roots: {} },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
  });
  client.setRequestHandler('sampling/createMessage', async (request) => ({
    role: 'assistant', model: 'm', content: { type: 'text', text: `<${request.params.messages[0].content.text}>` } }));
  client.setRequestHandler('elicitation/create', async (request) => {
    if (elicitAction !== 'accept') return { action: elicitAction };
    return request.params.mode === 'url' ? { action: 'accept' } : { action: 'accept', content: { confirm: true } };
  });
  client.setRequestHandler('roots/list', async () => ({ roots: [{ uri: 'file:///work/a', name: 'a' }] }));
  client.setNotificationHandler('notifications/resources/updated', (notification) => {
    updates.push(notification.params.uri);
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

async function flows(client) {
  check(client.getNegotiatedProtocolVersion() === '2026-07-28', 'the client negotiated 2026-07-28 (pinned)',
    client.getNegotiatedProtocolVersion());
  const names = (await client.listTools()).tools.map((tool) => tool.name);
  check(['ask_model', 'two_rounds', 'delete_note', 'open_link', 'show_roots', 'echo'].every((n) => names.includes(n)),
    'the legacy server\'s tools are listed', names);
  const call = async (name, args = {}, options = undefined) => textOf(await client.callTool({ name, arguments: args },
    options));
  let said = await call('echo', { text: 'plain' });
  check(said === 'plain', 'a plain call', said);
  said = await call('ask_model', { topic: 'owls' });
  check(said === 'model said: <about owls>', 'a sampling round', said);
  said = await call('two_rounds');
  check(said === '<first> then <second after <first>>', 'two rounds, the second built on the first', said);
  said = await call('delete_note', { note: 'n1' });
  check(said === 'deleted n1', 'a form elicitation, accepted', said);
  for (const action of ['decline', 'cancel']) {
    elicitAction = action;
    said = await call('delete_note', { note: 'n1' });
    check(said === `${action}: nothing deleted`, `a form elicitation, answered ${action}`, said);
  }
  for (const action of ['accept', 'decline', 'cancel']) {
    elicitAction = action;
    said = await call('open_link', { note: 'n1' });
    const expected = `${action}: ${action === 'accept' ? 'link opened' : 'not shared'}`;
    check(said === expected, `a URL elicitation, answered ${action}`, said);
  }
  elicitAction = 'accept';
  said = await call('show_roots');
  check(said === 'file:///work/a', 'a roots round', said);
  const progress = []; // the server's (with its total): the client adds its own, one per round, without one
  said = await call('count', { n: 2 }, { onprogress: (p) => { if (p.total !== undefined) progress.push(p.progress); } });
  check(said === 'counted 2, <go on>' && progress.join(',') === '1,2,3', 'progress around a round', [said, progress]);
  const prompt = await client.getPrompt({ name: 'greet', arguments: { name: 'Ada' } });
  check(JSON.stringify(prompt.messages[0].content).includes('Ada'), 'a prompt', prompt);
  const read = await client.readResource({ uri: 'notes://readme' });
  check(read.contents[0].text === 'the readme', 'a resource', read);
}

async function listen(client) {
  const subscription = await client.listen({ resourceSubscriptions: ['notes://readme'] });
  check(JSON.stringify(subscription.honoredFilter.resourceSubscriptions) === '["notes://readme"]',
    'a listen is acknowledged with the resource', subscription.honoredFilter);
  const said = textOf(await client.callTool({ name: 'subscribed', arguments: {} }));
  check(said.split(',').includes('notes://readme'), 'the listen subscribed the legacy session', said);
  await client.callTool({ name: 'touch', arguments: { uri: 'notes://readme' } });
  for (let i = 0; i < 200 && !updates.includes('notes://readme'); i += 1) {
    await new Promise((resolve) => { setTimeout(resolve, 25); }); // sleep: poll for the notification
  }
  check(updates.includes('notes://readme'), 'the resource update reaches the listen', updates);
  await subscription.close();
}

async function hangUp(client) {
  const controller = new AbortController();
  const running = client.callTool({ name: 'slow', arguments: {} }, { signal: controller.signal });
  setTimeout(() => controller.abort(), 300);
  let failed = false;
  try { await running; } catch { failed = true; }
  check(failed, 'an aborted call ends on the client');
  let said = '';
  for (let i = 0; i < 200 && !said.split(',').includes('slow'); i += 1) {
    said = textOf(await client.callTool({ name: 'cancelled', arguments: {} })) ?? '';
    if (!said.split(',').includes('slow')) await new Promise((resolve) => { setTimeout(resolve, 25); }); // sleep: poll
  }
  check(said.split(',').includes('slow'), 'the abort cancelled the legacy call', said);
}

const client = await connect();
try {
  await flows(client);
  await listen(client);
  await hangUp(client);
} finally {
  await client.close();
}
