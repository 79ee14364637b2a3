"""The pure rules of a relayed 2025 request's usage record
(docs/design/eras.md#relayed-2025-requests-are-counted-in-the-usage-report): its outcome read from the answer's bytes
in whatever chunks they come (``RelayedAnswer``), and the client sealed into a relayed session's id."""

from __future__ import annotations

import json

import pytest

from adapters import usage
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


SAMPLE = {"jsonrpc": "2.0", "id": "s2", "method": "sampling/createMessage",
          "params": {"messages": [], "maxTokens": 9, "includeContext": "thisServer"}}
FORM = {"jsonrpc": "2.0", "id": 3, "method": "elicitation/create",
        "params": {"message": "sure?", "requestedSchema": {}}}
URL = {"jsonrpc": "2.0", "id": 4, "method": "elicitation/create",
       "params": {"mode": "url", "url": "https://example.com/x", "elicitationId": "e1", "message": "open it"}}
ROOTS = {"jsonrpc": "2.0", "id": 5, "method": "roots/list"}
ESCAPED = b'event: message\ndata: {"jsonrpc": "2.0", "id": 6, "method": "roots\\/list"}\n\n'  # "/" escaped
# Not requests with an input kind: a notification naming one, a ping, a result quoting one's method.
NOT_ASKED = [{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
             {"jsonrpc": "2.0", "id": 9, "method": "ping"},
             {"jsonrpc": "2.0", "id": 10, "result": {"text": '"method": "sampling/createMessage"'}}]


@pytest.mark.parametrize(("body", "inputs", "features", "outcome"), [
    (sse(ASK, RESULT), ("sampling",), ("sampling",), ("ok", "")),
    (sse(SAMPLE, FORM, URL, ROOTS, SAMPLE, RESULT), ("sampling", "elicitation.form", "elicitation.url", "roots"),
     ("sampling", "roots", "elicitation url ids", "includeContext"), ("ok", "")),
    (sse(FORM), ("elicitation.form",), (), ("cancelled", "")),  # the stream ended while the client was asked
    (ESCAPED + sse(ERROR), ("roots",), ("roots",), ("error", "request error")),
    (sse(*NOT_ASKED, RESULT), (), (), ("ok", "")),
    (sse(RESULT, ROOTS), (), (), ("ok", "")),  # after the answer nothing more is read
])
@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_the_kinds_of_the_servers_requests_on_a_relayed_stream(body: bytes, inputs: tuple[str, ...],
                                                               features: tuple[str, ...], outcome: tuple[str, str],
                                                               chunk: int) -> None:
    """docs/design/eras.md#relayed-2025-requests-are-counted-in-the-usage-report: the server's requests with an
    input kind (sampling, form or URL elicitation, roots) on the answer's stream are noted by kind, in the kind
    vocabulary and order of the bridged records, with the features they lean on; nothing else of them is kept."""
    answer = RelayedAnswer(7, 200, True)
    for at in range(0, len(body), chunk):
        answer.feed(body[at:at + chunk])
    assert (answer.inputs(), answer.features(), answer.outcome()) == (inputs, features, outcome)
    assert {*answer.kinds, *answer.leaned} <= {*usage.INPUT_KINDS, *usage.FEATURES}  # labels, never content


def test_an_event_that_names_no_input_method_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cheap pre-check: of a stream of progress and log notifications (no result, no error, no method with
    an input kind) nothing is parsed."""
    parsed: list[str] = []
    monkeypatch.setattr(usage, "loads", lambda data: parsed.append(data) or {})
    answer = RelayedAnswer(7, 200, True)
    log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
    answer.feed(sse(PROGRESS, log, PROGRESS))
    assert parsed == [] and answer.inputs() == ()
    answer.feed(sse(ROOTS))
    assert len(parsed) == 1


def test_a_json_answer_has_no_input_kinds() -> None:
    answer = RelayedAnswer(7, 200, False)
    answer.feed(json.dumps(RESULT).encode())
    assert (answer.inputs(), answer.features(), answer.outcome()) == ((), (), ("ok", ""))


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
