"""The aiohttp shell of the legacy gateway: the 2025-11-25 endpoint, SSE writing, the session table, the
upstream client and the CLI. Every protocol decision is delegated to ``adapters``; this package only decodes,
calls the core and performs the returned actions.

- ``config``    the frozen, TOML-loaded configuration;
- ``store``     the session/pending-round store interface and its in-memory implementation;
- ``streams``   SSE streams with replay buffers and the response writer (JSON or SSE, decided lazily);
- ``upstream``  the one upstream HTTP client (connection reuse; failures become error values);
- ``exchange``  runs one forwarded request through the adapters' bridge machine;
- ``listen``    the per-session upstream ``subscriptions/listen`` feeding the GET stream;
- ``runtime``   the in-process part of a session (streams, tasks) and the app-wide registry;
- ``app``       ``create_app`` and the HTTP handlers;
- ``embedded``  starts the embedded core on a loopback ephemeral port;
- ``cli``       ``python -m gateway serve``.
"""
