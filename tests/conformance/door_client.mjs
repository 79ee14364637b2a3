// The official TypeScript SDK's client transports (real third-party clients) on the gateway's other doors
// (docs/design/doors.md#the-stdio-httpsse-and-websocket-doors-are-clients-of-the-streamable-http-door): StdioClientTransport launching `python -m gateway stdio`, as a desktop client launches its
// servers; SSEClientTransport on the HTTP+SSE door (/sse); WebSocketClientTransport on /ws (subprotocol mcp).
// Each runs a tool call with two live sampling rounds, a prompt that elicits and a plain tool call. Exits non-zero
// on the first broken expectation.
// Usage: node door_client.mjs stdio PYTHON WORKDIR [gateway stdio arguments...]
//        node door_client.mjs sse http://HOST:PORT/sse
//        node door_client.mjs ws ws://HOST:PORT/ws
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { WebSocketClientTransport } from '@modelcontextprotocol/sdk/client/websocket.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [door, target, cwd, ...doorArgs] = process.argv.slice(2);
const transport = {
  stdio: () => new StdioClientTransport({
    command: target, args: ['-m', 'gateway', 'stdio', ...doorArgs], cwd, env: { ...process.env }, stderr: 'inherit' }),
  sse: () => new SSEClientTransport(new URL(target)),
  ws: () => new WebSocketClientTransport(new URL(target)),
}[door]();
let negotiated;
const told = transport.setProtocolVersion?.bind(transport);
transport.setProtocolVersion = (version) => { negotiated = version; told?.(version); }; // the SDK tells its transport
const client = new Client({ name: `ts-sdk-${door}`, version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: { form: {} } } });

let sampled = 0;
let elicited = 0;
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  sampled += 1;
  const prompt = request.params.messages[0].content.text;
  const text = prompt.includes('JSON array') ? JSON.stringify(prompt.split('\n').slice(1, 4)) : 'A parser and a gateway.';
  return { role: 'assistant', content: { type: 'text', text }, model: `ts-sdk-${door}`, stopReason: 'endTurn' };
});
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  elicited += 1;
  check(request.params.requestedSchema?.properties?.tone !== undefined, 'the elicitation asks for a tone');
  return { action: 'accept', content: { tone: 'formal' } };
});

function check(ok, what) {
  if (!ok) { throw new Error(`expectation failed: ${what}`); }
  console.log(`ok - ${what}`);
}

async function main() {
  await client.connect(transport);
  check(negotiated === '2025-11-25', `the session negotiates 2025-11-25 over ${door}`);
  const summary = await client.callTool({ name: 'summarize_repo', arguments: {} });
  check(!summary.isError && summary.content[0].text.includes('parser'), 'summarize_repo answers after live sampling');
  check(sampled === 2, 'the bridge asked for sampling twice, live on the door');
  const prompt = await client.getPrompt({ name: 'draft_note', arguments: { topic: 'release' } });
  check(elicited === 1 && prompt.messages.length > 0, 'draft_note answers after one live elicitation');
  const echo = await client.callTool({ name: 'echo', arguments: { text: 'from node' } });
  check(!echo.isError && echo.content[0].text.includes('from node'), 'a plain tool call is answered');
  await client.close();
}

main().catch((error) => { console.error(error); process.exit(1); });
