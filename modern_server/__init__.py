"""The stateless MCP 2026-07-28 reference server ("the core").

It is the gateway's embedded default upstream and the backend of its end-to-end tests, and it knows nothing
about legacy clients: it imports nothing from ``gateway`` or ``adapters``. Layout:

- ``wire``       the request-validation ladder and header codec (pure);
- ``errors``     the one error type and the one code-to-HTTP-status table;
- ``sealing``    integrity-protected ``requestState`` (HMAC-SHA256, key ids, expiry, bindings);
- ``auth``       bearer token -> principal;
- ``storage``    SQLite notes, the nonce (replay) store and out-of-band connection records;
- ``framework``  the request context, the MRTR helpers and the method table;
- ``tools/``     one module per tool, prompt or resource family;
- ``app``        the aiohttp shell (decode, run the ladder, dispatch, encode JSON or SSE).
"""

PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS = (PROTOCOL_VERSION,)
