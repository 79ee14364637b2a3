// The HTTP side the two 2025-11-25-only TypeScript fixtures share (legacy_server.mjs for the conformance lane,
// legacy_notes_server.mjs for the reverse bridge's tests): one Streamable HTTP endpoint at /mcp whose sessions
// are kept in `sessions` (session id -> { transport, ... }), a new one opened by `open(req, res, body)` on an
// initialize that names no session.
import { createServer } from 'node:http';

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
}

export function serveLegacy(port, sessions, open) {
  async function handle(req, res) {
    if (new URL(req.url, 'http://x').pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    const body = req.method === 'POST' ? await readJson(req) : undefined;
    const entry = sessions.get(req.headers['mcp-session-id']);
    if (entry) {
      await entry.transport.handleRequest(req, res, body);
    } else if (!req.headers['mcp-session-id'] && req.method === 'POST' && body?.method === 'initialize') {
      await open(req, res, body);
    } else {
      // 2025-11-25 basic/transports §Session Management: an unknown session is 404.
      res.writeHead(req.headers['mcp-session-id'] ? 404 : 400, { 'content-type': 'application/json' }).end(
        JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'No valid session' } }));
    }
  }

  createServer((req, res) => {
    handle(req, res).catch((error) => {
      console.error('request failed:', error);
      if (!res.headersSent) res.writeHead(500).end();
    });
  }).listen(port, '127.0.0.1');
}
