"""The session store interface and its in-memory implementation.

Only plain records (``adapters.records``) cross this interface, serialized to dicts, so a shared store for
several gateway replicas (a later issue) can implement the same five-method protocol; sockets, streams and tasks
stay in ``runtime``.
"""

from __future__ import annotations

import copy
from typing import Protocol

from adapters.records import PendingRound, SessionRecord


class SessionStore(Protocol):
    async def get_session(self, session_id: str) -> SessionRecord | None: ...
    async def put_session(self, record: SessionRecord) -> None: ...
    async def delete_session(self, session_id: str) -> None: ...
    async def put_round(self, record: PendingRound) -> None: ...
    async def get_round(self, bridge_id: str) -> PendingRound | None: ...
    async def delete_round(self, bridge_id: str) -> None: ...
    async def rounds_of(self, session_id: str) -> list[PendingRound]: ...


class InMemoryStore:
    """Keeps serialized copies, so callers can never alias the stored state (as with a real shared store)."""

    def __init__(self) -> None:
        self._sessions: dict[str, dict] = {}
        self._rounds: dict[str, dict] = {}

    async def get_session(self, session_id: str) -> SessionRecord | None:
        data = self._sessions.get(session_id)
        return SessionRecord.from_dict(copy.deepcopy(data)) if data is not None else None

    async def put_session(self, record: SessionRecord) -> None:
        self._sessions[record.session_id] = copy.deepcopy(record.to_dict())

    async def delete_session(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        for bridge_id in [b for b, r in self._rounds.items() if r["session_id"] == session_id]:
            del self._rounds[bridge_id]

    async def put_round(self, record: PendingRound) -> None:
        self._rounds[record.bridge_id] = copy.deepcopy(record.to_dict())

    async def get_round(self, bridge_id: str) -> PendingRound | None:
        data = self._rounds.get(bridge_id)
        return PendingRound.from_dict(copy.deepcopy(data)) if data is not None else None

    async def delete_round(self, bridge_id: str) -> None:
        self._rounds.pop(bridge_id, None)

    async def rounds_of(self, session_id: str) -> list[PendingRound]:
        return [PendingRound.from_dict(copy.deepcopy(r)) for r in self._rounds.values()
                if r["session_id"] == session_id]
