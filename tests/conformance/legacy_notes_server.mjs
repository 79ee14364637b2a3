// A 2025-11-25-only notes server written with the official TypeScript SDK 1.x (`McpServer`, stateful Streamable
// HTTP, one server per session as the SDK's examples do): the TypeScript twin of
// tests/gateway/http/legacy_sdk1_server.py, same tool names and answers, for the reverse bridge's end-to-end tests
// (tests/gateway/http/test_reverse_ts.py; docs/design/eras.md#2026-clients-in-front-of-a-2025-server-the-reverse-bridge).
//
// Its tools ask their client live, as deployed 1.x servers do, on the call's own stream (`extra.sendRequest`
// relates each request to the call): sampling, form and URL elicitation, roots. It lives here, next to the pinned
// SDK in node_modules, because Node resolves packages from the script's folder.
//
// Usage: node legacy_notes_server.mjs PORT   (serves http://127.0.0.1:PORT/mcp)
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CreateMessageResultSchema, ElicitResultSchema, ListRootsResultSchema, SetLevelRequestSchema,
  SubscribeRequestSchema, UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { serveLegacy } from './legacy_http.mjs';

const sessions = new Map(); // session id -> { transport, mcp }
const SUBSCRIBED = new Map(); // session id -> Set of resources/subscribe URIs
const CANCELLED = []; // the tools whose call a notifications/cancelled ended, in order
const LEVELS = []; // every logging/setLevel, in order

const text = (value) => ({ content: [{ type: 'text', text: value }] });
const said = (result) => result?.content?.text ?? '?';
const ask = (prompt, maxTokens = 20) => ({ method: 'sampling/createMessage', params: {
  messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens } });

// A live request of the call, ended with it: a notifications/cancelled aborts extra.signal.
async function sample(extra, prompt, maxTokens) {
  return extra.sendRequest(ask(prompt, maxTokens), CreateMessageResultSchema, { signal: extra.signal });
}

function noting(name, work) {
  return async (args, extra) => {
    try {
      return await work(args, extra);
    } catch (error) {
      if (extra.signal.aborted) CANCELLED.push(name);
      throw error;
    }
  };
}

function register(mcp, sessionId) {
  const tool = (name, description, inputSchema, callback) => mcp.registerTool(name, { description, inputSchema },
    callback);
  tool('echo', 'Says its text back.', { text: z.string() }, async ({ text: value }) => text(value));
  tool('ask_model', 'One sampling round.', { topic: z.string() }, noting('ask_model', async ({ topic }, extra) => (
    text(`model said: ${said(await sample(extra, `about ${topic}`))}`))));
  tool('two_rounds', 'Two sampling rounds, the second built on the first.', {}, async (args, extra) => {
    const first = said(await sample(extra, 'first'));
    const second = said(await sample(extra, `second after ${first}`));
    return text(`${first} then ${second}`);
  });
  tool('delete_note', 'A form elicitation: accept, decline or cancel.', { note: z.string() }, async ({ note }, extra) => {
    const answer = await extra.sendRequest({ method: 'elicitation/create', params: { mode: 'form',
      message: `Delete ${note}?`, requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } },
        required: ['confirm'] } } }, ElicitResultSchema);
    if (answer.action === 'accept') return text(answer.content?.confirm ? `deleted ${note}` : `kept ${note}`);
    return text(`${answer.action}: nothing deleted`);
  });
  tool('open_link', 'A URL elicitation (2025-11-25 client/elicitation §URL mode).', { note: z.string() },
    async ({ note }, extra) => {
      const answer = await extra.sendRequest({ method: 'elicitation/create', params: { mode: 'url',
        message: `Sign in to share ${note}`, url: `https://notes.example/share/${note}`,
        elicitationId: randomUUID() } }, ElicitResultSchema);
      return text(`${answer.action}: ${answer.action === 'accept' ? 'link opened' : 'not shared'}`);
    });
  tool('show_roots', 'roots/list on the call\'s stream.', {}, async (args, extra) => {
    const { roots } = await extra.sendRequest({ method: 'roots/list' }, ListRootsResultSchema);
    return text(roots.map((root) => root.uri).join(', '));
  });
  tool('count', 'Progress, then a sampling round, then progress again.', { n: z.number().int() },
    async ({ n }, extra) => {
      const token = extra._meta?.progressToken;
      const progress = (value) => (token === undefined ? undefined : extra.sendNotification({
        method: 'notifications/progress', params: { progressToken: token, progress: value, total: n + 1 } }));
      for (let i = 0; i < n; i += 1) await progress(i + 1);
      const answer = said(await sample(extra, 'go on', 5));
      await progress(n + 1);
      return text(`counted ${n}, ${answer}`);
    });
  tool('slow', 'Works for long: for a client that hangs up.', {}, noting('slow', async (args, extra) => {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, 30_000);
      extra.signal.addEventListener('abort', () => { clearTimeout(timer); reject(new Error('cancelled')); });
    });
    return text('done');
  }));
  tool('cancelled', 'The tools a notifications/cancelled ended.', {}, async () => text(CANCELLED.join(',')));
  tool('chatty', 'One log message of each of three levels, on the call\'s own stream.', {}, async (args, extra) => {
    for (const level of ['debug', 'info', 'warning']) {
      await extra.sendNotification({ method: 'notifications/message', params: { level, data: `a ${level} line` } });
    }
    return text('said');
  });
  tool('levels', 'Every logging/setLevel, in order.', {}, async () => text(LEVELS.join(',')));
  tool('touch', 'resources/updated to every session subscribed to uri (or above it), then tools list_changed to '
    + 'every session that subscribed to anything, on their GET streams.', { uri: z.string() }, async ({ uri }) => {
    for (const [id, uris] of SUBSCRIBED) {
      const entry = sessions.get(id);
      if (!entry) continue;
      if ([...uris].some((u) => uri === u || uri.startsWith(`${u.replace(/\/$/, '')}/`))) {
        await entry.mcp.server.sendResourceUpdated({ uri }).catch(() => {});
      }
      await entry.mcp.server.sendToolListChanged().catch(() => {});
    }
    return text('touched');
  });
  tool('subscribed', 'Every session\'s subscriptions.', {}, async () => text(
    [...SUBSCRIBED.values()].flatMap((uris) => [...uris]).sort().join(',')));
  mcp.registerPrompt('greet', { description: 'Greets someone.', argsSchema: { name: z.string() } }, ({ name }) => ({
    messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${name}.` } }] }));
  mcp.registerResource('readme', 'notes://readme', { mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'the readme' }] }));
  // McpServer leaves subscriptions and log levels to the low-level server.
  mcp.server.registerCapabilities({ resources: { subscribe: true, listChanged: true }, logging: {} });
  mcp.server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    SUBSCRIBED.get(sessionId()).add(request.params.uri);
    return {};
  });
  mcp.server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    SUBSCRIBED.get(sessionId())?.delete(request.params.uri);
    return {};
  });
  mcp.server.setRequestHandler(SetLevelRequestSchema, async (request) => {
    LEVELS.push(request.params.level);
    return {};
  });
}

async function open(req, res, body) {
  const mcp = new McpServer({ name: 'legacy-notes-ts', version: '1.0.0' },
    { instructions: 'A 2025-era notes server (TypeScript SDK 1.x).' });
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (id) => { sessions.set(id, { transport, mcp }); SUBSCRIBED.set(id, new Set()); },
  });
  transport.onclose = () => {
    sessions.delete(transport.sessionId);
    SUBSCRIBED.delete(transport.sessionId);
  };
  register(mcp, () => transport.sessionId);
  await mcp.connect(transport);
  await transport.handleRequest(req, res, body);
}

serveLegacy(Number(process.argv[2]), sessions, open);
