"""Opening the usage database while another process prepares it (``serve --workers N`` starting): SQLite answers
the journal or schema change that meets the other one with "database is locked" at once, without waiting; the
opening tries again instead of ending the worker."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gateway.telemetry import usage


class LockedOnce:
    """A connection whose first statements fail as a concurrent preparation makes them fail."""

    def __init__(self, conn: sqlite3.Connection, failures: int) -> None:
        self.conn, self.failures = conn, failures

    def execute(self, sql: str, *args: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("database is locked")
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def test_a_database_another_process_is_preparing_is_opened_after_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = sqlite3.connect
    monkeypatch.setattr(usage.sqlite3, "connect", lambda *a, **k: LockedOnce(real(*a, **k), 3))
    db = usage.UsageDb(str(tmp_path / "usage.sqlite3"))
    try:
        assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        db.close()


def test_other_errors_are_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(LockedOnce):
        def execute(self, sql: str, *args: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

    real = sqlite3.connect
    monkeypatch.setattr(usage.sqlite3, "connect", lambda *a, **k: Broken(real(*a, **k), 0))
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        usage.UsageDb(str(tmp_path / "usage.sqlite3"))
