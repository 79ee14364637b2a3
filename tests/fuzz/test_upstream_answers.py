"""Family 3: the upstream's answers. The fake upstream answers a legacy request's first upstream call with a
generated HTTP answer (any status and content type; a JSON result, error or notification with right or wrong
ids; ``input_required`` with malformed inputRequests/requestState; an SSE stream of generated events; non-JSON)
and any later call of the same request validly. The legacy client answers whatever the gateway asks it.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import Harness, check_answer, fuzz_settings, next_message, valid_id
from tests.fuzz.strategies import any_json, encode, ids, objects
from tests.fuzz.test_client_answers import INPUTS
from tests.fuzz.test_client_answers import VALID as CLIENT_ANSWERS
from tests.gateway.conftest import text

CALLS = {"tools/call": {"name": "t", "arguments": {}}, "tools/list": {}, "prompts/get": {"name": "p"},
         "resources/read": {"uri": "file:///a"}, "completion/complete": {
             "ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a", "value": "b"}}}
VALID = {"tools/call": text("done"), "tools/list": {"tools": []}, "prompts/get": {"messages": []},
         "resources/read": {"contents": []}, "completion/complete": {"completion": {"values": []}}}
SAME_ID = object()  # stands for the id of the upstream request being answered

input_requests = st.dictionaries(st.text(max_size=6), st.sampled_from(list(INPUTS.values())) | objects | any_json,
                                 max_size=3) | any_json
results = (objects | any_json | st.sampled_from(list(VALID.values()))
           | st.fixed_dictionaries({"resultType": st.just("input_required") | any_json}, optional={
               "inputRequests": input_requests, "requestState": st.text(max_size=8) | any_json}))
messages = st.fixed_dictionaries({"jsonrpc": st.just("2.0") | any_json}, optional={
    "id": st.just(SAME_ID) | st.just(SAME_ID) | ids, "result": results, "error": objects | any_json,
    "method": st.sampled_from(["notifications/progress", "notifications/message"]) | st.text(max_size=10),
    "params": objects | any_json})
sse_events = st.lists(messages.map(lambda m: ("json", m)) | st.binary(max_size=20).map(lambda b: ("raw", b)),
                      max_size=4)
ANSWERS = st.fixed_dictionaries({
    "status": st.sampled_from([200] * 5 + [202, 204, 400, 401, 403, 404, 500, 503, 302]),
    "content_type": st.sampled_from(["application/json"] * 3 + ["text/event-stream"] * 2 + ["text/plain", ""]),
    "body": messages.map(lambda m: ("json", m)) | sse_events.map(lambda e: ("sse", e))
    | st.binary(max_size=40).map(lambda b: ("raw", b)),
})


def render(answer: dict[str, Any], ident: Any) -> web.Response:
    """The generated answer as an HTTP response to the upstream request ``ident``."""
    def one(message: dict[str, Any]) -> bytes:
        return encode({k: (ident if v is SAME_ID else v) for k, v in message.items()})
    kind, value = answer["body"]
    if kind == "json":
        body = one(value)
    elif kind == "sse":
        body = b"".join(b"data: " + (one(v) if k == "json" else v) + b"\n\n" for k, v in value)
    else:
        body = value
    headers = {"Content-Type": answer["content_type"]} if answer["content_type"] else {}
    return web.Response(status=answer["status"], body=body, headers=headers)


def scripted(answer: dict[str, Any], method: str) -> Any:
    calls: list[Any] = []

    def handle(body: dict[str, Any], _request: Any) -> Any:
        calls.append(body)
        return render(answer, body["id"]) if len(calls) == 1 else VALID[method]
    return handle


async def one_call(harness: Harness, method: str, answer: dict[str, Any]) -> None:
    legacy = await harness.session()
    harness.upstream.script[method] = scripted(answer, method)
    async with await legacy.post(method, CALLS[method]) as resp:
        ident = legacy.next_id
        if resp.content_type != "text/event-stream":
            check_answer(resp.status, resp.content_type, await resp.read(), {"id": ident})
            return
        assert resp.status == 200, resp.status
        final = None
        while (message := await next_message(resp)) is not None:
            if "method" in message and valid_id(message.get("id")):  # the gateway asks the client: answer it
                kind = next(k for k, v in INPUTS.items() if v["method"] == message["method"])
                await legacy.answer(message["id"], CLIENT_ANSWERS[kind])
            elif "method" not in message:
                final = message
    assert final is not None and final["id"] == ident, f"the request's answer: {final!r:.300}"


@fuzz_settings(0.15)
@given(method=st.sampled_from(sorted(CALLS)), answer=ANSWERS)
async def test_any_upstream_answer_gives_the_client_a_json_rpc_answer(harness: Harness, method: str,
                                                                      answer: dict[str, Any]) -> None:
    await harness.run(lambda: one_call(harness, method, answer))
