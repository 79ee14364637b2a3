// The official TypeScript SDK's client WITHOUT task support (no `tasks` capability, plain client.callTool) on the
// gateway's Streamable HTTP endpoint, running the core's long-running build_project: the core answers the call
// with a task and the gateway drives it (docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks), so the client only sees its call stay open, the
// confirmation asked live and, given onprogress, the task's status messages as notifications/progress.
// Mode `flows`: completed with the confirmation accepted, declined, dismissed (elicitation action 'cancel': the
// call fails, the task ends cancelled), failed (simulate_failure protocol_error: a JSON-RPC error; tool_error: an
// isError result), then a plain call on the same session. Mode `slow` (a core with slow build steps): one build
// with onprogress, and one aborted with an AbortSignal at its first progress (the SDK sends
// notifications/cancelled), then a plain call on the same session.
// Prints one JSON line; exits non-zero when the SDK throws where it should not.
// Usage: node plain_tasks_client.mjs http://HOST:PORT/mcp flows|slow
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, mode] = process.argv.slice(2);
const client = new Client({ name: 'ts-sdk-plain', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} } } });
let action = 'accept';
let asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return action === 'accept' ? { action, content: { confirm: true } } : { action };
});

function thrown(error) {
  return { code: error.code ?? null, message: String(error.message), data: error.data ?? null };
}

// One build_project call as any 2025 client makes it: its result, or the error it threw; what it was asked.
async function build(answer, failure = 'none', options = {}) {
  action = answer;
  asked = [];
  const out = {};
  try {
    const result = await client.callTool(
      { name: 'build_project', arguments: { project: 'demo', simulate_failure: failure } }, undefined, options);
    out.result = { isError: result.isError ?? false, structured: result.structuredContent ?? null };
  } catch (error) {
    out.error = thrown(error);
  }
  out.asked = asked;
  return out;
}

async function echo() {
  const result = await client.callTool({ name: 'echo', arguments: { text: 'still here' } });
  return result.content[0].text;
}

async function flows() {
  const out = {};
  out.accepted = await build('accept');
  out.declined = await build('decline');
  out.dismissed = await build('cancel');
  out.failed = await build('accept', 'protocol_error');
  out.broken = await build('accept', 'tool_error');
  return out;
}

async function slow() {
  const out = {};
  const progress = [];
  out.progressed = await build('accept', 'none', { onprogress: (p) => progress.push(p) });
  out.progressed.progress = progress;
  const controller = new AbortController();
  const beforeAbort = [];
  out.aborted = await build('accept', 'none', { signal: controller.signal, onprogress: (p) => {
    beforeAbort.push(p);
    if (!controller.signal.aborted) controller.abort('the user stopped the build');
  } });
  out.aborted.progress = beforeAbort;
  return out;
}

const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const out = { version: transport.protocolVersion ?? null, capabilities: client.getServerCapabilities() ?? {} };
out.tool = (await client.listTools()).tools.find((t) => t.name === 'build_project') ?? null;
Object.assign(out, mode === 'slow' ? await slow() : await flows());
out.echo = await echo();
await client.close();
console.log(JSON.stringify(out));
