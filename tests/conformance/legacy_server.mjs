// A 2025-11-25-only MCP server written with the official TypeScript SDK 1.x (the version pinned in package.json):
// the conformance suite's tools, prompts and resources served the way deployed 2025 servers serve them, for
// run.sh's reverse lane (the gateway in front of it, the suite speaking 2026-07-28 to the gateway;
// docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge). Stateful Streamable HTTP, one SDK `Server` per session, as the SDK's own examples do.
//
// Where the 2026 fixture (fixture.py) returns `input_required` rounds, this server asks its client live, on the
// call's own stream (2025-11-25 client/sampling, client/elicitation, client/roots): `createMessage`,
// `elicitInput` and `listRoots` with `relatedRequestId`. It has no requestState of its own: the call stays open
// while the gateway holds the state. It cannot name the keys of `inputRequests` either (a 2025 server has no such
// notion): the gateway mints them, which is what the lane's baseline explains.
//
// Usage: node legacy_server.mjs PORT   (serves http://127.0.0.1:PORT/mcp; logs nothing but errors)
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryTaskMessageQueue, InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks';
import {
  CallToolRequestSchema, CompleteRequestSchema, ErrorCode, GetPromptRequestSchema, ListPromptsRequestSchema,
  ListResourcesRequestSchema, ListResourceTemplatesRequestSchema, ListToolsRequestSchema, McpError,
  ReadResourceRequestSchema, SubscribeRequestSchema, UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { serveLegacy } from './legacy_http.mjs';

// The suite's own sample payloads (its everything-server): a 1x1 red PNG and a minimal WAV.
const IMAGE_PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const AUDIO_WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';
const NO_ARGS = { type: 'object', properties: {} };
const JSON_SCHEMA_2020_12 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: { address: { $anchor: 'addressDef', type: 'object',
    properties: { street: { type: 'string' }, city: { type: 'string' } } } },
  properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' },
    contactMethod: { type: 'string', enum: ['phone', 'email'] }, phone: { type: 'string' }, email: { type: 'string' } },
  allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
  if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
  then: { required: ['phone'] },
  else: { required: ['email'] },
  additionalProperties: false,
};
const sessions = new Map(); // session id -> { transport, server }

const text = (value, isError = false) => ({ content: [{ type: 'text', text: value }], ...(isError ? { isError } : {}) });
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });
const form = (message, properties, required = []) => ({
  mode: 'form', message, requestedSchema: { type: 'object', properties, required } });
const sample = (prompt, maxTokens) => ({
  messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens });
const sampled = (result) => {
  const blocks = Array.isArray(result.content) ? result.content : [result.content];
  return blocks.filter((b) => b?.type === 'text').map((b) => b.text).join(' ') || 'No response';
};
const field = (answer, name) => answer.content?.[name] ?? 'unknown';
const stringArg = (name, description) => ({
  type: 'object', properties: { [name]: { type: 'string', description } }, required: [name] });

// ---------------------------------------------------------------------------------------------- live requests
// Each goes out on the call's own stream (relatedRequestId), as 2025-11-25 basic/transports lets a server do.
function asker(server, extra) {
  const related = { relatedRequestId: extra.requestId };
  return {
    elicit: (params) => server.elicitInput(params, related),
    sample: (params) => server.createMessage(params, related),
    roots: () => server.listRoots(undefined, related),
  };
}

// ---------------------------------------------------------------------------------------------- tools
const TOOLS = {
  test_simple_text: [NO_ARGS, async () => text('This is a simple text response for testing.')],
  greet: [stringArg('name', 'Who to greet'), async (args) => text(`Hello, ${args.name}!`)],
  test_image_content: [NO_ARGS, async () => ({ content: [{ type: 'image', data: IMAGE_PNG, mimeType: 'image/png' }] })],
  test_audio_content: [NO_ARGS, async () => ({ content: [{ type: 'audio', data: AUDIO_WAV, mimeType: 'audio/wav' }] })],
  test_embedded_resource: [NO_ARGS, async () => ({ content: [{ type: 'resource', resource: {
    uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }] })],
  test_multiple_content_types: [NO_ARGS, async () => ({ content: [
    { type: 'text', text: 'Multiple content types test:' },
    { type: 'image', data: IMAGE_PNG, mimeType: 'image/png' },
    { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json',
      text: JSON.stringify({ test: 'data', value: 123 }) } },
  ] })],
  // tools §Error Handling: a tool failure is a result with isError, not a JSON-RPC error.
  test_error_handling: [NO_ARGS, async () => text('This tool intentionally returns an error for testing', true)],
  test_tool_with_logging: [NO_ARGS, async (args, extra) => {
    for (const [i, message] of ['Tool execution started', 'Tool processing data', 'Tool execution completed']
      .entries()) {
      if (i) await sleep(50);
      await extra.sendNotification({ method: 'notifications/message', params: {
        level: 'info', logger: 'conformance-legacy', data: message } });
    }
    return text('Tool with logging executed successfully');
  }],
  test_tool_with_progress: [NO_ARGS, async (args, extra) => {
    const token = extra._meta?.progressToken;
    for (const [i, progress] of [0, 50, 100].entries()) {
      if (i) await sleep(50);
      if (token !== undefined) {
        await extra.sendNotification({ method: 'notifications/progress', params: {
          progressToken: token, progress, total: 100, message: `Completed step ${progress} of 100` } });
      }
    }
    return text(String(token ?? 0));
  }],
  test_logging_tool: [NO_ARGS, async (args, extra) => {
    await extra.sendNotification({ method: 'notifications/message', params: {
      level: 'info', logger: 'conformance-legacy', data: 'Diagnostic trace logging activated' } });
    return text('Logging evaluated');
  }],
  test_streaming_elicitation: [NO_ARGS, async (args, extra) => {
    const token = extra._meta?.progressToken;
    if (token !== undefined) {
      await extra.sendNotification({ method: 'notifications/progress', params: {
        progressToken: token, progress: 50, total: 100, message: 'half way' } });
    }
    return text('Streaming complete');
  }],
  // A 2025 server announces list changes on each session's GET stream; every session hears it.
  test_trigger_tool_change: [NO_ARGS, async () => broadcast((s) => s.sendToolListChanged())],
  test_trigger_prompt_change: [NO_ARGS, async () => broadcast((s) => s.sendPromptListChanged())],
  // Schemas pass through as the server wrote them: a 2020-12 schema, and SEP-2243's x-mcp-header annotation (a
  // 2025 server may carry it; checking the Mcp-Param-* headers is then the 2026 side's business, the gateway's).
  json_schema_2020_12_tool: [JSON_SCHEMA_2020_12, async (args) => text(
    `JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`)],
  test_custom_header: [{ type: 'object', required: ['region'], properties: { region: {
    type: 'string', description: 'mirrored as Mcp-Param-Region', 'x-mcp-header': 'Region' } } },
  async (args) => text(`region=${args.region}`)],
  test_missing_capability: [NO_ARGS, async (args, extra, server) => {
    await asker(server, extra).sample(sample('Say yes', 5));
    return text('Success');
  }],
  test_sampling: [stringArg('prompt', 'The prompt to send to the LLM'), async (args, extra, server) => {
    const answer = await asker(server, extra).sample(sample(String(args.prompt), 100));
    return text(`LLM response: ${sampled(answer)}`);
  }],
  test_elicitation: [stringArg('message', 'The message to show the user'), async (args, extra, server) => {
    const answer = await asker(server, extra).elicit(form(String(args.message), {
      username: { type: 'string', description: "User's response" },
      email: { type: 'string', description: "User's email address" } }, ['username', 'email']));
    return text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
  }],
  test_elicitation_sep1034_defaults: [NO_ARGS, async (args, extra, server) => {
    const answer = await asker(server, extra).elicit(form('Please review and update the form fields with defaults', {
      name: { type: 'string', description: 'User name', default: 'John Doe' },
      age: { type: 'integer', description: 'User age', default: 30 },
      score: { type: 'number', description: 'User score', default: 95.5 },
      status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'],
        default: 'active' },
      verified: { type: 'boolean', description: 'Verification status', default: true } }));
    return text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
  }],
  test_elicitation_sep1330_enums: [NO_ARGS, async (args, extra, server) => {
    const choices = (values, title) => values.map((value, i) => ({ const: value, title: title[i] }));
    const answer = await asker(server, extra).elicit(form('Please select options from the enum fields', {
      untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
      titledSingle: { type: 'string', description: 'Select one option with titles',
        oneOf: choices(['value1', 'value2', 'value3'], ['First Option', 'Second Option', 'Third Option']) },
      legacyEnum: { type: 'string', description: 'Select one option (legacy)', enum: ['opt1', 'opt2', 'opt3'],
        enumNames: ['Option One', 'Option Two', 'Option Three'] },
      untitledMulti: { type: 'array', description: 'Select multiple options', minItems: 1, maxItems: 3,
        items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
      titledMulti: { type: 'array', description: 'Select multiple options with titles', minItems: 1, maxItems: 3,
        items: { anyOf: choices(['value1', 'value2', 'value3'], ['First Choice', 'Second Choice', 'Third Choice']) } },
    }));
    return text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
  }],
  // --- the SEP-2322 tools, asked live; the gateway turns each question into an inputRequests entry
  test_input_required_result_elicitation: [NO_ARGS, async (args, extra, server) => {
    const answer = await asker(server, extra).elicit(form('What is your name?', { name: { type: 'string' } }, ['name']));
    return text(`Hello, ${field(answer, 'name')}!`);
  }],
  test_input_required_result_sampling: [NO_ARGS, async (args, extra, server) => {
    const answer = await asker(server, extra).sample(sample('What is the capital of France?', 100));
    return text(`Sampling result: ${sampled(answer)}`);
  }],
  test_input_required_result_list_roots: [NO_ARGS, async (args, extra, server) => {
    const { roots } = await asker(server, extra).roots();
    return text(`Found ${roots.length} root(s): ${roots.map((r) => r.uri).join(', ')}`);
  }],
  test_input_required_result_request_state: [NO_ARGS, async (args, extra, server) => {
    // The call itself is the state: it is still open when the answer arrives (the gateway seals its handle).
    const answer = await asker(server, extra).elicit(form('Please confirm', { ok: { type: 'boolean' } }, ['ok']));
    return text(answer.content?.ok === true ? 'state-ok: requestState validated' : 'not confirmed');
  }],
  test_input_required_result_multiple_inputs: [NO_ARGS, async (args, extra, server) => {
    const ask = asker(server, extra); // three questions at once, as one round
    const [name, greeting, roots] = await Promise.all([
      ask.elicit(form('What is your name?', { name: { type: 'string' } }, ['name'])),
      ask.sample(sample('Generate a greeting', 50)),
      ask.roots(),
    ]);
    return text(`Name: ${field(name, 'name')}; Greeting: ${sampled(greeting)}; Roots: ${roots.roots.length}`);
  }],
  test_input_required_result_multi_round: [NO_ARGS, async (args, extra, server) => {
    const ask = asker(server, extra);
    const name = await ask.elicit(form('Step 1: What is your name?', { name: { type: 'string' } }, ['name']));
    const color = await ask.elicit(form('Step 2: What is your favorite color?', { color: { type: 'string' } },
      ['color']));
    return text(`Hello ${field(name, 'name')}, your favorite color is ${field(color, 'color')}`);
  }],
  test_input_required_result_tampered_state: [NO_ARGS, async (args, extra, server) => {
    const answer = await asker(server, extra).elicit(form('Please confirm', { ok: { type: 'boolean' } }, ['ok']));
    return text(`confirmed: ${answer.content?.ok === true}`);
  }],
  test_input_required_result_capabilities: [NO_ARGS, async (args, extra, server) => {
    // 2025-11-25 basic/lifecycle: a server asks only for what the session's initialize declared.
    const caps = server.getClientCapabilities() ?? {};
    const ask = asker(server, extra);
    const said = [];
    if (caps.sampling) said.push(`sampled: ${sampled(await ask.sample(sample('Say something', 20)))}`);
    if (caps.elicitation) said.push(`elicited: ${(await ask.elicit(form('Anything?', { x: { type: 'string' } }))).action}`);
    return text(said.length ? said.join('; ') : 'no client capabilities to ask with');
  }],
};

// ---------------------------------------------------------------------------------------------- 2025 tasks
// The tasks-* scenarios' fixtures (greet, slow_compute, failing_job, protocol_error_job, confirm_delete,
// multi_input, test_tool_with_task) as a 2025-11-25 server has them (basic/utilities/tasks): the client asks for a
// task with `params.task` on a tool whose `execution.taskSupport` allows it; the server answers `{task}` at once
// and runs the job in the background; its questions go to the task's message queue with `relatedTask` (the
// SDK delivers them on the client's `tasks/result` stream) while the task is `input_required`; `tasks/result`
// answers the stored result. Called without `params.task`, an optional tool runs inline, asking live.
const tasks = new InMemoryTaskStore(); // one store: the SDK binds each task to the session that created it
const POLL_MS = 100;

// What a job sees: how to ask (within its task, or live on its call) and whether its task was cancelled.
function jobContext(server, extra, taskId) {
  if (!taskId) {
    return { ask: (params) => asker(server, extra).elicit(params), cancelled: async () => false };
  }
  const store = extra.taskStore;
  return {
    ask: async (params) => {
      await store.updateTaskStatus(taskId, 'input_required').catch(() => {});
      const answer = await server.elicitInput(params, { relatedTask: { taskId }, timeout: 600000 });
      const now = await store.getTask(taskId).catch(() => null);
      if (now?.status === 'input_required') await store.updateTaskStatus(taskId, 'working').catch(() => {});
      return answer;
    },
    cancelled: async () => (await store.getTask(taskId).catch(() => null))?.status === 'cancelled',
  };
}

async function pause(ctx, seconds) { // a sleep a cancel ends early
  const until = Date.now() + seconds * 1000;
  while (Date.now() < until) {
    if (await ctx.cancelled()) return false;
    await sleep(Math.min(POLL_MS, until - Date.now()));
  }
  return true;
}

// name -> [inputSchema, taskSupport, job]; a job answers [status, result] (a 2025 server fails the task of a
// tool that reported an error, which the gateway reports to 2026 clients as completed with isError).
const TASK_TOOLS = {
  slow_compute: [{ type: 'object', properties: { seconds: { type: 'number' }, label: { type: 'string' } } }, 'optional',
    async (args, ctx) => {
      const seconds = Number(args.seconds ?? 1);
      if (!(await pause(ctx, seconds))) return null;
      return ['completed', text(`computed ${args.label ?? 'result'} after ${seconds}s`)];
    }],
  failing_job: [NO_ARGS, 'required', async (args, ctx) => {
    if (!(await pause(ctx, 1))) return null;
    return ['failed', text('failing_job failed, as it always does', true)];
  }],
  protocol_error_job: [NO_ARGS, 'optional', async () => ['failed', { content: [] }]],
  confirm_delete: [stringArg('filename', 'The file to delete'), 'optional', async (args, ctx) => {
    const answer = await ctx.ask(form(`Delete ${args.filename}?`, { confirm: { type: 'boolean' } }, ['confirm']));
    const yes = answer.action === 'accept' && answer.content?.confirm === true;
    return ['completed', text(yes ? `deleted ${args.filename}` : `kept ${args.filename}`)];
  }],
  multi_input: [NO_ARGS, 'optional', async (args, ctx) => {
    const fields = { name: { type: 'string' }, confirm: { type: 'boolean' } };
    const [first, second] = await Promise.all([ctx.ask(form('First input?', fields)), ctx.ask(form('Second input?', fields))]);
    return ['completed', text(`first=${field(first, 'name')} second=${field(second, 'name')}`)];
  }],
  test_tool_with_task: [NO_ARGS, 'required', async (args, ctx) => {
    const answer = await ctx.ask(form('What is your name?', { user_name: { type: 'string' } }, ['user_name']));
    return ['completed', text(`Hello, ${field(answer, 'user_name')}!`)];
  }],
};

async function callTaskTool(name, request, extra, server) {
  const [, support, job] = TASK_TOOLS[name];
  const args = request.params.arguments ?? {};
  const wanted = request.params.task;
  if (!wanted) {
    if (support === 'required') throw new McpError(ErrorCode.MethodNotFound, `${name} runs only as a task`);
    const [, result] = (await job(args, jobContext(server, extra, null))) ?? [null, text('cancelled')];
    return result;
  }
  const task = await extra.taskStore.createTask({ ttl: wanted.ttl ?? 300000, pollInterval: POLL_MS });
  (async () => {
    try {
      const done = await job(args, jobContext(server, extra, task.taskId));
      if (done) await extra.taskStore.storeTaskResult(task.taskId, done[0], done[1]);
    } catch (error) {
      // cancelled meanwhile (a terminal task takes no result), or the job broke: the task failed
      await extra.taskStore.storeTaskResult(task.taskId, 'failed', text(String(error?.message ?? error), true))
        .catch(() => {});
    }
  })();
  return { task };
}

async function broadcast(send) {
  for (const { server } of sessions.values()) {
    await send(server).catch(() => {}); // a session that ended meanwhile
  }
  return text('Mutation triggered');
}

// ---------------------------------------------------------------------------------------------- prompts
const arg = (name, description) => ({ name, description, required: true });
const messages = (...contents) => ({ messages: contents.map((content) => ({ role: 'user', content })) });
const PROMPTS = {
  test_simple_prompt: [[], async () => messages({ type: 'text', text: 'This is a simple prompt for testing.' })],
  test_prompt_with_arguments: [[arg('arg1', 'First test argument'), arg('arg2', 'Second test argument')],
    async (args) => messages({ type: 'text', text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` })],
  test_prompt_with_embedded_resource: [[arg('resourceUri', 'URI of the resource to embed')], async (args) => messages(
    { type: 'resource', resource: { uri: args.resourceUri, mimeType: 'text/plain',
      text: 'Embedded resource content for testing.' } },
    { type: 'text', text: 'Please process the embedded resource above.' })],
  test_prompt_with_image: [[], async () => messages({ type: 'image', data: IMAGE_PNG, mimeType: 'image/png' },
    { type: 'text', text: 'Please analyze the image above.' })],
  test_input_required_result_prompt: [[], async (args, extra, server) => {
    const answer = await asker(server, extra).elicit(form('What context should the prompt use?',
      { context: { type: 'string' } }, ['context']));
    return messages({ type: 'text', text: `Prompt with context: ${field(answer, 'context')}` });
  }],
};

// ---------------------------------------------------------------------------------------------- resources
const STATIC = {
  'test://static-text': { name: 'static-text', title: 'Static Text Resource', mimeType: 'text/plain',
    description: 'A static text resource for testing', text: 'This is the content of the static text resource.' },
  'test://static-binary': { name: 'static-binary', title: 'Static Binary Resource', mimeType: 'image/png',
    description: 'A static binary resource (image) for testing', blob: IMAGE_PNG },
  'test://watched-resource': { name: 'watched-resource', title: 'Watched Resource', mimeType: 'text/plain',
    description: 'A resource that can be subscribed to', text: 'Watched resource content' },
};
const TEMPLATE = /^test:\/\/template\/([^/]+)\/data$/;

function read(uri) {
  const entry = STATIC[uri];
  if (entry) {
    const body = entry.text !== undefined ? { text: entry.text } : { blob: entry.blob };
    return { contents: [{ uri, mimeType: entry.mimeType, ...body }] };
  }
  const match = TEMPLATE.exec(uri);
  if (match) {
    const data = JSON.stringify({ id: match[1], templateTest: true, data: `Data for ID: ${match[1]}` });
    return { contents: [{ uri, mimeType: 'application/json', text: data }] };
  }
  // 2025-11-25 server/resources §Error Handling: -32002 with the URI.
  throw new McpError(-32002, 'Resource not found', { uri });
}

// ---------------------------------------------------------------------------------------------- one session
function newServer() {
  const server = new Server({ name: 'conformance-legacy-ts', version: '1.0.0' }, {
    capabilities: { tools: { listChanged: true }, prompts: { listChanged: true }, completions: {}, logging: {},
      resources: { subscribe: true, listChanged: true },
      tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
    taskStore: tasks, taskMessageQueue: new InMemoryTaskMessageQueue(), defaultTaskPollInterval: POLL_MS,
    instructions: 'A 2025-11-25-only server (TypeScript SDK 1.x) with the conformance suite\'s tools.',
  });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [...Object.entries(TOOLS).map(([name, [inputSchema]]) => ({ name, description: name, inputSchema })),
      ...Object.entries(TASK_TOOLS).map(([name, [inputSchema, taskSupport]]) => (
        { name, description: name, inputSchema, execution: { taskSupport } }))] }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    if (TASK_TOOLS[request.params.name]) return callTaskTool(request.params.name, request, extra, server);
    const tool = TOOLS[request.params.name];
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${request.params.name}`);
    return tool[1](request.params.arguments ?? {}, extra, server);
  });
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: Object.entries(PROMPTS).map(([name, [args]]) => ({ name, description: name, arguments: args })) }));
  server.setRequestHandler(GetPromptRequestSchema, async (request, extra) => {
    const prompt = PROMPTS[request.params.name];
    if (!prompt) throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${request.params.name}`);
    const args = request.params.arguments ?? {};
    const missing = prompt[0].filter((a) => typeof args[a.name] !== 'string').map((a) => a.name);
    if (missing.length) throw new McpError(ErrorCode.InvalidParams, `missing argument(s): ${missing.join(', ')}`);
    return prompt[1](args, extra, server);
  });
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: Object.entries(STATIC).map(([uri, { name, title, description, mimeType }]) => (
      { uri, name, title, description, mimeType })) }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: [{
    uriTemplate: 'test://template/{id}/data', name: 'template', title: 'Resource Template',
    description: 'A resource template with parameter substitution', mimeType: 'application/json' }] }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => read(request.params.uri));
  server.setRequestHandler(SubscribeRequestSchema, async () => ({}));
  server.setRequestHandler(UnsubscribeRequestSchema, async () => ({}));
  // completion-complete: the endpoint must answer; the values may be empty.
  server.setRequestHandler(CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
  return server;
}

async function open(req, res, body) {
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (id) => { sessions.set(id, { transport, server }); },
  });
  transport.onclose = () => { if (transport.sessionId) sessions.delete(transport.sessionId); };
  const server = newServer();
  await server.connect(transport);
  await transport.handleRequest(req, res, body);
}

serveLegacy(Number(process.argv[2]), sessions, open);
