"""The fuzz suite's wiring: the hypothesis profile, and a :class:`Harness` that runs many generated cases against
ONE gateway app (the shell fixtures of ``tests/gateway/conftest.py``) and checks the property after each.

The property, for every case: the answer is a JSON-RPC answer or a documented 4xx (``adapters.errors.REJECTIONS``)
with a JSON-RPC error body, carrying the request's id where it is valid and known; never a 5xx, never an ERROR
from the ``gateway`` logger or asyncio's exception handler, never longer than :data:`CASE_SECONDS`; and the
session used still answers a ping afterwards.

pytest-asyncio runs an ``async def`` test decorated with ``@given`` example by example on the test's own event
loop, so function-scoped fixtures (one gateway, one fake upstream) are set up once for all the examples.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

from adapters.errors import REJECTIONS
from tests.gateway import conftest as gateway_conftest
from tests.gateway.conftest import FakeUpstream, Legacy

# tests/gateway's gateway fixture, shared: pytest collects the fixtures a conftest module holds as attributes.
make_gateway = gateway_conftest.make_gateway

# Hypothesis keeps caches (constants, unicode data) in .hypothesis/ even without a database: not in the checkout.
set_hypothesis_home_dir(tempfile.mkdtemp(prefix="fuzz-hypothesis-"))
# Cases per run over the three families; FUZZ_EXAMPLES raises it locally. derandomize: CI runs the same cases
# every time; database=None: nothing is written to .hypothesis/ in the checkout.
TOTAL_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "10000"))
settings.register_profile(
    "fuzz", max_examples=TOTAL_EXAMPLES, derandomize=True, database=None, deadline=None, print_blob=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])


def fuzz_settings(share: float) -> settings:
    """The profile, with ``share`` of the run's cases (each family takes its part of :data:`TOTAL_EXAMPLES`)."""
    profile = settings.get_profile("fuzz")
    return settings(profile, max_examples=max(1, int(profile.max_examples * share)))


CASE_SECONDS = 5  # generous: no documented gateway timeout is shorter than the 10 s upstream connect timeout
DOCUMENTED_4XX = frozenset(status for status, _ in REJECTIONS.values()) | {408, 409, 413}
# the second one takes JSON-RPC batches (docs/design/eras.md#json-rpc-batches-2025-03-26-only)
SESSION_VERSIONS = ("2025-11-25", "2025-03-26")
FUZZ_CAPS = {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {}}  # roots uncached: always asked


def valid_id(value: Any) -> bool:
    """An id the gateway must echo: MCP's RequestId is a string or an integer (2025-11-25 schema)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def check_message(message: Any) -> None:
    """One JSON-RPC 2.0 message: a request, a notification, or a response with exactly one of result/error."""
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", f"not JSON-RPC: {message!r:.300}"
    if "method" in message:
        assert isinstance(message["method"], str), message
        return
    assert "id" in message and (("result" in message) != ("error" in message)), f"not a response: {message!r:.300}"
    if "error" in message:
        error = message["error"]
        assert isinstance(error, dict) and isinstance(error.get("message"), str), f"bad error: {message!r:.300}"
        assert isinstance(error.get("code"), int) and not isinstance(error.get("code"), bool), message


def sse_messages(body: bytes) -> list[Any]:
    """The JSON data of every event of a complete SSE body (priming events carry no data)."""
    out = []
    for block in body.decode().replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:"))
        if data:
            out.append(json.loads(data))
    return out


def check_answer(status: int, content_type: str, body: bytes, request: Any = None,
                 method: str = "POST") -> list[Any]:
    """THE property on one HTTP answer; returns its JSON-RPC messages. ``request`` is the parsed body, if any."""
    assert status < 500, f"HTTP {status}: {body[:300]!r}"
    if status in (202, 204) or (status == 200 and method == "DELETE"):
        assert not body.strip() or status == 202, f"HTTP {status} with a body: {body[:300]!r}"
        return [json.loads(body)] if body.strip() else []
    assert status == 200 or status in DOCUMENTED_4XX, f"undocumented HTTP {status}: {body[:300]!r}"
    if content_type == "text/event-stream":
        assert status == 200, f"HTTP {status} as SSE"
        messages = sse_messages(body)
    else:
        assert content_type == "application/json", f"HTTP {status} as {content_type!r}: {body[:300]!r}"
        parsed = json.loads(body)
        messages = parsed if isinstance(parsed, list) else [parsed]
    for message in messages:
        check_message(message)
    if status != 200:  # one error, or a batch's error array (docs/design/eras.md#json-rpc-batches-2025-03-26-only)
        assert messages and all("error" in m for m in messages), f"HTTP {status} without an error: {body[:300]!r}"
    _check_id(status, messages, request)
    return messages


def _check_id(status: int, messages: list[Any], request: Any) -> None:
    """A single request's answer carries its id once the gateway has read the body (2025-11-25 basic
    §Responses; errors decided before the body is parsed, 403 Origin/Host, 405, 406, 415, -32700, cannot)."""
    if not isinstance(request, dict) or not valid_id(request.get("id")):
        return
    responses = [m for m in messages if "method" not in m]
    if not responses:
        return
    code = (responses[-1].get("error") or {}).get("code")
    if status in (405, 406, 415) or (status == 403 and code == -32600) or code == -32700:
        return
    assert responses[-1]["id"] == request["id"], \
        f"HTTP {status} answer id {responses[-1]['id']!r} for {request['id']!r}: {responses[-1]!r:.300}"


async def next_message(resp: Any) -> Any:
    """The next JSON-RPC message of an SSE answer (priming events skipped), checked; None at the end."""
    data: list[str] = []
    while True:
        line = (await resp.content.readline()).decode()
        if not line:
            return None
        line = line.rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif line == "" and "".join(data):  # a priming event's data is empty
            message = json.loads("\n".join(data))
            check_message(message)
            return message
        elif line == "":
            data = []


async def post_json(client: Any, legacy: Legacy, body: bytes) -> list[Any]:
    """POST ``body`` on ``legacy``'s session; the property on the answer; its messages."""
    async with client.post("/mcp", data=body, headers=legacy.headers()) as resp:
        return check_answer(resp.status, resp.content_type, await resp.read())


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(f"gateway log: {record.getMessage()} {record.exc_info[1] if record.exc_info else ''!r}")


class Harness:
    """One gateway, one fake upstream, a healthy session per protocol version; :meth:`run` is one case."""

    def __init__(self, make: Callable[..., Awaitable[Any]], upstream: FakeUpstream) -> None:
        self.make, self.upstream, self.errors = make, upstream, _Errors()
        self.sessions: dict[str, Legacy] = {}
        self.dirty = True  # the last case failed (or none ran yet): start again from fresh sessions

    async def start(self) -> Harness:
        self.client = await self.make()
        logging.getLogger("gateway").addHandler(self.errors)
        self.loop = loop = asyncio.get_running_loop()
        self._old_handler = loop.get_exception_handler()
        loop.set_exception_handler(lambda _loop, context: self.errors.seen.append(f"asyncio: {context}"))
        return self

    def stop(self) -> None:
        logging.getLogger("gateway").removeHandler(self.errors)
        self.loop.set_exception_handler(self._old_handler)

    async def session(self, version: str = SESSION_VERSIONS[0]) -> Legacy:
        if version not in self.sessions:
            legacy = Legacy(self.client, version)
            await legacy.initialize(caps=FUZZ_CAPS)
            self.sessions[version] = legacy
        return self.sessions[version]

    def forget(self, version: str) -> None:
        """The case ended this session on purpose (a DELETE): the next one starts a new session."""
        self.sessions.pop(version, None)

    async def run(self, case: Callable[[], Awaitable[Any]], version: str = SESSION_VERSIONS[0]) -> None:
        """One case, bounded in time, then the property's session and log checks."""
        if self.dirty:
            self.sessions.clear()
        self.dirty, self.errors.seen = True, []
        async with asyncio.timeout(CASE_SECONDS):
            await case()
            await asyncio.sleep(0)  # let tasks the case finished report their failures
            legacy = await self.session(version)
            pong = await legacy.call("ping")
            assert pong.get("result") == {}, f"the session no longer answers ping: {pong!r}"
        assert not self.errors.seen, self.errors.seen
        self.dirty = False


class TolerantUpstream:
    """Wraps ``FakeUpstream.handle`` so a malformed request passed through to it (a fuzzed 2026 request) is
    answered 400 -32600, as a real 2026 server would, instead of the fake's own 500: a 5xx the client sees is
    then always the gateway's."""

    def __init__(self, fake: FakeUpstream) -> None:
        self.fake = fake

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self.fake.handle(request)
        except Exception as exc:
            return web.json_response(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": str(exc)[:200]}}, status=400)


@pytest.fixture
async def upstream(aiohttp_server):
    """The shell tests' fake upstream behind :class:`TolerantUpstream` (overrides ``tests.gateway``'s fixture,
    which ``make_gateway`` then uses)."""
    fake = FakeUpstream()
    app = web.Application()
    app.router.add_post("/mcp", TolerantUpstream(fake).handle)
    server = await aiohttp_server(app)
    fake.url, fake.server = str(server.make_url("/mcp")), server
    return fake


@pytest.fixture
async def harness(make_gateway, upstream):
    made = await Harness(make_gateway, upstream).start()
    yield made
    made.stop()
