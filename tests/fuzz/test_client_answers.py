"""Family 2: the client's answers to bridged requests. The fake upstream asks for one sampling, elicitation or
roots input (``resultType: "input_required"``); the client answers the gateway-minted request with generated
responses (wrong result shapes, any ``error``, missing or wrong ids, duplicates), then with a valid answer so
the round can end. The original request must still get its JSON-RPC answer, and the session go on.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import Harness, check_message, fuzz_settings, next_message, post_json
from tests.fuzz.strategies import any_json, encode, ids, json_values, objects
from tests.gateway.conftest import text

INPUTS = {
    "sampling": {"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "pick"}}], "maxTokens": 10}},
    "elicitation": {"method": "elicitation/create", "params": {
        "mode": "form", "message": "name?", "requestedSchema": {"type": "object", "properties": {
            "n": {"type": "string"}}}}},
    "roots": {"method": "roots/list"},
}
VALID = {"sampling": {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"},
         "elicitation": {"action": "accept", "content": {"n": "x"}}, "roots": {"roots": [{"uri": "file:///r"}]}}

MINTED = object()  # stands for the id the gateway gave its request
results = (st.sampled_from(list(VALID.values())) | objects | any_json
           | st.builds(lambda v, k, x: {**v, k: x}, st.sampled_from(list(VALID.values())),
                       st.sampled_from(["role", "content", "model", "action", "roots", "_meta"]), any_json))
errors = (any_json | st.fixed_dictionaries({}, optional={"code": st.integers() | json_values,
                                                          "message": st.text(max_size=20) | json_values,
                                                          "data": any_json}))
ANSWERS = st.lists(st.fixed_dictionaries(
    {"id": st.just(MINTED) | st.just(MINTED) | ids | st.just("absent")},
    optional={"jsonrpc": st.just("2.0") | st.just("2.0") | json_values, "result": results, "error": errors}),
    min_size=1, max_size=3)


def tools_call(body: dict[str, Any], _request: Any) -> dict[str, Any]:
    if "requestState" in body["params"]:
        return text("done")
    kind = body["params"]["name"]
    return {"resultType": "input_required", "inputRequests": {kind: INPUTS[kind]}, "requestState": "s"}


def answer_body(answer: dict[str, Any], minted: Any) -> bytes:
    out = {k: (minted if v is MINTED else v) for k, v in answer.items() if not (k == "id" and v == "absent")}
    return encode(out)


async def bridged_round(harness: Harness, kind: str, answers: list[dict[str, Any]]) -> None:
    legacy = await harness.session()
    async with await legacy.post("tools/call", {"name": kind, "arguments": {}}) as resp:
        ident = legacy.next_id
        ask = await next_message(resp)
        assert ask is not None and ask.get("method") == INPUTS[kind]["method"], ask
        for answer in answers:
            await post_json(harness.client, legacy, answer_body(answer, ask["id"]))
        await legacy.answer(ask["id"], VALID[kind])  # ends the round if the fuzzed answers did not
        rest = []
        while (message := await next_message(resp)) is not None:
            rest.append(message)
    finals = [m for m in rest if "method" not in m]
    assert len(finals) == 1 and finals[0]["id"] == ident, f"the bridged request's answers: {rest!r:.500}"
    check_message(finals[0])


@fuzz_settings(0.15)
@given(kind=st.sampled_from(sorted(INPUTS)), answers=ANSWERS)
async def test_any_client_answer_ends_the_bridged_request(harness: Harness, kind: str,
                                                          answers: list[dict[str, Any]]) -> None:
    harness.upstream.script["tools/call"] = tools_call
    await harness.run(lambda: bridged_round(harness, kind, answers))
