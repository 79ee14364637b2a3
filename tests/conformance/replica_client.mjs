// The official TypeScript SDK's Client over StreamableHTTPClientTransport (2025-11-25, a legacy client of the
// gateway) through a load balancer: one bridged tool call with two live sampling rounds. Prints one JSON line per
// HTTP request (its method, JSON-RPC kind and the X-Gateway-Replica that answered it), then the tool's result.
// Usage: node replica_client.mjs URL (tests/gateway/ops/test_haproxy.py runs it with this folder's SDK)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

function kind(init) {
  const method = init?.method ?? 'GET';
  if (method !== 'POST') {
    const headers = new Headers(init?.headers);
    return method === 'GET' && headers.get('last-event-id') ? 'GET resume' : method;
  }
  const message = JSON.parse(init.body);
  return `POST ${message.method ?? ('id' in message ? 'answer' : '?')}`;
}

async function watched(input, init) {
  const what = kind(init);
  const response = await fetch(input, init);
  console.log(JSON.stringify({ request: what, replica: response.headers.get('x-gateway-replica'),
                               status: response.status }));
  return response;
}

const transport = new StreamableHTTPClientTransport(new URL(process.argv[2]), { fetch: watched });
const client = new Client({ name: 'ts-sdk-replicas', version: '1' },
                          { capabilities: { sampling: {}, roots: { listChanged: true } } });
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  const prompt = request.params.messages[0].content.text;
  const text = prompt.includes('JSON array') ? JSON.stringify(prompt.split('\n').slice(1, 4))
                                             : 'A small repository with a parser and a gateway.';
  return { role: 'assistant', content: { type: 'text', text }, model: 'ts-sdk', stopReason: 'endTurn' };
});
client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: 'file:///work/notes', name: 'notes' }] }));

await client.connect(transport);
const result = await client.callTool({ name: 'summarize_repo', arguments: { repo: 'demo' } });
console.log(JSON.stringify({ result }));
await transport.terminateSession();
await client.close();
