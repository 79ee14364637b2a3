"""The pure translation core of the legacy gateway (sans-IO).

Everything that decides *what* goes on the wire between a 2025-11-25 client and a 2026-07-28 upstream
lives here as plain functions over plain data (docs/design/core-and-shell.md#architecture). Nothing in this package
performs I/O,
reads a clock, draws randomness or imports an event loop: clocks, ids and randomness are passed in by
the shell (``gateway/``). A test inspects every module's imports to keep it that way.

Modules:

- ``protocol``      revision constants, method families, version negotiation;
- ``errors``        the error value, the retired/renumbered code rules and the ONE code -> HTTP status table;
- ``classify``      a legacy/modern HTTP request -> accepted value or rejection value;
- ``capabilities``  capability translation in both directions;
- ``handshake``     ``InitializeResult`` from a ``server/discover`` result, and the discover cache policy;
- ``upstream``      the ONE place that builds upstream request bodies and headers;
- ``results``       upstream results/errors/notifications -> legacy shapes;
- ``bridge``        the MRTR bridge as a ``handle(event) -> actions`` machine over a serializable record;
- ``records``       the serializable session / pending-round records;
- ``sse``           SSE framing, event-id scheme and the bounded replay buffer;
- ``subscriptions`` legacy subscribe/list_changed -> ``subscriptions/listen`` filters and back;
- ``local``         the method routing table and the answers given without the upstream.
"""
