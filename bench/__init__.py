"""``python -m bench``: what translation costs, measured side by side in one run (docs/benchmarks.md).

Everything runs on loopback and in separate processes, so the gateway's own CPU time can be read from
``/proc``: the core (``python -m modern_server``), the gateway in front of it (``python -m gateway serve
--upstream``), a bare aiohttp forwarder in front of it (the floor for any Python proxy here), an echo server
(the loopback hop's own cost), and the load generator (this process). Scenarios: direct, passthrough,
translated, bridged, forwarder, idle sessions. No test asserts on these numbers: the benchmark prints them with a
verdict per target (:mod:`bench.targets`) and docs/benchmarks.md records them.
"""
