"""The upstream hop: the HTTP/1.1 pool, the client that POSTs to a 2026-07-28 server, and the embedded core."""
