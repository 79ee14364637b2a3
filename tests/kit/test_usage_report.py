"""kit.usage_report's window: ``--since`` / ``/migration?since=`` syntax, units and the retention bound."""

from __future__ import annotations

import pytest

from adapters.usage import DAY_MS, HOUR_MS, day_number
from kit.usage_report import Unit, Window, WindowError, parse_window


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
