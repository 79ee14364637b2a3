"""Every distinct failure the fuzz families found, as a plain test reproducing it exactly (same property, same
harness): each fails until the gateway is fixed, then guards the fix."""

from __future__ import annotations

from typing import Any

from tests.fuzz.conftest import Harness, check_answer
from tests.fuzz.strategies import encode
from tests.fuzz.test_client_answers import bridged_round, tools_call
from tests.fuzz.test_legacy_post import raw_request, send


async def posted(harness: Harness, body: bytes, ident: Any = 7, **headers: Any) -> None:
    """POST ``body`` on the main session (headers as given override the valid ones); the property on the answer."""
    legacy = await harness.session()
    merged = {**legacy.headers(), **headers}
    status, content_type, answer = await send(harness, "POST", merged, body)
    check_answer(status, content_type, answer, {"id": ident})


async def test_non_utf8_authorization_is_refused_not_a_500(harness: Harness) -> None:
    async def case() -> None:  # was: HTTP 500 (classify.principal_of encodes the surrogate-escaped header)
        legacy = await harness.session()
        status, content_type, body = await raw_request(harness, "POST",
                                                       {**legacy.headers(), "Authorization": b"Bearer \xff"},
                                                       b'{"jsonrpc":"2.0","id":7,"method":"ping"}')
        check_answer(status, content_type, body, {"id": 7})
    await harness.run(case)


async def test_a_huge_last_event_id_is_refused_not_a_500(harness: Harness) -> None:
    async def case() -> None:  # was: HTTP 500 (int() of a 5000-digit sequence number)
        legacy = await harness.session()
        status, content_type, body = await send(harness, "GET", {**legacy.headers(), "Accept": "text/event-stream",
                                                                 "Last-Event-ID": "a." + "9" * 5000}, b"")
        check_answer(status, content_type, body, None, "GET")
    await harness.run(case)


async def test_cancelled_with_an_array_request_id_is_not_a_500(harness: Harness) -> None:
    body = encode({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1]}})
    await harness.run(lambda: posted(harness, body))


async def test_sampling_answered_with_a_string_error_ends_the_request(harness: Harness) -> None:
    harness.upstream.script["tools/call"] = tools_call  # was: "exchange for request failed" AttributeError
    await harness.run(lambda: bridged_round(harness, "sampling", [{"jsonrpc": "2.0", "id": _MINTED, "error": "no"}]))


async def test_elicitation_answered_with_a_list_error_ends_the_request(harness: Harness) -> None:
    harness.upstream.script["tools/call"] = tools_call  # was: "exchange for request failed" AttributeError
    await harness.run(lambda: bridged_round(harness, "elicitation", [{"jsonrpc": "2.0", "id": _MINTED,
                                                                      "error": [None]}]))


# Rejections decided after the body was read leave out the request's id (2025-11-25 basic §Responses: a
# response carries the id of the request it answers).
async def test_a_wrong_jsonrpc_version_is_refused_with_the_request_id(harness: Harness) -> None:
    await harness.run(lambda: posted(harness, b'{"jsonrpc":"1.0","id":7,"method":"ping"}'))


async def test_a_message_with_neither_method_nor_result_is_refused_with_its_id(harness: Harness) -> None:
    await harness.run(lambda: posted(harness, b'{"jsonrpc":"2.0","id":7}'))


async def test_an_unknown_session_is_refused_with_the_request_id(harness: Harness) -> None:
    body = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'
    await harness.run(lambda: posted(harness, body, **{"Mcp-Session-Id": "nope"}))


async def test_a_missing_session_is_refused_with_the_request_id(harness: Harness) -> None:
    async def case() -> None:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        status, content_type, body = await send(harness, "POST", headers, b'{"jsonrpc":"2.0","id":7,"method":"ping"}')
        check_answer(status, content_type, body, {"id": 7})
    await harness.run(case)


async def test_a_wrong_protocol_version_header_is_refused_with_the_request_id(harness: Harness) -> None:
    body = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'
    await harness.run(lambda: posted(harness, body, **{"MCP-Protocol-Version": "2025-06-18"}))


from tests.fuzz.test_client_answers import MINTED as _MINTED  # noqa: E402  (the gateway-minted id marker)
