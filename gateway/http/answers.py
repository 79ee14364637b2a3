"""Plain answers of the legacy endpoint: a transport refusal, a JSON-RPC error with the status and challenge an
upstream's refusal of the client's own token calls for (adapters.errors.AuthChallenge), and the ``202`` that
acknowledges a client's answers and notifications."""

from __future__ import annotations

import email.utils
import time
from typing import Any, Final

from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11

from adapters.errors import ErrorValue, Rejection
from adapters.results import response
from gateway.http.health import name_replica
from gateway.http.keys import GATEWAY
from gateway.http.streams import json_response


def rejection_response(rejection: Rejection) -> web.Response:
    """A refusal's status and body, with the gateway's own ``WWW-Authenticate`` when it refused a credential."""
    challenge = rejection.error.challenge
    headers = tuple(("WWW-Authenticate", value) for value in challenge.challenges) if challenge else None
    return json_response(rejection.body(), rejection.status, headers)


def error_answer(ident: Any, error: ErrorValue) -> web.Response:
    """A JSON-RPC error as a JSON answer: HTTP 200, or the status and challenge of an upstream's refusal of the
    client's own token (adapters.errors.AuthChallenge), so the client authorizes again."""
    status, headers = error.challenge.answer() if error.challenge else (200, None)
    return json_response(response(ident, error=error), status, headers)


async def ready(answer: web.StreamResponse) -> web.StreamResponse:
    """An answer already made, as the awaitable a performer returns (``gateway.http.perform``)."""
    return answer


class Acknowledgement(web.StreamResponse):
    """``202 Accepted`` with no body: what a client's answers and notifications get (2025-11-25 basic/transports
    §Sending Messages to the Server), one per bridged round. On a kept-alive HTTP/1.1 connection its head is one
    constant write, with what the app's one response hook adds (a replica's name, ``gateway.http.health``) written
    in: aiohttp built the same head for every one of them at about 4% of a round's instructions
    (``bench.instructions``, docs/design/streams.md#a-202-is-written-whole). Otherwise (HTTP/1.0, a closing
    connection, another hook) it goes aiohttp's way, and so does everything when aiohttp lacks what this sets."""

    def __init__(self) -> None:
        super().__init__(status=202)
        self.content_length = 0  # aiohttp's way too: no body, not a chunked one

    async def prepare(self, request: web.BaseRequest) -> Any:
        transport = request.transport
        hooked = _hooked(request.app) if isinstance(request, web.Request) else None
        if (not _FAST or hooked is None or self.prepared or request.version != HttpVersion11
                or not request.keep_alive or transport is None or transport.is_closing()):
            return await super().prepare(request)
        transport.write(b"%s%s%s%s\r\n\r\n" % (_HEAD, _http_date(), _SERVER, hooked))
        # aiohttp's request handler reads these two: the connection stays open, and write_eof() has nothing to do.
        self._keep_alive, self._eof_sent = True, True
        return None


def _hooked(app: web.Application) -> bytes | None:
    """The header lines the app's response hooks add to every answer: none without hooks, the replica's name
    with only the hook that names it; None when another hook could change the answer (aiohttp's way then)."""
    hooks = app.on_response_prepare
    if not hooks:
        return b""
    gw = app.get(GATEWAY)
    if len(hooks) == 1 and hooks[0] is name_replica and gw is not None:
        return b"\r\nX-Gateway-Replica: " + gw.replica.encode()
    return None


def _http_date() -> bytes:
    """The Date header's value (RFC 9110 §6.6.1: an origin server with a clock sends it), made once a second."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True).encode())
    return _date[1]


_HEAD: Final = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nDate: "
_SERVER: Final = b"\r\nServer: " + SERVER_SOFTWARE.encode()
_date: tuple[int, bytes] = (0, b"")  # the second it was made for, and the value
_FAST: Final = all(hasattr(web.StreamResponse(), name) for name in ("_keep_alive", "_eof_sent"))
