"""The migration report from a real usage store: three synthetic peers' verdicts through the CLI in
every format, progress on stderr, retention, peers and sunsets from pins, and the dashboard's admin token."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import mcp_types as types
from mcp import Client

from adapters.usage import DAY_MS, Facts, LabelFolder, add_to_rollup, build_record, day_number
from gateway.config.settings import load_config
from gateway.http.app import create_app
from gateway.telemetry.usage import USAGE, UsageDb
from tests.waiting import accepts_sync, until_sync

ROOT = Path(__file__).resolve().parents[3]
TODAY = "2026-12-02"


def at(day: str, hour: int = 10) -> int:
    return day_number(day) * DAY_MS + hour * 3_600_000


def synthetic_store(path: str) -> None:
    """ide: legacy, leans on sampling, sunset set; agent: modern but answers sampling via MRTR; batch: migrated."""
    folder, rollup = LabelFolder(), {}
    facts = []
    for day in ("2026-11-28", "2026-11-30", "2026-12-01"):
        facts += [Facts(at(day), "legacy", "2025-11-25", "tools/call", True, {"name": "vscode-mcp", "version": "3"},
                        "ide", "2027-03-01", rounds=2, inputs=("sampling",),
                        features=("legacy handshake", "sampling"))] * 4
        facts += [Facts(at(day), "legacy", "2025-11-25", "tools/call", True, {"name": "vscode-mcp", "version": "3"},
                        "ide", "2027-03-01", features=("legacy handshake",), outcome="error", cause="round cap")]
        facts += [Facts(at(day), "modern", "2026-07-28", "tools/call", False, {"name": "bot", "version": "1"},
                        "agent", None, features=("sampling",))] * 2
        facts += [Facts(at(day), "modern", "2026-07-28", "tools/list", False, {"name": "cron", "version": "7"},
                        "batch", None)] * 3
    facts += [Facts(at("2026-09-01"), "legacy", "2025-06-18", "tools/call", True, {"name": "cron", "version": "6"},
                    "batch", None, features=("legacy handshake",))] * 9  # long ago
    for fact in facts:
        add_to_rollup(rollup, build_record(folder, fact))
    db = UsageDb(path)
    db.write(rollup, {"ide": ("2027-03-01", 0), "agent": (None, 0), "batch": (None, 0)}, 400, at(TODAY))
    db.close()


def report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway", "report", "--today", TODAY, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_report_verdicts_for_three_synthetic_peers(tmp_path) -> None:
    db = str(tmp_path / "usage.db")
    synthetic_store(db)
    done = report("--db", db, "--format", "json", "--since", "30d")
    assert done.returncode == 0, done.stderr
    peers = {p["peer"]: p for p in json.loads(done.stdout)["peers"]}
    assert peers["ide"]["verdict"] == "blocked by: legacy handshake, sampling"
    assert peers["agent"]["verdict"] == "blocked by: sampling"
    assert peers["batch"]["verdict"] == "ready to cut over"  # its legacy traffic is older than 30 days
    assert peers["ide"]["requests"] == 15 and peers["ide"]["legacy_share"] == 1.0
    assert peers["ide"]["failures"] == {"round cap": 3} and peers["ide"]["mrtr_rounds"] == 24
    assert peers["ide"]["sunset"] == "2027-03-01" and peers["ide"]["days_until_sunset"] == 89
    assert peers["agent"]["sunset"] is None and peers["agent"]["days_until_sunset"] is None
    assert json.loads(done.stdout)["days_until_removal"] == 238
    assert "reading usage store: " in done.stderr and "(100%)" in done.stderr  # progress
    wide = json.loads(report("--db", db, "--format", "json", "--since", "14w").stdout)
    batch = {p["peer"]: p for p in wide["peers"]}["batch"]
    assert batch["verdict"] == "blocked by: legacy handshake" and batch["legacy"] == 9


def test_report_table_and_html(tmp_path) -> None:
    db = str(tmp_path / "usage.db")
    synthetic_store(db)
    table = report("--db", db)
    assert table.returncode == 0
    assert "blocked by: legacy handshake, sampling" in table.stdout and "2027-03-01 (89d)" in table.stdout
    assert "ready to cut over" in table.stdout and "round cap 3" in table.stdout
    html = report("--db", db, "--format", "html").stdout
    assert html.startswith("<!doctype html>") and "<svg" in html and "http" not in html.split("<body>")[0]
    assert report("--db", str(tmp_path / "missing.db")).returncode == 2


def test_retention_drops_old_buckets(tmp_path) -> None:
    db = UsageDb(str(tmp_path / "usage.db"))
    rollup: dict = {}
    for day in ("2026-01-01", "2026-11-30"):
        add_to_rollup(rollup, build_record(LabelFolder(), Facts(at(day), "modern", "2026-07-28", "tools/list", False)))
    db.write(rollup, {}, 30, at(TODAY))
    assert [r["bucket"] for r in db.rows(0)] == [at("2026-11-30") - at("2026-11-30") % 3_600_000]


async def test_peers_and_sunsets_come_from_the_pins(aiohttp_server, tmp_path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[[peers]]\nname = "ide"\nclient_name = "ide-*"\nsunset = 2027-03-01\n'
                    '[[peers]]\nname = "retired"\nclient_name = "old-*"\nsunset = 2020-01-01\n')
    db = str(tmp_path / "usage.db")
    config = load_config(path, usage={"db": db, "flush_seconds": 3600})
    server = await aiohttp_server(create_app(config))
    url = str(server.make_url("/mcp"))
    async with Client(url, mode="legacy", client_info=types.Implementation(name="ide-plugin", version="2")) as client:
        await client.list_tools()
    async with Client(url, mode="legacy") as client:  # the SDK's own clientInfo: the default peer
        await client.list_tools()
    async with aiohttp.ClientSession() as http:  # past its sunset: initialize is refused (per-peer pins)
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old-tool", "version": "1"}}}
        async with http.post(url, json=body, headers={"Accept": "application/json, text/event-stream"}) as resp:
            assert "2020-01-01" in (await resp.json())["error"]["message"]
    await server.close()
    store = UsageDb(db)
    peers = {(r["peer"], r["method"], r["cause"]): r["count"] for r in store.rows(0)}
    assert peers == {("ide", "initialize", ""): 1, ("ide", "tools/list", ""): 1,
                     ("default", "initialize", ""): 1, ("default", "tools/list", ""): 1,
                     ("retired", "initialize", "sunset refusal"): 1}
    assert store.sunsets() == {"ide": "2027-03-01", "default": None, "retired": "2020-01-01"}
    store.close()


async def test_dashboard_needs_the_admin_token(aiohttp_client, tmp_path, monkeypatch) -> None:
    config = load_config(usage={"db": str(tmp_path / "u.db"), "admin_token_env": "TEST_USAGE_ADMIN"})
    monkeypatch.delenv("TEST_USAGE_ADMIN", raising=False)
    http = await aiohttp_client(create_app(config))
    assert (await http.get("/migration")).status == 403  # no token configured: disabled
    monkeypatch.setenv("TEST_USAGE_ADMIN", "s3cret")
    assert (await http.get("/migration")).status == 401
    assert (await http.get("/migration", headers={"Authorization": "Bearer nope"})).status == 401
    ok = await http.get("/migration", headers={"Authorization": "Bearer s3cret"})
    page = await ok.text()
    assert ok.status == 200 and "MCP migration progress" in page
    assert '<meta http-equiv="refresh" content="30">' in page  # auto-refresh, no script, nothing remote
    assert "<script" not in page and "http://" not in page and "https://" not in page
    jumped = await http.get("/migration?token=s3cret&since=7d", allow_redirects=False)
    assert jumped.status == 303 and "token" not in jumped.headers["Location"]
    assert "s3cret" not in jumped.headers["Set-Cookie"] and "HttpOnly" in jumped.headers["Set-Cookie"]
    followed = await http.get(jumped.headers["Location"])
    assert followed.status == 200
    as_json = await http.get("/migration?format=json", headers={"Authorization": "Bearer s3cret"})
    assert (await as_json.json())["removal_date"] == "2027-07-28"


def test_serve_then_report_from_the_command_line(tmp_path) -> None:
    """The README path: ``serve --usage-db FILE``, traffic, a stop (SIGTERM flushes), then ``report``."""
    import asyncio
    import socket

    db = tmp_path / "usage.sqlite3"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--port", str(port), "--usage-db", str(db),
                             "--no-access-log"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until_sync(lambda: accepts_sync(port), "serve listens", seconds=15)

        async def traffic() -> None:
            async with aiohttp.ClientSession() as http:
                body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "cli-test", "version": "1"}}}
                async with http.post(f"http://127.0.0.1:{port}/mcp", json=body,
                                     headers={"Accept": "application/json, text/event-stream"}) as resp:
                    assert resp.status == 200
        asyncio.run(traffic())
    finally:
        proc.terminate()
        proc.wait(30)
    done = subprocess.run([sys.executable, "-m", "gateway", "report", "--db", str(db), "--format", "json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    (peer,) = json.loads(done.stdout)["peers"]
    assert peer["clients"][0]["client"] == "cli-test" and peer["revisions"] == {"2025-06-18": 1}


def test_report_on_a_file_that_is_not_a_usage_store_says_so_in_one_line(tmp_path, capsys) -> None:
    from gateway.telemetry.report import main

    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a database at all, just text that is long enough to not be empty" * 20)
    assert main(["--db", str(bogus)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a usage store" in err


async def test_dashboard_refuses_a_bad_or_unbounded_window_with_400(aiohttp_client, tmp_path, monkeypatch) -> None:
    db = str(tmp_path / "u.db")
    synthetic_store(db)
    config = load_config(usage={"db": db, "admin_token_env": "TEST_USAGE_ADMIN", "retention_days": 60})
    monkeypatch.setenv("TEST_USAGE_ADMIN", "s3cret")
    http = await aiohttp_client(create_app(config))
    http.server.app[USAGE].clock_ms = lambda: at(TODAY)
    auth = {"Authorization": "Bearer s3cret"}
    for since, said in (("abc", "must look like 30d, 4w or 24h, not 'abc'"), ("-5d", "not '-5d'"),
                        ("1e9d", "not '1e9d'"), ("0d", "at least 1h"), ("9999999d", "9999999d is longer than"),
                        ("61d", "61d is longer than the 60 days of history kept ([gateway.usage] retention_days)")):
        resp = await http.get("/migration", params={"since": since, "format": "json"}, headers=auth)
        assert resp.status == 400 and said in await resp.text(), (since, await resp.text())
    longest = await http.get("/migration", params={"since": "60d", "format": "json"}, headers=auth)
    report = await longest.json()
    assert longest.status == 200 and report["window"] == "60 days" and len(report["peers"][0]["series"]) == 60
    hours = await http.get("/migration", params={"since": "24h"}, headers=auth)
    assert hours.status == 200 and "last 24 hours" in await hours.text()


def test_report_since_hours_and_the_retention_bound(tmp_path) -> None:
    db = str(tmp_path / "usage.db")
    synthetic_store(db)
    two = json.loads(report("--db", db, "--format", "json", "--since", "48h").stdout)  # to the end of TODAY
    assert two["window"] == "48 hours" and {p["peer"]: p["requests"] for p in two["peers"]} == {
        "ide": 5, "agent": 2, "batch": 3}  # 2026-12-01 only
    too_long = report("--db", db, "--since", "401d")
    assert too_long.returncode == 2 and too_long.stdout == ""
    assert too_long.stderr == ("--since: 401d is longer than the 400 days of history kept ([gateway.usage] "
                               "retention_days)\n")
    config = tmp_path / "gateway.toml"
    config.write_text("[gateway.usage]\nretention_days = 500\n")
    longer = report("--db", db, "--format", "json", "--since", "401d", "--config", str(config))
    assert longer.returncode == 0 and json.loads(longer.stdout)["window"] == "401 days"
    assert report("--db", db, "--since", "1e9d").returncode == 2


def reverse_store(path: str) -> None:
    """A 2026 client (agent) reaching two 2025-era upstreams through the reverse bridge, beside forward traffic."""
    folder, rollup = LabelFolder(), {}
    agent = {"name": "bot", "version": "2"}
    facts = [Facts(at("2026-12-01"), "modern", "2026-07-28", "tools/call", True, agent, "agent", None, rounds=2,
                   inputs=("sampling", "elicitation.form"), upstream="crm")] * 3
    facts += [Facts(at("2026-12-01"), "modern", "2026-07-28", "tools/call", True, agent, "agent", None, rounds=1,
                    inputs=("roots",), upstream="crm")]
    facts += [Facts(at("2026-12-02"), "modern", "2026-07-28", "subscriptions/listen", True, agent, "agent", None,
                    upstream="files")] * 2
    facts += [Facts(at("2026-12-01"), "legacy", "2025-11-25", "tools/call", True, {"name": "vscode-mcp"}, "ide",
                    None, features=("legacy handshake",))] * 5
    for fact in facts:
        add_to_rollup(rollup, build_record(folder, fact))
    db = UsageDb(path)
    db.write(rollup, {"agent": (None, 0), "ide": (None, 0)}, 400, at(TODAY))
    db.close()


def test_report_shows_the_reverse_direction_by_legacy_upstream(tmp_path) -> None:
    db = str(tmp_path / "reverse.db")
    reverse_store(db)
    table = report("--db", db, "--since", "7d")
    assert table.returncode == 0, table.stderr
    section = table.stdout.split("modern clients -> legacy servers (reverse bridge)\n")[1].splitlines()
    assert section == [
        "  crm: 4 requests, 7 rounds, 0 errors, 0 cancelled",
        "    legacy features reached: sampling 3, elicitation.form 3, roots 1",
        "    methods: tools/call 4",
        "    clients: agent/bot 4",
        "    translation failures: none",
        "  files: 2 requests, 0 rounds, 0 errors, 0 cancelled",
        "    legacy features reached: none",
        "    methods: subscriptions/listen 2",
        "    clients: agent/bot 2",
        "    translation failures: none"]
    data = json.loads(report("--db", db, "--format", "json", "--since", "7d").stdout)
    assert [(u["upstream"], u["requests"], u["inputs"]) for u in data["reverse"]] == [
        ("crm", 4, {"sampling": 3, "elicitation.form": 3, "roots": 1}), ("files", 2, {})]
    html = report("--db", db, "--format", "html", "--since", "7d").stdout
    assert 'data-upstream="crm" data-requests="4"' in html and "sampling: 3, elicitation.form: 3, roots: 1" in html
    forward_only = str(tmp_path / "forward.db")
    synthetic_store(forward_only)
    assert report("--db", forward_only).stdout.rstrip().endswith("modern clients -> legacy servers (reverse bridge)\n"
                                                                 "  none in this window")
