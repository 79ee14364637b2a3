// The official TypeScript SDK's Client over StreamableHTTPClientTransport (2025-11-25, a legacy client of the
// gateway) through a load balancer in plain round robin: one session runs every bridged flow, one after another:
// sampling over two rounds, form elicitation (decline, then accept), URL elicitation (the out-of-band page
// completed), roots, a cancel sent with an AbortSignal while a sampling round waits, and a POST stream dropped
// mid-bridge that the transport resumes with Last-Event-ID (its onresumptiontoken option reports the ids).
// A custom fetch records every HTTP request of the session in sending order (the flow, its method and JSON-RPC
// kind, the X-Gateway-Replica that answered it, and for a resume whether it resumed the dropped call's stream),
// with the probes that steer the balancer between them. Prints one JSON line {requests, flows} for the Python test.
// Usage: node replica_client.mjs URL (tests/gateway/ops/test_haproxy.py runs it with this folder's SDK)
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema, ElicitationCompleteNotificationSchema, ElicitRequestSchema, ListRootsRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

const url = new URL(process.argv[2]);
const requests = []; // in sending order: {flow, request, replica, status, resumes?}
const answered = []; // per request: a promise of its response headers (or of nothing if it failed)
let flow = 'connect';
let dropNext = false; // the next POST tools/call gets a body this script can break (the resume flow)
let dropper = null;
const resumeIds = []; // the Last-Event-ID of every resume, in sending order

function kind(init) {
  const method = init?.method ?? 'GET';
  if (method !== 'POST') {
    return method === 'GET' && new Headers(init?.headers).get('last-event-id') ? 'GET resume' : method;
  }
  const message = JSON.parse(init.body);
  return `POST ${message.method ?? ('id' in message ? 'answer' : '?')}`;
}

// A response whose body the script can break as a network failure would (and whose connection it then closes).
function droppable(response) {
  const reader = response.body.getReader();
  let controller;
  const body = new ReadableStream({
    start(c) { controller = c; },
    async pull(c) {
      try {
        const { value, done } = await reader.read();
        if (done) c.close(); else c.enqueue(value);
      } catch (error) {
        try { c.error(error); } catch { /* already broken by drop() */ }
      }
    },
    cancel(reason) { return reader.cancel(reason); },
  });
  const drop = () => {
    controller.error(new TypeError('terminated: the connection was dropped'));
    reader.cancel().catch(() => {});
  };
  return { response: new Response(body, { status: response.status, headers: response.headers }), drop };
}

// The balancer's rotation, learnt from three probes in a row before the session starts, and probes through it
// (recorded as requests of their flow): a probe tells which replica the next request reaches, so an answer, a
// cancel and a resume are steered away from the replica running their call (as the Python tests do), whatever
// else the transport sent before them.
let rotation = [];
async function probe() {
  const entry = { flow, request: 'probe', replica: null, status: null };
  requests.push(entry);
  const response = await fetch(new URL('/healthz', url));
  await response.body?.cancel();
  entry.replica = response.headers.get('x-gateway-replica');
  entry.status = response.status;
  return entry.replica;
}
const next = (replica) => rotation[(rotation.indexOf(replica) + 1) % rotation.length];
async function steer(avoid) {
  await Promise.race([Promise.all(answered), new Promise((r) => setTimeout(r, 2000))]);
  for (let tries = 0; tries < 3; tries += 1) {
    if (next(await probe()) !== avoid) return;
  }
  throw new Error(`the rotation ${rotation} did not move past ${avoid}`);
}
const callOf = (name) => requests.findLast((r) => r.flow === name && r.request === 'POST tools/call').replica;
const STEERED = { 'sampling POST answer': 'sampling', 'cancel POST notifications/cancelled': 'cancel' };

async function watched(input, init) {
  const request = kind(init);
  const lastEventId = new Headers(init?.headers).get('last-event-id');
  if (lastEventId) resumeIds.push(lastEventId);
  if (request === 'GET resume' && tokens.includes(lastEventId)) { // the resume of the dropped call's stream
    await steer(callOf('resume'));
  } else if (STEERED[`${flow} ${request}`]) {
    await steer(callOf(STEERED[`${flow} ${request}`]));
  }
  const entry = { flow, request, replica: null, status: null };
  if (lastEventId) entry.resumes = tokens.includes(lastEventId) ? 'the call' : 'another stream';
  requests.push(entry);
  let done;
  answered.push(new Promise((r) => { done = r; }));
  try {
    let response = await fetch(input, init);
    entry.replica = response.headers.get('x-gateway-replica');
    entry.status = response.status;
    if (request === 'POST tools/call' && dropNext && response.body) {
      dropNext = false;
      ({ response, drop: dropper } = droppable(response));
    }
    return response;
  } finally {
    done();
  }
}

const tokens = []; // what onresumptiontoken reported for the resume flow's call
const transport = new StreamableHTTPClientTransport(url, { fetch: watched });
const client = new Client({ name: 'ts-sdk-replicas', version: '1' },
                          { capabilities: { sampling: {}, roots: { listChanged: true },
                                            elicitation: { form: {}, url: {} } } });

const seen = { sampling: 0, elicit: [], roots: 0, completed: 0, stopped: false, tokenAtDrop: null };
let stuck = null; // set by the cancel flow: resolved once a sampling round is waiting
client.setRequestHandler(CreateMessageRequestSchema, async (request, extra) => {
  seen.sampling += 1;
  if (stuck) {
    const stopped = new Promise((resolve) => extra.signal.addEventListener('abort', resolve, { once: true }));
    stuck();
    await stopped; // the gateway cancels its outstanding request when the call is cancelled
    seen.stopped = true;
    throw new Error('cancelled');
  }
  if (dropper) {
    seen.tokenAtDrop = tokens.at(-1);
    dropper(); // the call's stream breaks while the client is answering the first round
    dropper = null;
  }
  const prompt = request.params.messages[0].content.text;
  const text = prompt.includes('JSON array') ? JSON.stringify(prompt.split('\n').slice(1, 4))
                                             : 'A small repository with a parser and a gateway.';
  return { role: 'assistant', content: { type: 'text', text }, model: 'ts-sdk', stopReason: 'endTurn' };
});
let decision = 'decline';
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const params = request.params;
  seen.elicit.push(params.mode ?? 'form');
  if (params.mode === 'url') { // the user completes the out-of-band step, then accepts
    const page = await fetch(`${params.url}/complete`, { method: 'POST' });
    await page.body?.cancel();
    return page.status === 200 ? { action: 'accept' } : { action: 'cancel' };
  }
  if (decision === 'decline') return { action: 'decline' };
  return { action: 'accept', content: { note_id: params.requestedSchema.properties.note_id.enum[0], confirm: true } };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  seen.roots += 1;
  return { roots: [{ uri: 'file:///work/notes', name: 'notes' }] };
});
client.setNotificationHandler(ElicitationCompleteNotificationSchema, async () => { seen.completed += 1; });

const text = (result) => result.content[0].text;
const flows = {};
for (let n = 0; n < 3; n += 1) rotation.push(await probe());
if (new Set(rotation).size !== 3) throw new Error(`three probes in a row reached ${rotation}`);
await client.connect(transport);

flow = 'sampling';
let result = await client.callTool({ name: 'summarize_repo', arguments: { repo: 'demo' } });
flows.sampling = { isError: Boolean(result.isError), files: result.structuredContent.files,
                   summarized: Boolean(result.structuredContent.summary), rounds: seen.sampling };

flow = 'form';
const note = { workspaceUri: 'file:///work/notes', title: 'Roadmap' };
const declined = text(await client.callTool({ name: 'notes_delete', arguments: note }));
decision = 'accept';
const accepted = text(await client.callTool({ name: 'notes_delete', arguments: note }));
flows.form = { declined, accepted, asked: seen.elicit.splice(0) };

flow = 'url';
result = await client.callTool({ name: 'connect_service', arguments: { service: 'calendar' } });
flows.url = { text: text(result), asked: seen.elicit.splice(0), completed: seen.completed };

flow = 'roots';
result = await client.callTool({ name: 'workspace_scan', arguments: {} });
flows.roots = { scanned: result.structuredContent.scanned, asked: seen.roots };

flow = 'cancel';
seen.sampling = 0;
const waiting = new Promise((resolve) => { stuck = resolve; });
const abort = new AbortController();
const call = client.callTool({ name: 'summarize_repo', arguments: {} }, undefined, { signal: abort.signal })
  .then(() => 'answered', (error) => error.message);
await waiting;
abort.abort('the user stopped it');
const outcome = await call;
await Promise.race([new Promise((r) => { const t = setInterval(() => seen.stopped && (clearInterval(t), r()), 20); }),
                    new Promise((r) => setTimeout(r, 10000))]);
stuck = null;
const echo = text(await client.callTool({ name: 'echo', arguments: { text: 'still here' } }));
flows.cancel = { outcome, stopped: seen.stopped, rounds: seen.sampling, echo };

flow = 'resume';
seen.sampling = 0;
dropNext = true;
result = await client.callTool({ name: 'summarize_repo', arguments: { repo: 'demo' } }, undefined,
                               { onresumptiontoken: (token) => tokens.push(token) });
// The call's stream resumed once, from the last id the transport had reported when it broke (other GET resumes
// in this flow are the standalone stream's, whose connection a resume may end: docs/design/streams.md#sse-streams-and-resumption).
const resumed = resumeIds.filter((id) => tokens.includes(id));
flows.resume = { isError: Boolean(result.isError), summarized: Boolean(result.structuredContent.summary),
                 rounds: seen.sampling, dropped: seen.tokenAtDrop !== null,
                 resumedFrom: resumed.map((id) => (id === seen.tokenAtDrop ? 'the last id' : 'another id')) };

flow = 'end';
await transport.terminateSession();
await client.close();
console.log(JSON.stringify({ requests, flows }));
