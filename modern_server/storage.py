"""SQLite storage: notes, the replay (nonce) store, and out-of-band connection records.

Claiming a confirmation's nonce and deleting its note happen in one ``BEGIN IMMEDIATE`` transaction, so two
server processes sharing the file can never both execute one confirmation: the second one's INSERT of the same
nonce hits the primary key and its whole transaction rolls back. WAL mode and a busy timeout let several
processes share the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (id TEXT PRIMARY KEY, uri TEXT NOT NULL, title TEXT NOT NULL,
                                  body TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nonces (nonce TEXT PRIMARY KEY, outcome TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS connections (id TEXT PRIMARY KEY, principal TEXT NOT NULL, service TEXT NOT NULL,
                                        completed INTEGER NOT NULL DEFAULT 0);
"""

SEED_NOTES = (
    ("n-1001", "file:///work/notes/2026/standup-a.md", "Standup", "Shipped the parser.", "2026-11-02"),
    ("n-1002", "file:///work/notes/2026/standup-b.md", "Standup", "Reviewed the gateway.", "2026-11-09"),
    ("n-1003", "file:///work/notes/roadmap.md", "Roadmap", "Q1: stateless everything.", "2026-10-20"),
    ("n-1004", "file:///work/notes/ideas/sqlite.md", "Ideas", "One transaction per confirmation.", "2026-11-15"),
    ("n-1005", "file:///work/notes-evil/secret.md", "Standup", "Not yours.", "2026-11-01"),
    ("n-1006", "file:///work/private.md", "Private", "Outside every workspace.", "2026-09-30"),
)


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
    def __init__(self, path: str, *, seed: bool = True) -> None:
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

    def _claim(self, nonce: str, outcome: str, statements: Iterable[tuple[str, tuple[str, ...]]]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("INSERT INTO nonces VALUES (?, ?)", (nonce, outcome))
            for sql, args in statements:
                if self._db.execute(sql, args).rowcount != 1:
                    raise GoneError(args)
        except sqlite3.IntegrityError:
            self._db.execute("ROLLBACK")
            raise ReplayError(nonce) from None
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def delete_with_nonce(self, nonce: str, note_id: str) -> None:
        self._claim(nonce, "deleted", [("DELETE FROM notes WHERE id = ?", (note_id,))])

    def consume_nonce(self, nonce: str, outcome: str) -> None:
        self._claim(nonce, outcome, [])

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
