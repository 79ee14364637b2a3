"""The trace writer's failures: a file that cannot be opened fails where the tracer is made (``serve`` stops
start-up with it: tests/gateway/ops/test_serve_lifecycle.py); one that stops being writable later is logged once,
and the writer thread neither dies with a traceback nor keeps the records queued."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

import pytest

from gateway.telemetry.trace import Tracer


def test_a_file_that_cannot_be_opened_fails_at_once(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").mkdir()
    with pytest.raises(IsADirectoryError):
        Tracer(tmp_path / "t.jsonl", max_bytes=1 << 20)
    with pytest.raises(FileNotFoundError):
        Tracer(tmp_path / "missing" / "t.jsonl", max_bytes=1 << 20)


def test_a_write_failing_later_is_logged_once_and_tracing_stops(tmp_path: Path, caplog, monkeypatch) -> None:
    died: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))
    folder = tmp_path / "var"
    folder.mkdir()
    tracer = Tracer(folder / "t.jsonl", max_bytes=1024)
    shutil.rmtree(folder)  # the next rotation cannot move the file: the folder is gone
    with caplog.at_level(logging.ERROR, logger="gateway.trace"):
        for n in range(60):
            tracer("client", {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "t"}})
        tracer.close()
    assert not died
    errors = [r.getMessage() for r in caplog.records if r.name == "gateway.trace"]
    assert len(errors) == 1 and "cannot write" in errors[0] and "tracing stops" in errors[0], errors
    assert tracer._queue.empty()
