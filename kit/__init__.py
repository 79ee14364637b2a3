"""The gateway's tooling, pure: what the operator's commands and the telemetry renderings decide, kept out of the
protocol core (``adapters/``).

Like ``adapters/``, nothing here performs I/O, reads a clock, draws randomness or imports an event loop; the
shell (``gateway/``) reads files and sockets and hands plain values in. ``kit`` may import ``adapters``; the
core never imports ``kit`` (tests/test_layers.py and tests/adapters/test_architecture.py check both).

Modules:

- ``check``         ``python -m gateway check``: arguments from input schemas, canned answers, judging observations;
- ``scenario``      ``python -m gateway replay``: scenario files and the judging of their steps;
- ``trace_view``    a translation trace read back: grouped per request, as a text summary or an HTML page;
- ``usage_report``  the migration report (``python -m gateway report``, ``/migration``) and its window;
- ``spans``         the OpenTelemetry spans' names and attributes (``gateway.telemetry.otel`` emits them).
"""
