"""The pure rules of a relayed 2025 request's usage record
(docs/design/eras.md#relayed-2025-requests-are-counted-in-the-usage-report): its outcome read from the answer's bytes
in whatever chunks they come (``RelayedAnswer``), and the client sealed into a relayed session's id."""

from __future__ import annotations

import json

import pytest

from adapters.reverse import RelayedSession, decode_relayed_session, relayed_client
from adapters.usage import RELAYED_BODY_READ, RelayedAnswer


def sse(*messages: object) -> bytes:
    return b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages)


ASK = {"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {"note": "result"}}
PROGRESS = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}
RESULT = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
ERROR = {"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "broke"}}
OTHER = {"jsonrpc": "2.0", "id": 8, "error": {"code": -32603, "message": "another request's"}}


@pytest.mark.parametrize(("status", "stream", "body", "outcome"), [
    (200, False, json.dumps(RESULT).encode(), ("ok", "")),
    (200, False, json.dumps(ERROR).encode(), ("error", "request error")),
    (200, True, sse(PROGRESS, ASK, RESULT), ("ok", "")),
    (200, True, sse(PROGRESS, OTHER, ERROR), ("error", "request error")),
    (200, True, sse(PROGRESS, ASK), ("cancelled", "")),  # the stream ended before its answer
    (404, False, b"", ("error", "")),
    (400, False, b"not json", ("error", "")),
    (200, False, b'{"jsonrpc": "2.0", "id": 7, "result": "' + b"x" * RELAYED_BODY_READ + b'"}', ("ok", "")),
])
@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_a_relayed_answers_outcome_whatever_its_chunks(status: int, stream: bool, body: bytes,
                                                       outcome: tuple[str, str], chunk: int) -> None:
    if chunk == 1 and len(body) > 4096:
        return  # one byte at a time through 256 KiB proves nothing more than 7 at a time
    answer = RelayedAnswer(7, status, stream)
    for at in range(0, len(body), chunk):
        answer.feed(body[at:at + chunk])
    assert answer.outcome() == outcome


def test_an_sse_event_too_large_is_skipped_not_fatal() -> None:
    answer = RelayedAnswer(7, 200, True, max_event_bytes=64)
    answer.feed(sse({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x" * 200}}))
    answer.feed(sse(ERROR))
    assert answer.outcome() == ("error", "request error")


def test_the_client_is_sealed_with_the_session_and_older_ids_still_open() -> None:
    params = {"clientInfo": {"name": "ide-plugin", "version": "3.1"}, "capabilities": {}}
    session = RelayedSession("crm", "abc", "alice", *relayed_client(params))
    assert decode_relayed_session(session.encode()) == session
    assert session.client_info() == {"name": "ide-plugin", "version": "3.1"}
    old = decode_relayed_session(json.dumps(["crm", "abc", "alice"]).encode())
    assert old == RelayedSession("crm", "abc", "alice") and old.client_info() is None
    assert relayed_client({"clientInfo": {"name": 5}}) == ("", "") and relayed_client(None) == ("", "")
    assert relayed_client({"clientInfo": {"name": "n" * 100, "version": "1"}})[0] == "n" * 64
    assert decode_relayed_session(json.dumps(["crm", "abc", "alice", "x"]).encode()) is None
    assert session.lease_key() == RelayedSession("crm", "abc", "bob").lease_key() != session.encode().decode()
