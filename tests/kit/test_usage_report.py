"""kit.usage_report: the window (``--since`` / ``/migration?since=`` syntax, units and the retention bound) and the
reverse direction's section (modern clients -> legacy servers), from rows."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.usage import DAY_MS, HOUR_MS, day_number
from kit.usage_report import UNNAMED, ReportBuilder, Unit, Window, WindowError, is_reverse, parse_window


def test_days_weeks_hours_and_a_bare_number() -> None:
    assert parse_window("30d", 400) == Window(30, Unit.DAY) and parse_window(" 4w ", 400) == Window(4, Unit.WEEK)
    assert parse_window("24h", 400) == Window(24, Unit.HOUR) and parse_window("7", 400) == Window(7, Unit.DAY)
    assert str(Window(24, Unit.HOUR)) == "24 hours" and str(Window(1, Unit.DAY)) == "1 day"
    assert parse_window("400d", 400).hours == 400 * 24 and parse_window("9600h", 400).hours == 9600


@pytest.mark.parametrize("text", ["abc", "-5d", "1e9d", "7x", "", "5 d", "\u0663d", "12345678d", "0x10d"])
def test_unreadable_windows_say_what_they_should_look_like(text: str) -> None:
    with pytest.raises(WindowError, match="must look like 30d, 4w or 24h"):
        parse_window(text, 400)


@pytest.mark.parametrize("text", ["401d", "58w", "9601h", "9999999d"])
def test_a_window_longer_than_the_history_kept_is_refused(text: str) -> None:
    with pytest.raises(WindowError, match=r"longer than the 400 days of history kept \(\[gateway.usage\] "
                                          r"retention_days\)"):
        parse_window(text, 400)
    assert parse_window(text, None).count > 0  # the syntax alone is fine


def test_zero_is_refused() -> None:
    with pytest.raises(WindowError, match="at least 1h"):
        parse_window("0d", 400)


def test_where_a_window_starts() -> None:
    now = day_number("2026-12-02") * DAY_MS + 10 * HOUR_MS + 5
    assert Window(1).first_ms(now) == day_number("2026-12-02") * DAY_MS  # today counts
    assert Window(1, Unit.WEEK).first_ms(now) == day_number("2026-11-26") * DAY_MS
    assert Window(24, Unit.HOUR).first_ms(now) == day_number("2026-12-01") * DAY_MS + 11 * HOUR_MS


# --- the other direction: modern clients -> legacy servers -----------------------------------------------------
def row(**given: Any) -> dict[str, Any]:
    base = {"bucket": 0, "peer": "default", "client": "agent", "client_version": "1", "era": "modern",
            "revision": "2026-07-28", "method": "tools/call", "translated": 1, "inputs": "", "features": "",
            "outcome": "ok", "cause": "", "transport": "streamable_http", "upstream": "crm", "count": 1, "rounds": 0}
    return {**base, **given}


@pytest.mark.parametrize(("era", "translated", "reverse"), [
    ("modern", 1, True),    # a 2026 client carried to a 2025-era upstream
    ("modern", 0, False),   # a 2026 client passed through to a 2026 upstream
    ("legacy", 1, False),   # the forward bridge: a 2025 client in front of a 2026 server
    ("legacy", 0, False),   # a 2025 client relayed as it is
])
def test_which_rows_are_the_reverse_direction(era: str, translated: int, reverse: bool) -> None:
    assert is_reverse(row(era=era, translated=translated)) is reverse
    builder = ReportBuilder()
    builder.add(row(era=era, translated=translated))
    assert [u["upstream"] for u in builder.finish("2026-12-02", 1, {})["reverse"]] == (["crm"] if reverse else [])


def test_the_reverse_section_counts_features_methods_and_clients_per_upstream() -> None:
    builder = ReportBuilder()
    for given in [dict(count=4, rounds=8, inputs="sampling,elicitation.form"),
                  dict(count=2, rounds=2, inputs="elicitation.url", client="ide", peer="team"),
                  dict(count=3, method="subscriptions/listen"),
                  dict(count=1, rounds=1, inputs="roots", outcome="error", cause="client timeout"),
                  dict(count=5, upstream="billing", method="resources/read", outcome="cancelled"),
                  dict(count=6, upstream="", method="tools/list"),          # written before rows named upstreams
                  dict(count=7, era="legacy", upstream="")]:               # the forward direction: not here
        builder.add(row(**given))
    reverse = builder.finish("2026-12-02", 1, {})["reverse"]
    assert [u["upstream"] for u in reverse] == [UNNAMED, "billing", "crm"]
    crm = reverse[2]
    assert crm == {"upstream": "crm", "requests": 10, "rounds": 11, "errors": 1, "cancelled": 0,
                   "inputs": {"sampling": 4, "elicitation.form": 4, "elicitation.url": 2, "roots": 1},
                   "methods": {"tools/call": 7, "subscriptions/listen": 3},
                   "clients": {"default/agent": 8, "team/ide": 2}, "failures": {"client timeout": 1}}
    assert reverse[1]["cancelled"] == 5 and reverse[1]["inputs"] == {} and reverse[0]["requests"] == 6


def test_no_reverse_rows_is_an_empty_section() -> None:
    assert ReportBuilder().finish("2026-12-02", 1, {})["reverse"] == []
