"""Usage accounting, pure: records, deprecated features, causes, label bound, dates, report verdicts."""

from __future__ import annotations

import pytest

from adapters.errors import translate_upstream_error
from adapters.usage import (
    DAY_MS,
    FEATURES,
    KEY_FIELDS,
    OTHER,
    Facts,
    LabelFolder,
    add_to_rollup,
    build_record,
    day_number,
    days_until,
    failure_cause,
    input_kind,
    iso_day,
    legacy_request_features,
    modern_request_features,
    outcome_of,
    rollup_key,
)
from kit.usage_report import ReportBuilder, verdict

TODAY = "2026-12-02"


@pytest.mark.parametrize("method, expected", [
    ("tools/call", ("legacy handshake",)),
    ("ping", ("legacy handshake", "ping")),
    ("logging/setLevel", ("legacy handshake", "logging/setLevel")),
    ("resources/subscribe", ("legacy handshake", "resources/subscribe")),
    ("resources/unsubscribe", ("legacy handshake", "resources/subscribe")),
])
def test_legacy_request_features(method, expected) -> None:
    assert legacy_request_features(method) == expected


@pytest.mark.parametrize("entry, kind, features", [
    ({"method": "sampling/createMessage", "params": {"messages": []}}, "sampling", ("sampling",)),
    ({"method": "sampling/createMessage", "params": {"includeContext": "none"}}, "sampling", ("sampling",)),
    ({"method": "sampling/createMessage", "params": {"includeContext": "thisServer"}}, "sampling",
     ("sampling", "includeContext")),
    ({"method": "roots/list"}, "roots", ("roots",)),
    ({"method": "elicitation/create", "params": {"mode": "form"}}, "elicitation.form", ()),
    ({"method": "elicitation/create", "params": {}}, "elicitation.form", ()),
    ({"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}}, "elicitation.url",
     ("elicitation url ids",)),
    ({"method": "something/else"}, None, ()),
    ("garbage", None, ()),
])
def test_input_kinds(entry, kind, features) -> None:
    assert input_kind(entry) == (kind, features)


def test_modern_features_are_read_from_shapes_only() -> None:
    params = {"_meta": {"io.modelcontextprotocol/logLevel": "info"},
              "inputResponses": {"a": {"role": "assistant", "model": "m", "content": {}},
                                 "b": {"roots": []}, "c": {"action": "accept"}}}
    assert modern_request_features(params) == ("sampling", "roots", "logging/setLevel")
    assert modern_request_features({}) == () and modern_request_features(None) == ()


@pytest.mark.parametrize("error, cause", [
    ({"code": -32021, "message": "needs sampling"}, "missing capability"),
    ({"code": -32000, "message": "x", "data": {"limit": "max_rounds", "value": 10}}, "round cap"),
    ({"code": -32000, "message": "x", "data": {"limit": "client_answer_timeout_seconds"}}, "client timeout"),
    ({"code": -32000, "message": "x", "data": {"limit": "max_pending_per_session"}}, "gateway limit"),
    ({"code": -32603, "message": "upstream failure (timeout)", "data": {"upstream": "timeout"}}, "upstream error"),
    (translate_upstream_error({"code": -32020, "message": "header mismatch"}).to_wire(), "upstream error"),
    (translate_upstream_error({"code": -32042, "message": "retired"}).to_wire(), "upstream error"),
    ({"code": -32603, "message": "an upstream word in a message says nothing"}, "request error"),
    ({"code": -32602, "message": "ended", "data": {"supported": ["2026-07-28"], "sunset": "2026-01-01"}},
     "sunset refusal"),
    ({"code": -1, "message": "no", "data": {"inputKey": "k", "clientError": {}}}, "client refused"),
    ({"code": -32602, "message": "unknown tool"}, "request error"),
])
def test_failure_causes(error, cause) -> None:
    assert failure_cause(error) == cause
    assert outcome_of({"jsonrpc": "2.0", "id": 1, "error": error}) == ("error", cause)


def test_outcomes() -> None:
    assert outcome_of({"id": 1, "result": {}}) == ("ok", "")
    assert outcome_of(None) == ("cancelled", "")


def test_label_folder_bounds_client_names_and_versions() -> None:
    folder = LabelFolder(max_clients=3, max_versions=2)
    assert [folder.client(f"c{i}", "1") for i in range(5)] == [("c0", "1"), ("c1", "1"), ("c2", "1"),
                                                                (OTHER, OTHER), (OTHER, OTHER)]
    assert folder.client("c0", "2") == ("c0", "2") and folder.client("c0", "3") == ("c0", OTHER)
    assert folder.client("c1", "1") == ("c1", "1")  # admitted names stay admitted
    assert folder.client('evil"\n' + "x" * 200, 1)[0] == OTHER
    assert LabelFolder().client('bad"\nname', None) == ("bad__name", "unknown")
    assert len(LabelFolder().client("y" * 500, "1")[0]) == 64


def test_metric_labels_are_known_names_and_configured_peers_clients_not_first_come() -> None:
    """60 invented names fill the default peer's pool (max_clients 50); a known name and a configured peer's
    client arriving later are still admitted, and only they are labelled on /metrics."""
    folder = LabelFolder()
    invented = [folder.labels(f"rnd-{i}", "1") for i in range(60)]
    assert invented[:50] == [(f"rnd-{i}", "1", False) for i in range(50)]
    assert invented[50:] == [(OTHER, OTHER, False)] * 10
    assert folder.labels("claude-ai", "0.1") == ("claude-ai", "0.1", True)
    assert folder.labels("mcp", "0.1.0") == ("mcp", "0.1.0", True)  # the official Python SDK's default name
    assert folder.labels("acme-ci", "3", configured=True) == ("acme-ci", "3", True)
    assert folder.labels("rnd-1", "1", configured=True) == ("rnd-1", "1", True)  # now a configured peer's
    assert [folder.labels(f"ci-{i}", "1", configured=True)[2] for i in range(60)].count(True) == 49  # own pool
    assert LabelFolder(known=frozenset({"in-house"})).labels("in-house", "1") == ("in-house", "1", True)
    record = build_record(folder, Facts(0, "legacy", "2025-11-25", "tools/call", True, ("rnd-2", "1")))
    assert (record.client, record.metric_client) == ("rnd-2", OTHER)
    record = build_record(folder, Facts(0, "legacy", "2025-11-25", "tools/call", True, ("acme-ci", "3"),
                                        "ci", configured=True))
    assert (record.client, record.metric_client) == ("acme-ci", "acme-ci")


def test_label_folder_seed_keeps_labels_stable_across_restarts() -> None:
    folder = LabelFolder(max_clients=2)
    folder.seed([("old", "1"), ("older", "2"), (OTHER, OTHER)])
    assert folder.client("new", "1") == (OTHER, OTHER) and folder.client("old", "1") == ("old", "1")


def test_build_record_folds_method_and_revision_and_never_keeps_content() -> None:
    folder = LabelFolder()
    facts = Facts(5 * DAY_MS + 123, "legacy", "1999-01-01", "secret/method", True,
                  {"name": "ide", "version": "2.1"}, None, None, rounds=2, inputs=("roots", "sampling"),
                  features=("sampling", "legacy handshake"), outcome="error", cause="round cap")
    record = build_record(folder, facts)
    assert (record.peer, record.client, record.client_version, record.revision, record.method) == (
        "default", "ide", "2.1", OTHER, OTHER)
    assert record.inputs == ("sampling", "roots") and record.features == ("legacy handshake", "sampling")
    assert record.sunset is None and (record.outcome, record.cause) == ("error", "round cap")


def test_rollup_adds_counts_and_rounds() -> None:
    rollup: dict = {}
    record = build_record(LabelFolder(), Facts(0, "legacy", "2025-11-25", "tools/call", True, rounds=2))
    add_to_rollup(rollup, record, 3)
    add_to_rollup(rollup, record)
    assert list(rollup.values()) == [[4, 8]]


def test_rollup_counts_exactly_per_hour_bucket() -> None:
    folder, rollup = LabelFolder(), {}
    for ts in (0, 10, 3_600_000 - 1, 3_600_000):
        add_to_rollup(rollup, build_record(folder, Facts(ts, "modern", "2026-07-28", "tools/call", False, rounds=1)))
    assert sorted((k[0], v) for k, v in rollup.items()) == [(0, [3, 3]), (3_600_000, [1, 1])]
    assert len(rollup_key(build_record(folder, Facts(0, "modern", "2026-07-28", "x", False)))) == len(KEY_FIELDS)


@pytest.mark.parametrize("iso", ["1970-01-01", "2000-02-29", "2026-12-02", "2027-07-28", "2100-03-01"])
def test_dates_round_trip(iso) -> None:
    assert iso_day(day_number(iso)) == iso


def test_days_until() -> None:
    assert day_number("1970-01-02") == 1
    assert days_until("2027-07-28", TODAY) == 238
    assert days_until("2026-12-01", TODAY) == -1 and days_until(None, TODAY) is None


def _row(day: str, peer: str, client: str, era: str, features: str = "", count: int = 1, cause: str = "",
         inputs: str = "") -> dict:
    return {"bucket": day_number(day) * DAY_MS + 7_200_000, "peer": peer, "client": client, "client_version": "1",
            "era": era, "revision": "2025-11-25" if era == "legacy" else "2026-07-28", "method": "tools/call",
            "translated": int(era == "legacy"), "inputs": inputs, "features": features,
            "outcome": "error" if cause else "ok", "cause": cause, "count": count, "rounds": 0}


def test_report_verdicts_for_three_peers() -> None:
    builder = ReportBuilder()
    rows = [
        # ide: still legacy, needs sampling, one round-cap failure
        _row("2026-11-30", "ide", "vscode-mcp", "legacy", "legacy handshake,sampling", 4, inputs="sampling"),
        _row("2026-12-01", "ide", "vscode-mcp", "legacy", "legacy handshake", 2, cause="round cap"),
        # agent: modern, but still answers sampling through MRTR
        _row("2026-12-01", "agent", "bot", "modern", "sampling", 3),
        _row("2026-12-02", "agent", "bot", "modern", "", 5),
        # batch: migrated (its legacy traffic is older than the window, which the store's read filters out)
        _row("2026-12-02", "batch", "cron", "modern", "", 7),
    ]
    for row in rows:
        builder.add(row)
    report = builder.finish(TODAY, 30, {"ide": "2027-03-01"})
    peers = {p["peer"]: p for p in report["peers"]}
    assert peers["ide"]["verdict"] == "blocked by: legacy handshake, sampling"
    assert peers["agent"]["verdict"] == "blocked by: sampling"
    assert peers["batch"]["verdict"] == "ready to cut over"
    assert peers["ide"]["legacy_share"] == 1.0 and peers["agent"]["legacy_share"] == 0.0
    assert peers["ide"]["failures"] == {"round cap": 2} and peers["ide"]["inputs"] == {"sampling": 4}
    assert peers["ide"]["features"] == {"legacy handshake": 6, "sampling": 4}
    assert peers["ide"]["days_until_sunset"] == 89 and peers["agent"]["sunset"] is None
    assert report["days_until_removal"] == 238
    series = {d["day"]: d for d in peers["ide"]["series"]}
    assert len(peers["ide"]["series"]) == 30 and series["2026-11-30"] == {"day": "2026-11-30", "legacy": 4, "modern": 0}
    assert peers["ide"]["clients"][0]["client"] == "vscode-mcp"
    assert peers["ide"]["clients"][0]["days_until_sunset"] == 89


def test_verdict_order_follows_features() -> None:
    assert verdict({}) == "ready to cut over"
    assert verdict({f: 1 for f in reversed(FEATURES)}) == "blocked by: " + ", ".join(FEATURES)
    assert verdict({"ping": 0}) == "ready to cut over"


def test_the_transport_is_a_label_and_http_sse_a_deprecated_feature() -> None:
    folder = LabelFolder()
    through_sse = build_record(folder, Facts(0, "legacy", "2024-11-05", "tools/call", True,
                                             features=("legacy handshake", "sampling"), transport="http_sse"))
    assert through_sse.transport == "http_sse" and through_sse.revision == "2024-11-05"
    assert through_sse.features == ("legacy handshake", "HTTP+SSE transport", "sampling")
    for transport in ("stdio", "websocket", "streamable_http"):
        record = build_record(folder, Facts(0, "legacy", "2025-11-25", "tools/list", False,
                                            features=("legacy handshake",), transport=transport))
        assert record.transport == transport and record.features == ("legacy handshake",)
    assert build_record(folder, Facts(0, "legacy", "2025-11-25", "ping", False, transport="pigeon")).transport == OTHER
    assert build_record(folder, Facts(0, "modern", "2026-07-28", "tools/list", False)).transport == "streamable_http"
    assert rollup_key(through_sse)[KEY_FIELDS.index("transport")] == "http_sse"


def test_the_report_counts_transports_and_blocks_on_http_sse() -> None:
    builder = ReportBuilder()
    base = {"bucket": 0, "peer": "default", "client_version": "1", "era": "legacy", "revision": "2025-11-25",
            "method": "tools/call", "translated": 1, "inputs": "", "outcome": "ok", "cause": "", "rounds": 0}
    builder.add({**base, "client": "old", "features": "legacy handshake,HTTP+SSE transport", "transport": "http_sse",
                 "count": 3})
    builder.add({**base, "client": "desk", "features": "legacy handshake", "transport": "stdio", "count": 2})
    peer = builder.finish(TODAY, 30, {})["peers"][0]
    assert peer["transports"] == {"http_sse": 3, "stdio": 2}
    assert peer["features"]["HTTP+SSE transport"] == 3
    old, desk = peer["clients"][1], peer["clients"][0]
    assert (old["client"], desk["client"]) == ("old", "desk")
    assert old["verdict"] == "blocked by: legacy handshake, HTTP+SSE transport"
    assert desk["verdict"] == "blocked by: legacy handshake"
