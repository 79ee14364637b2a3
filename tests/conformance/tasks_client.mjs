// The official TypeScript SDK's client with its experimental 2025-11-25 task support (client.experimental.tasks)
// on the gateway's Streamable HTTP endpoint (docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks): it declares tasks, runs the core's build_project
// as tasks (callToolStream: tasks/get until input_required, then the blocking tasks/result, on whose stream the
// confirmation is asked), answered, declined, dismissed and failed, and one cancelled mid-way with tasks/cancel;
// last, one that fails while the client never polls it, told by notifications/tasks/status on the GET stream.
// Prints one JSON line; exits non-zero when the SDK throws.
// Usage: node tasks_client.mjs http://HOST:PORT/mcp
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateTaskResultSchema, ElicitRequestSchema, TaskStatusNotificationSchema }
  from '@modelcontextprotocol/sdk/types.js';

const RELATED = 'io.modelcontextprotocol/related-task';
const client = new Client({ name: 'ts-sdk-tasks', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} }, tasks: { list: {} } } });
let action = 'accept';
let asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push({ message: request.params.message, related: request.params._meta?.[RELATED] ?? null });
  return action === 'accept' ? { action, content: { confirm: true } } : { action };
});

async function build(answer, failure = 'none') {
  action = answer;
  asked = [];
  const out = { kinds: [] };
  const stream = client.experimental.tasks.callToolStream(
    { name: 'build_project', arguments: { project: 'demo', simulate_failure: failure } }, undefined,
    { task: { ttl: 60000 } });
  for await (const message of stream) {
    out.kinds.push(message.type);
    if (message.type === 'taskCreated') out.taskId = message.task.taskId;
    if (message.type === 'result') {
      out.result = { structured: message.result.structuredContent ?? null,
        related: message.result._meta?.[RELATED] ?? null };
    }
    if (message.type === 'error') out.error = { code: message.error.code, message: message.error.message };
  }
  out.final = (await client.experimental.tasks.getTask(out.taskId)).status;
  out.asked = asked;
  return out;
}

async function cancelledMidWay() {
  const created = await client.request({ method: 'tools/call', params: {
    name: 'build_project', arguments: { project: 'demo' }, task: { ttl: 60000 } } }, CreateTaskResultSchema);
  const taskId = created.task.taskId;
  const before = (await client.experimental.tasks.getTask(taskId)).status;
  const cancelled = await client.experimental.tasks.cancelTask(taskId);
  let again = null;
  try {
    await client.experimental.tasks.cancelTask(taskId);
  } catch (error) {
    again = error.code;
  }
  return { before, cancel: cancelled.status, final: (await client.experimental.tasks.getTask(taskId)).status, again };
}

// notifications/tasks/status as told, and who waits for one (each returns true once it is done waiting).
const told = [];
let waiters = [];

function toldOf(taskId, statuses) {  // the statuses told for taskId until one in statuses (or 30 s)
  const seen = () => told.filter((t) => t.taskId === taskId).map((t) => t.status);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(seen()), 30000);
    const check = () => {
      if (!seen().some((s) => statuses.includes(s))) return false;
      clearTimeout(timer);
      resolve(seen());
      return true;
    };
    if (!check()) waiters.push(check);
  });
}

async function unpolled() {
  client.setNotificationHandler(TaskStatusNotificationSchema, (notification) => {
    told.push(notification.params);
    waiters = waiters.filter((check) => !check());
  });
  const created = await client.request({ method: 'tools/call', params: {
    name: 'build_project', arguments: { project: 'demo', simulate_failure: 'protocol_error' }, task: { ttl: 60000 } } },
  CreateTaskResultSchema);
  return { taskId: created.task.taskId, told: await toldOf(created.task.taskId, ['completed', 'failed', 'cancelled']) };
}

await client.connect(new StreamableHTTPClientTransport(new URL(process.argv[2])));
const out = { tasks: client.getServerCapabilities()?.tasks ?? null };
out.accepted = await build('accept');
out.declined = await build('decline');
out.dismissed = await build('cancel');
out.failed = await build('accept', 'protocol_error');
out.cancelled = await cancelledMidWay();
out.listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => t.status).sort();
out.unpolled = await unpolled();
await client.close();
console.log(JSON.stringify(out));
