"""notes_delete: containment, the confirmation round, accept / decline / cancel, and replay."""

from __future__ import annotations

import pytest

WS = "file:///work/notes"
CHOICE = "delete_choice"


def accept(note_id: str, confirm: bool = True) -> dict:
    return {"action": "accept", "content": {"note_id": note_id, "confirm": confirm}}


async def ask(client, title="Standup", workspace=WS, **kw):
    reply = await client.tool("notes_delete", {"workspaceUri": workspace, "title": title}, **kw)
    assert reply.result["resultType"] == "input_required", reply.final
    return reply.result


async def retry(client, state, answer, title="Standup", workspace=WS, **kw):
    return await client.tool("notes_delete", {"workspaceUri": workspace, "title": title}, requestState=state,
                             inputResponses={CHOICE: answer} if answer is not None else {}, **kw)


def note_ids(core):
    return {n.id for n in core.services.store.notes()}


async def test_form_offers_only_contained_candidates(client):
    first = await ask(client)
    request = first["inputRequests"][CHOICE]
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "form"
    schema = request["params"]["requestedSchema"]
    assert schema["properties"]["note_id"]["enum"] == ["n-1001", "n-1002"]  # not n-1005 in notes-evil
    assert schema["properties"]["confirm"]["type"] == "boolean"
    assert all(not isinstance(v, dict) or "properties" not in v for v in schema["properties"].values())  # flat


@pytest.mark.parametrize("workspace", ["file:///work/notes-evil", "file:///work/notes/%2e%2e",
                                       "file:///work/notes/%2e%2e/private.md", "file:///work", "http://x/work/notes"])
async def test_workspace_outside_the_allow_list(client, workspace):
    reply = await client.tool("notes_delete", {"workspaceUri": workspace, "title": "Standup"})
    assert reply.status == 400 and reply.error["code"] == -32602


async def test_accept_deletes_exactly_the_chosen_note(client, core):
    first = await ask(client)
    reply = await retry(client, first["requestState"], accept("n-1002"))
    assert reply.result["structuredContent"] == {"deleted": "n-1002"}
    assert "n-1002" not in note_ids(core) and "n-1001" in note_ids(core)
    again = await retry(client, first["requestState"], accept("n-1001"))
    assert again.error["code"] == -32602 and "already used" in again.error["message"]
    assert "n-1001" in note_ids(core)


async def test_decline_leaves_the_note_and_consumes_the_state(client, core):
    first = await ask(client)
    reply = await retry(client, first["requestState"], {"action": "decline"})
    assert reply.result["structuredContent"] == {"deleted": None}
    assert {"n-1001", "n-1002"} <= note_ids(core)
    replay = await retry(client, first["requestState"], accept("n-1001"))
    assert replay.error["code"] == -32602 and {"n-1001", "n-1002"} <= note_ids(core)


async def test_cancel_mutates_nothing_and_stays_retryable(client, core):
    first = await ask(client)
    reply = await retry(client, first["requestState"], {"action": "cancel"})
    assert reply.result["structuredContent"] == {"deleted": None} and "n-1001" in note_ids(core)
    later = await retry(client, first["requestState"], accept("n-1001"))
    assert later.result["structuredContent"] == {"deleted": "n-1001"}


@pytest.mark.parametrize("answer", [{"action": "accept"}, accept("n-1001", confirm=False),
                                    {"action": "accept", "content": {"note_id": "n-1001"}}])
async def test_missing_content_or_confirm_is_never_consent(client, core, answer):
    first = await ask(client)
    reply = await retry(client, first["requestState"], answer)
    assert reply.error["code"] == -32602 and "n-1001" in note_ids(core)


async def test_choice_outside_the_signed_set(client, core):
    first = await ask(client)
    for outsider in ("n-1005", "n-1003"):
        reply = await retry(client, first["requestState"], accept(outsider))
        assert reply.error["code"] == -32602 and outsider in note_ids(core)


async def test_changed_title_cannot_reuse_the_state(client, core):
    first = await ask(client)
    reply = await retry(client, first["requestState"], accept("n-1003"), title="Roadmap")
    assert reply.error["code"] == -32602 and "n-1003" in note_ids(core)


async def test_missing_answer_asks_again_with_the_same_nonce(client, core):
    first = await ask(client)
    again = await retry(client, first["requestState"], None)
    assert CHOICE in again.result["inputRequests"]
    done = await retry(client, again.result["requestState"], accept("n-1001"))
    assert done.result["structuredContent"] == {"deleted": "n-1001"}
    replay = await retry(client, first["requestState"], accept("n-1002"))
    assert replay.error["code"] == -32602 and "n-1002" in note_ids(core)


@pytest.mark.parametrize("caps, ok", [({"elicitation": {}}, True), ({"elicitation": {"form": {}}}, True),
                                      ({"elicitation": {"url": {}}}, False), ({}, False)])
async def test_form_capability(client, caps, ok):
    reply = await client.tool("notes_delete", {"workspaceUri": WS, "title": "Standup"}, caps=caps)
    if ok:
        assert reply.result["resultType"] == "input_required"
    else:
        assert reply.status == 400 and reply.error == {
            "code": -32021, "message": reply.error["message"],
            "data": {"requiredCapabilities": {"elicitation": {"form": {}}}}}


async def test_bob_cannot_delete_outside_his_workspace(client, core):
    reply = await client.tool("notes_delete", {"workspaceUri": WS, "title": "Standup"}, token="bob-token")
    assert reply.error["code"] == -32602 and "allow-list" in reply.error["message"]


async def test_the_same_confirmed_step_resent_gets_its_recorded_result(client, core):
    """A gateway that lost the answer sends the round again byte for byte: it learns the note was deleted, and
    nothing is deleted twice."""
    first = await ask(client)
    done = await retry(client, first["requestState"], accept("n-1002"))
    assert done.result["structuredContent"] == {"deleted": "n-1002"}
    resent = await retry(client, first["requestState"], accept("n-1002"))
    assert resent.result == done.result
    assert "n-1002" not in note_ids(core) and "n-1001" in note_ids(core)


async def test_a_resent_decline_gets_its_recorded_result(client, core):
    first = await ask(client)
    declined = await retry(client, first["requestState"], {"action": "decline"})
    resent = await retry(client, first["requestState"], {"action": "decline"})
    assert resent.result == declined.result and {"n-1001", "n-1002"} <= note_ids(core)


async def test_a_step_resent_through_another_state_of_its_nonce_is_a_replay(client, core):
    first = await ask(client)
    again = await retry(client, first["requestState"], None)  # the same nonce, a new state
    assert (await retry(client, again.result["requestState"], accept("n-1001"))).result
    replay = await retry(client, first["requestState"], accept("n-1001"))
    assert replay.error["code"] == -32602 and "already used" in replay.error["message"]


async def test_recorded_results_expire_with_their_state(tmp_path, clock):
    from modern_server.storage import Reply, Store
    store = Store(str(tmp_path / "s.sqlite3"))
    store.consume_nonce("n1", "declined", Reply("a", {"ok": 1}, clock.now + 10), clock.now)
    assert store.reply("n1", "a", clock.now) == {"ok": 1} and store.reply("n1", "b", clock.now) is None
    assert store.reply("n1", "a", clock.now + 10) is None
    store.consume_nonce("n2", "declined", Reply("a", {"ok": 2}, clock.now + 30), clock.now + 20)
    assert store._db.execute("SELECT nonce FROM replies").fetchall() == [("n2",)]  # n1's expired row is gone


async def test_recorded_results_are_bounded(tmp_path, clock):
    from modern_server.storage import Reply, Store
    store = Store(str(tmp_path / "s.sqlite3"), max_replies=2)
    for i, expires in enumerate((50, 10, 30)):
        store.consume_nonce(f"n{i}", "declined", Reply("a", {"i": i}, clock.now + expires), clock.now)
    assert store.reply("n1", "a", clock.now) is None  # the soonest to expire made room
    assert store.reply("n0", "a", clock.now) == {"i": 0} and store.reply("n2", "a", clock.now) == {"i": 2}
