"""summarize_repo over MRTR: the 1-2-3 flow, attacks on requestState, and untrusted model output."""

from __future__ import annotations

import json

import pytest

from tests.modern_server.conftest import ALICE, BOB


def said(text: str) -> dict:
    return {"role": "assistant", "content": {"type": "text", "text": text}, "model": "test-model",
            "stopReason": "endTurn"}


PICK = ["README.md", "src/app/core.py", "docs/architecture.md"]


async def start(client, **kw):
    reply = await client.tool("summarize_repo", {"repo": "demo"}, ident=1, **kw)
    assert reply.result["resultType"] == "input_required"
    return reply.result


async def test_three_independent_requests(client):
    first = await start(client)
    ask = first["inputRequests"]["pick_files"]
    assert ask["method"] == "sampling/createMessage"
    assert ask["params"]["includeContext"] == "none" and ask["params"]["maxTokens"] <= 200
    assert ask["params"]["modelPreferences"]["hints"]
    assert "README.md" in ask["params"]["messages"][0]["content"]["text"]
    second = await client.tool("summarize_repo", {"repo": "demo"}, ident=2, requestState=first["requestState"],
                               inputResponses={"pick_files": said(json.dumps(PICK))})
    assert second.result["resultType"] == "input_required"
    assert set(second.result["inputRequests"]) == {"summary"}
    third = await client.tool("summarize_repo", {"repo": "demo"}, ident=3, requestState=second.result["requestState"],
                              inputResponses={"summary": said("A small app.")})
    assert third.final["id"] == 3
    assert third.result["resultType"] == "complete"
    assert third.result["structuredContent"] == {"files": PICK, "summary": "A small app."}


async def test_without_sampling_is_32021(client):
    reply = await client.tool("summarize_repo", caps={"elicitation": {}})
    assert reply.status == 400
    assert reply.error["code"] == -32021 and reply.error["data"] == {"requiredCapabilities": {"sampling": {}}}


async def test_missing_answer_asks_again(client):
    first = await start(client)
    again = await client.tool("summarize_repo", {"repo": "demo"}, requestState=first["requestState"])
    assert set(again.result["inputRequests"]) == {"pick_files"}


async def test_changed_arguments_cannot_reuse_the_state(client):
    first = await start(client)
    reply = await client.tool("summarize_repo", {"repo": "other"}, requestState=first["requestState"],
                              inputResponses={"pick_files": said(json.dumps(PICK))})
    assert reply.status == 400 and reply.error["code"] == -32602 and "arguments" in reply.error["message"]


async def test_tampered_state(client):
    state = (await start(client))["requestState"]
    kid, payload, mac = state.split(".")
    forged = f"{kid}.{payload[:-1]}{'A' if payload[-1] != 'A' else 'B'}.{mac}"
    reply = await client.tool("summarize_repo", {"repo": "demo"}, requestState=forged,
                              inputResponses={"pick_files": said(json.dumps(PICK))})
    assert reply.status == 400 and reply.error["code"] == -32602


async def test_expired_one_second_past_the_deadline(client, clock, config):
    state = (await start(client))["requestState"]
    clock.now += config.state_ttl_seconds + 1
    reply = await client.tool("summarize_repo", {"repo": "demo"}, requestState=state,
                              inputResponses={"pick_files": said(json.dumps(PICK))})
    assert reply.status == 400 and reply.error["code"] == -32602 and "expired" in reply.error["message"]


async def test_cross_principal_state(client):
    state = (await start(client, token=ALICE))["requestState"]
    reply = await client.tool("summarize_repo", {"repo": "demo"}, token=BOB, requestState=state,
                              inputResponses={"pick_files": said(json.dumps(PICK))})
    assert reply.status == 400 and reply.error["code"] == -32602 and "principal" in reply.error["message"]


async def test_cross_method_state(client):
    state = (await start(client))["requestState"]
    reply = await client.call("prompts/get", {"name": "draft_note", "arguments": {"topic": "x"}, "requestState": state})
    assert reply.status == 400 and reply.error["code"] == -32602


@pytest.mark.parametrize("answer, why", [
    (said("README.md, src/app/core.py"), "valid JSON"),
    (said(json.dumps(["README.md", "src/app/core.py", "/etc/passwd"])), "outside the candidate set"),
    (said(json.dumps(["README.md", "README.md", "src/app/core.py"])), "distinct"),
    (said(json.dumps(PICK) + " " * 5000), "exceeds"),
    ({"role": "assistant", "content": {"type": "text"}, "model": "m"}, "CreateMessageResult"),
    ("just a string", "CreateMessageResult"),
])
async def test_model_output_is_validated(client, answer, why):
    first = await start(client)
    reply = await client.tool("summarize_repo", {"repo": "demo"}, requestState=first["requestState"],
                              inputResponses={"pick_files": answer})
    assert reply.status == 400 and reply.error["code"] == -32602
    assert why in reply.error["message"]


async def test_round_limit(client):
    state = (await start(client))["requestState"]
    for _ in range(20):
        reply = await client.tool("summarize_repo", {"repo": "demo"}, requestState=state)
        if "error" in reply.final:
            break
        state = reply.result["requestState"]
    assert reply.error["code"] == -32602 and "round limit" in reply.error["message"]
