"""Plain JSON answers of the legacy endpoint: a transport refusal, or a JSON-RPC error with the status
and challenge an upstream's refusal of the client's own token calls for (adapters.errors.AuthChallenge)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from adapters.errors import ErrorValue, Rejection
from adapters.results import response
from gateway.session.streams import json_response


def rejection_response(rejection: Rejection) -> web.Response:
    return json_response(rejection.body(), rejection.status)


def error_answer(ident: Any, error: ErrorValue) -> web.Response:
    """A JSON-RPC error as a JSON answer: HTTP 200, or the status and challenge of an upstream's refusal of the
    client's own token (adapters.errors.AuthChallenge), so the client authorizes again."""
    status, headers = error.challenge.answer() if error.challenge else (200, None)
    return json_response(response(ident, error=error), status, headers)


async def ready(answer: web.StreamResponse) -> web.StreamResponse:
    """An answer already made, as the awaitable a performer returns (``gateway.http.perform``)."""
    return answer
