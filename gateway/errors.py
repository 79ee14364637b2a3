"""The gateway's exceptions: one tree, so a caller can catch a whole concern and a test can see that nothing is
raised outside it (``tests/gateway/test_errors.py`` walks the package).

What a client is told is never an exception: it is an ``adapters.errors`` value (an ``ErrorValue`` or a
``Rejection``, the one table of codes and statuses). These exceptions carry such a value, or the operator's one
line, across the shell's seams; each is defined where it is raised, on one of these bases::

    GatewayError
    ├── ConfigError            a configuration that cannot be served (gateway.config.settings)
    ├── UpstreamHopError       the hop to the upstream server
    │   ├── Unreachable, BrokenResponse          the HTTP/1.1 transport (gateway.upstream.h1)
    │   ├── UpstreamFailure    carries the client's ErrorValue (gateway.upstream.client)
    │   ├── SessionGone, LegacyFailure           a 2025-era upstream's session (gateway.upstream.legacy_session)
    │   └── StateKeyError      the embedded core's state key (gateway.upstream.embedded)
    ├── AuthError              authorization servers and credentials
    │   ├── AuthServerError    metadata, keys, introspection (gateway.auth.fetch)
    │   └── CredentialError    the gateway's own upstream token (gateway.auth.credentials)
    ├── StoreError             the session store
    │   ├── StoreUnavailable   any backend unreachable or slow (gateway.session.store)
    │   └── WaitingFull        a save's hold past a bound (gateway.session.store)
    ├── SessionError           a session's exchange and streams
    │   ├── HandedOver         an answer reached a round handed over (gateway.session.exchange)
    │   └── StreamGone         events no longer kept (gateway.session.streams)
    └── OpsError               the command line's tools
        ├── FileRefused        a file serve cannot write (gateway.ops.files)
        ├── Unusable           a server check cannot drive (gateway.ops.legacy_client)
        └── LegacyCallError    a JSON-RPC error answered to a test session (gateway.ops.testing)

Private control-flow exceptions (a module's ``_Name``) sit under the base of their module's concern.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Every exception the gateway defines."""


class UpstreamHopError(GatewayError):
    """The upstream hop failed or answered something unusable."""


class AuthError(GatewayError):
    """An authorization server or a credential could not be had."""


class StoreError(GatewayError):
    """The session store could not do what was asked."""


class SessionError(GatewayError):
    """A session's exchange or stream cannot go on as asked."""


class OpsError(GatewayError):
    """A command-line tool cannot go on; the message is the operator's one line."""


__all__ = ["AuthError", "GatewayError", "OpsError", "SessionError", "StoreError", "UpstreamHopError"]
