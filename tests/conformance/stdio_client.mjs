// The official TypeScript SDK's StdioClientTransport (a real third-party client) launching the gateway's stdio
// door, `python -m gateway stdio` (docs/design.md §35), as a desktop client launches its servers: a tool call with
// two live sampling rounds, a prompt that elicits, and a plain tool call, all over stdin/stdout. Exits non-zero
// on the first broken expectation. Usage: node stdio_client.mjs PYTHON WORKDIR [gateway stdio arguments...]
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CreateMessageRequestSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [python, cwd, ...doorArgs] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: python, args: ['-m', 'gateway', 'stdio', ...doorArgs], cwd, env: { ...process.env }, stderr: 'inherit' });
let negotiated;
transport.setProtocolVersion = (version) => { negotiated = version; }; // the SDK tells its transport, if it listens
const client = new Client({ name: 'ts-sdk-stdio', version: '1.0.0' },
  { capabilities: { sampling: {}, elicitation: { form: {} } } });

let sampled = 0;
let elicited = 0;
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  sampled += 1;
  const prompt = request.params.messages[0].content.text;
  const text = prompt.includes('JSON array') ? JSON.stringify(prompt.split('\n').slice(1, 4)) : 'A parser and a gateway.';
  return { role: 'assistant', content: { type: 'text', text }, model: 'ts-sdk-stdio', stopReason: 'endTurn' };
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
  check(negotiated === '2025-11-25', 'the session negotiates 2025-11-25 over stdio');
  const summary = await client.callTool({ name: 'summarize_repo', arguments: {} });
  check(!summary.isError && summary.content[0].text.includes('parser'), 'summarize_repo answers after live sampling');
  check(sampled === 2, 'the bridge asked for sampling twice, live on stdout');
  const prompt = await client.getPrompt({ name: 'draft_note', arguments: { topic: 'release' } });
  check(elicited === 1 && prompt.messages.length > 0, 'draft_note answers after one live elicitation');
  const echo = await client.callTool({ name: 'echo', arguments: { text: 'from node' } });
  check(!echo.isError && echo.content[0].text.includes('from node'), 'a plain tool call is answered');
  await client.close();
}

main().catch((error) => { console.error(error); process.exit(1); });
