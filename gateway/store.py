"""The session store interface and its in-memory implementation.

Only plain records (``adapters.records``) cross this interface, serialized to dicts, so a shared store for
several gateway replicas (a later issue) can implement the same five-method protocol; sockets, streams and tasks
stay in ``runtime``.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from adapters.records import PendingRound, SessionRecord


class SessionStore(Protocol):
    async def get_session(self, session_id: str) -> SessionRecord | None: ...
    async def put_session(self, record: SessionRecord) -> None: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def put_round(self, record: PendingRound) -> None: ...
    async def get_round(self, bridge_id: str) -> PendingRound | None: ...
    async def delete_round(self, bridge_id: str) -> None: ...
    async def rounds_of(self, session_id: str) -> list[PendingRound]: ...


def _dump(record: Any) -> str:
    return json.dumps(record.to_dict(), separators=(",", ":"))


class InMemoryStore:
    """Keeps records serialized as JSON text, exactly as a shared store would: callers can never alias the
    stored state, and anything that would not survive a real store fails here first. (JSON text is also about
    five times cheaper than deep copies of dicts, measured by the benchmark's profile.)"""

    def __init__(self) -> None:
        self._sessions: dict[str, str] = {}
        self._rounds: dict[str, tuple[str, str]] = {}  # bridge id -> (session id, record)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        data = self._sessions.get(session_id)
        return SessionRecord.from_dict(json.loads(data)) if data is not None else None

    async def put_session(self, record: SessionRecord) -> None:
        self._sessions[record.session_id] = _dump(record)

    async def delete_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        for bridge_id in [b for b, (owner, _) in self._rounds.items() if owner == session_id]:
            del self._rounds[bridge_id]

    async def put_round(self, record: PendingRound) -> None:
        self._rounds[record.bridge_id] = (record.session_id, _dump(record))

    async def get_round(self, bridge_id: str) -> PendingRound | None:
        entry = self._rounds.get(bridge_id)
        return PendingRound.from_dict(json.loads(entry[1])) if entry is not None else None

    async def delete_round(self, bridge_id: str) -> None:
        self._rounds.pop(bridge_id, None)

    async def rounds_of(self, session_id: str) -> list[PendingRound]:
        return [PendingRound.from_dict(json.loads(data)) for owner, data in self._rounds.values()
                if owner == session_id]
