// The official TypeScript SDK's Streamable HTTP client transport (a real third-party client) speaking 2025-03-26
// to the gateway, sending JSON-RPC batches (2025-03-26 basic §Batching; docs/design/eras.md#json-rpc-batches-2025-03-26-only). Exits non-zero on
// the first broken expectation. Usage: node batch_client.mjs GATEWAY_URL
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const url = new URL(process.argv[2]);
const waiting = new Map(); // id -> resolve
const transport = new StreamableHTTPClientTransport(url);
let sampled = 0;

transport.onerror = (error) => { console.error('transport error:', error); };
transport.onmessage = (message) => {
  if (message.method === 'sampling/createMessage' && message.id !== undefined) {
    sampled += 1; // answered at once, on its own POST, while the batch's stream stays open
    transport.send({ jsonrpc: '2.0', id: message.id, result: {
      role: 'assistant', content: { type: 'text', text: 'a sampled answer' }, model: 'batch-client' } });
    return;
  }
  if (message.id !== undefined && waiting.has(message.id)) {
    waiting.get(message.id)(message);
    waiting.delete(message.id);
  }
};

function answerTo(id, seconds = 10) {
  return new Promise((resolve, reject) => {
    waiting.set(id, resolve);
    setTimeout(() => reject(new Error(`no answer to ${id} in ${seconds} s`)), seconds * 1000).unref();
  });
}

function check(ok, what) {
  if (!ok) { throw new Error(`expectation failed: ${what}`); }
  console.log(`ok - ${what}`);
}

const call = (id, name, args = {}) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

async function main() {
  await transport.start();
  const init = answerTo(0);
  await transport.send({ jsonrpc: '2.0', id: 0, method: 'initialize', params: {
    protocolVersion: '2025-03-26', capabilities: { sampling: {} }, clientInfo: { name: 'ts-sdk-batch', version: '1' } } });
  const initialized = await init;
  check(initialized.result?.protocolVersion === '2025-03-26', 'the session negotiates 2025-03-26');
  transport.setProtocolVersion('2025-03-26');
  await transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' });

  // Requests answered as one JSON array.
  const plain = [answerTo('a'), answerTo('b')];
  await transport.send([call('a', 'test_simple_text'), { jsonrpc: '2.0', id: 'b', method: 'tools/list' }]);
  const [a, b] = await Promise.all(plain);
  check(Array.isArray(a.result?.content) && a.result.content.length > 0, 'a batched tools/call is answered');
  check(Array.isArray(b.result?.tools) && b.result.tools.length > 0, 'a batched tools/list is answered');

  // A bridged request in a batch: the answers and the live sampling request come on one SSE stream.
  const mixed = [answerTo('c'), answerTo('d')];
  await transport.send([call('c', 'test_sampling', { prompt: 'hello' }), call('d', 'test_simple_text')]);
  const [c, d] = await Promise.all(mixed);
  check(sampled === 1, 'the batch\'s bridged request asked for one sampling');
  check(c.result?.content?.[0]?.text === 'LLM response: a sampled answer', 'the bridged request completes');
  check(Array.isArray(d.result?.content), 'its sibling in the batch is answered too');

  // A bad element is answered alone; the rest still run.
  const bad = [answerTo('e'), answerTo('f')];
  await transport.send([{ jsonrpc: '2.0', id: 'e', method: 'initialize', params: {} }, call('f', 'test_simple_text')]);
  const [e, f] = await Promise.all(bad);
  check(e.error?.code === -32600, 'initialize inside a batch is refused alone (-32600)');
  check(Array.isArray(f.result?.content), 'the other element still runs');
  await transport.close();
}

main().then(() => process.exit(0), (error) => { console.error(error); process.exit(1); });
