"""SQLite storage: notes, the replay (nonce) store, out-of-band connection records and tasks.

Claiming a confirmation's nonce and deleting its note happen in one ``BEGIN IMMEDIATE`` transaction, so two
server processes sharing the file can never both execute one confirmation: the second one's INSERT of the same
nonce hits the primary key and its whole transaction rolls back. The same transaction records the step's result
under the nonce (:class:`Reply`), so a resend of that very step (the same state, the same answers: a gateway
that lost the answer and sent the round again) is answered with what happened, not refused as a replay. The
recorded results expire with their state and at most ``MAX_RECORDED_REPLIES`` are kept. WAL mode and a busy
timeout let several processes share the file.

Tasks (the tasks extension) are rows holding a serialized record (``modern_server.tasks``) plus the columns the
store needs to bound, expire and lease them: a task is created in one transaction that also enforces the bounds,
changed only by compare-and-set on its ``version``, and run by the process that holds its lease (``owner`` until
``lease_until``), so a task whose process died is taken over by whichever process sees it next.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, uri TEXT NOT NULL, title TEXT NOT NULL,
                                  body TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nonces (nonce TEXT PRIMARY KEY, outcome TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replies (nonce TEXT PRIMARY KEY, answer TEXT NOT NULL, result TEXT NOT NULL,
                                    expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS replies_by_expiry ON replies (expires);
CREATE TABLE IF NOT EXISTS connections (id TEXT PRIMARY KEY, principal TEXT NOT NULL, service TEXT NOT NULL,
                                        completed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, principal TEXT NOT NULL, active INTEGER NOT NULL,
                                  created REAL NOT NULL, expires REAL NOT NULL, version INTEGER NOT NULL,
                                  owner TEXT NOT NULL, lease_until REAL NOT NULL, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS tasks_by_principal ON tasks (principal, active);
CREATE INDEX IF NOT EXISTS tasks_by_expiry ON tasks (expires);
"""

SEED_NOTES = (
    ("n-1001", "file:///work/notes/2026/standup-a.md", "Standup", "Shipped the parser.", "2026-11-02"),
    ("n-1002", "file:///work/notes/2026/standup-b.md", "Standup", "Reviewed the gateway.", "2026-11-09"),
    ("n-1003", "file:///work/notes/roadmap.md", "Roadmap", "Q1: stateless everything.", "2026-10-20"),
    ("n-1004", "file:///work/notes/ideas/sqlite.md", "Ideas", "One transaction per confirmation.", "2026-11-15"),
    ("n-1005", "file:///work/notes-evil/secret.md", "Standup", "Not yours.", "2026-11-01"),
    ("n-1006", "file:///work/private.md", "Private", "Outside every workspace.", "2026-09-30"),
)


# Recorded step results kept at once: past it the soonest-expiring go first, and a resend of such a step is
# refused as a replay (the gateway then reports its outcome as unknown).
MAX_RECORDED_REPLIES = 4096


@dataclass(frozen=True, slots=True)
class Reply:
    """A confirmed step's result, recorded under its nonce: ``answer`` identifies the answers it was given (a
    digest), ``expires`` is its state's expiry (epoch seconds), after which nobody can resend the step."""

    answer: str
    result: dict[str, Any]
    expires: float


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A stored task: its serialized record and who runs it (``owner``) until when (``lease_until``)."""

    record: str
    version: int
    owner: str
    lease_until: float


class TaskLimitError(Exception):
    """Creating the task would pass a bound; ``args[0]`` names it (``per_principal`` or ``total``)."""


class ReplayError(Exception):
    """The confirmation was already used (by this or another process)."""


class GoneError(Exception):
    """The note to delete no longer exists."""


@dataclass(frozen=True, slots=True)
class Note:
    id: str
    uri: str
    title: str
    body: str
    created: str


class Store:
    def __init__(self, path: str, *, seed: bool = True, max_replies: int = MAX_RECORDED_REPLIES) -> None:
        self._max_replies = max_replies
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        if seed:
            self._db.executemany("INSERT OR IGNORE INTO notes VALUES (?, ?, ?, ?, ?)", SEED_NOTES)

    def close(self) -> None:
        self._db.close()

    def notes(self) -> list[Note]:
        rows = self._db.execute("SELECT id, uri, title, body, created FROM notes ORDER BY created, id")
        return [Note(*row) for row in rows]

    def note(self, note_id: str) -> Note | None:
        row = self._db.execute("SELECT id, uri, title, body, created FROM notes WHERE id = ?", (note_id,)).fetchone()
        return Note(*row) if row else None

    def nonce_used(self, nonce: str) -> bool:
        return self._db.execute("SELECT 1 FROM nonces WHERE nonce = ?", (nonce,)).fetchone() is not None

    def reply(self, nonce: str, answer: str, now: float) -> dict[str, Any] | None:
        """The result recorded for the step ``nonce`` confirmed with the answers ``answer``; None when there is
        none (never recorded, evicted, expired) or the answers differ (another step: a replay)."""
        row = self._db.execute("SELECT result FROM replies WHERE nonce = ? AND answer = ? AND expires > ?",
                               (nonce, answer, now)).fetchone()
        result: dict[str, Any] | None = json.loads(row[0]) if row else None
        return result

    def _record(self, nonce: str, reply: Reply, now: float) -> None:
        """Inside the claim's transaction: drop expired results, make room under the bound, record this one."""
        self._db.execute("DELETE FROM replies WHERE expires <= ?", (now,))
        (count,) = self._db.execute("SELECT COUNT(*) FROM replies").fetchone()
        if count >= self._max_replies:
            self._db.execute("DELETE FROM replies WHERE nonce IN (SELECT nonce FROM replies ORDER BY expires "
                             "LIMIT ?)", (count - self._max_replies + 1,))
        self._db.execute("INSERT INTO replies VALUES (?, ?, ?, ?)",
                         (nonce, reply.answer, json.dumps(reply.result), reply.expires))

    def _claim(self, nonce: str, outcome: str, statements: Iterable[tuple[str, tuple[str, ...]]],
               reply: Reply | None = None, now: float = 0.0) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("INSERT INTO nonces VALUES (?, ?)", (nonce, outcome))
            for sql, args in statements:
                if self._db.execute(sql, args).rowcount != 1:
                    raise GoneError(args)
            if reply is not None and self._max_replies > 0:
                self._record(nonce, reply, now)
        except sqlite3.IntegrityError:
            self._db.execute("ROLLBACK")
            raise ReplayError(nonce) from None
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def delete_with_nonce(self, nonce: str, note_id: str, reply: Reply | None = None, now: float = 0.0) -> None:
        self._claim(nonce, "deleted", [("DELETE FROM notes WHERE id = ?", (note_id,))], reply, now)

    def consume_nonce(self, nonce: str, outcome: str, reply: Reply | None = None, now: float = 0.0) -> None:
        self._claim(nonce, outcome, [], reply, now)

    def open_connection(self, conn_id: str, principal: str, service: str) -> None:
        self._db.execute("INSERT INTO connections (id, principal, service) VALUES (?, ?, ?)",
                         (conn_id, principal, service))

    def connection(self, conn_id: str) -> tuple[str, str, bool] | None:
        row = self._db.execute("SELECT principal, service, completed FROM connections WHERE id = ?",
                               (conn_id,)).fetchone()
        return (row[0], row[1], bool(row[2])) if row else None

    def complete_connection(self, conn_id: str, principal: str) -> bool:
        cur = self._db.execute("UPDATE connections SET completed = 1 WHERE id = ? AND principal = ?",
                               (conn_id, principal))
        return cur.rowcount == 1

    # ------------------------------------------------------------------------------------------ tasks

    def create_task(self, task_id: str, principal: str, record: str, *, created: float, expires: float,
                    owner: str, lease_until: float, max_active: int, max_total: int) -> None:
        """Insert a working task, or raise :class:`TaskLimitError`. Expired tasks go first; past ``max_total``
        the oldest finished tasks make room; live tasks are never evicted."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("DELETE FROM tasks WHERE expires <= ?", (created,))
            (active,) = self._db.execute("SELECT COUNT(*) FROM tasks WHERE principal = ? AND active = 1",
                                         (principal,)).fetchone()
            if active >= max_active:
                raise TaskLimitError("per_principal")
            (total,) = self._db.execute("SELECT COUNT(*) FROM tasks").fetchone()
            if total >= max_total:
                self._db.execute("DELETE FROM tasks WHERE id IN (SELECT id FROM tasks WHERE active = 0 "
                                 "ORDER BY created LIMIT ?)", (total - max_total + 1,))
                (total,) = self._db.execute("SELECT COUNT(*) FROM tasks").fetchone()
                if total >= max_total:
                    raise TaskLimitError("total")
            self._db.execute("INSERT INTO tasks VALUES (?, ?, 1, ?, ?, 0, ?, ?, ?)",
                             (task_id, principal, created, expires, owner, lease_until, record))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def task(self, task_id: str) -> TaskRow | None:
        row = self._db.execute("SELECT record, version, owner, lease_until FROM tasks WHERE id = ?",
                               (task_id,)).fetchone()
        return TaskRow(*row) if row else None

    def save_task(self, task_id: str, expected_version: int, version: int, record: str, active: bool) -> bool:
        """Compare-and-set: False when the stored version is no longer ``expected_version`` (or the row is gone)."""
        cur = self._db.execute("UPDATE tasks SET record = ?, version = ?, active = ? WHERE id = ? AND version = ?",
                               (record, version, int(active), task_id, expected_version))
        return cur.rowcount == 1

    def lease_task(self, task_id: str, owner: str, now: float, until: float) -> bool:
        """Take (or renew) the right to run a live task: granted when ``owner`` holds it or its lease ran out."""
        cur = self._db.execute("UPDATE tasks SET owner = ?, lease_until = ? WHERE id = ? AND active = 1 AND "
                               "(owner = ? OR lease_until <= ?)", (owner, until, task_id, owner, now))
        return cur.rowcount == 1

    def delete_task(self, task_id: str) -> None:
        self._db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))

    def release_task(self, task_id: str, owner: str) -> None:
        """Give up running a task (this process stops): the next process that sees it may resume it at once."""
        self._db.execute("UPDATE tasks SET lease_until = 0 WHERE id = ? AND owner = ?", (task_id, owner))
