"""The task model's pure transitions (modern_server.tasks): the status table, answers, cancel, wire views."""

from __future__ import annotations

import pytest

from modern_server import tasks
from modern_server.tasks import TRANSITIONS, InvalidTransition, TaskStatus
from tests import task_wire

S = TaskStatus
NOW = 1_800_000_000.0
ASK = {"method": "elicitation/create", "params": {"mode": "form", "message": "ok?", "requestedSchema": {
    "type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}}}
YES = {"action": "accept", "content": {"confirm": True}}


def fresh() -> tasks.TaskRecord:
    return tasks.new_task("t-1", "alice", "build_project", {"project": "p"}, NOW, ttl_ms=60_000, poll_ms=500)


# Every (from, to) pair, with whether the ext-tasks state diagram allows it.
ALLOWED = {(a, b) for a in (S.WORKING, S.INPUT_REQUIRED) for b in S}


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_the_transition_table_is_the_state_diagram(source, target):
    assert (target in TRANSITIONS[source]) == ((source, target) in ALLOWED)
    record = tasks.move(fresh(), source, NOW) if source is not S.WORKING else fresh()
    if (source, target) in ALLOWED:
        moved = tasks.move(record, target, NOW + 1)
        assert moved.status is target and moved.version == record.version + 1 and moved.updated == NOW + 1
    else:
        with pytest.raises(InvalidTransition):
            tasks.move(record, target, NOW + 1)


def test_a_partial_answer_keeps_the_rest_outstanding_and_unknown_keys_are_ignored():
    asked = tasks.need_input(fresh(), {"a": ASK, "b": ASK}, NOW, "two questions")
    assert asked.status is S.INPUT_REQUIRED and set(asked.input_requests) == {"a", "b"}
    partial, accepted = tasks.answer(asked, {"a": YES, "never-asked": YES}, NOW + 1)
    assert accepted == ("a",) and partial.status is S.INPUT_REQUIRED and set(partial.input_requests) == {"b"}
    again, accepted = tasks.answer(partial, {"a": {"action": "decline"}}, NOW + 2)  # already answered: ignored
    assert accepted == () and again is partial and again.responses["a"] == YES
    done, accepted = tasks.answer(partial, {"b": YES}, NOW + 3)
    assert accepted == ("b",) and done.status is S.WORKING and done.input_requests == {}
    assert done.responses == {"a": YES, "b": YES}


def test_an_answered_key_is_never_asked_again():
    asked = tasks.need_input(fresh(), {"a": ASK}, NOW, "q")
    answered, _ = tasks.answer(asked, {"a": YES}, NOW)
    assert tasks.need_input(answered, {"a": ASK}, NOW, "q") is answered  # a resumed job gets the recorded answer
    assert tasks.need_input(asked, {"a": ASK}, NOW, "q") is asked  # still outstanding: nothing changes


def test_progress_while_a_question_is_outstanding_keeps_the_task_input_required():
    asked = tasks.need_input(fresh(), {"a": ASK}, NOW, "q?")
    replayed = tasks.report(asked, NOW + 1, "step 2/4: compiling", {"step": 1})  # a resumed job replaying
    assert replayed.status is S.INPUT_REQUIRED and replayed.status_message == "q?"
    assert replayed.checkpoint == {"step": 1}
    assert tasks.report(asked, NOW + 1, "no checkpoint") is asked
    assert tasks.answer(replayed, {"a": YES}, NOW + 2)[0].status is S.WORKING


def test_cancel_is_idempotent_on_a_terminal_task_and_answers_after_it_are_ignored():
    done = tasks.complete(fresh(), {"content": []}, NOW)
    assert tasks.cancel(done, NOW + 1) is done
    cancelled = tasks.cancel(tasks.need_input(fresh(), {"a": ASK}, NOW, "q"), NOW + 1)
    assert cancelled.status is S.CANCELLED and cancelled.input_requests == {}
    assert tasks.answer(cancelled, {"a": YES}, NOW + 2) == (cancelled, ())
    with pytest.raises(InvalidTransition):
        tasks.report(cancelled, NOW + 2, "still going?")


def test_expiry_is_creation_plus_ttl():
    record = fresh()
    assert not record.expired(NOW + 59.999) and record.expired(NOW + 60)


def test_wire_views_carry_exactly_their_status_payload():
    record = fresh()
    created = tasks.created_result(record)
    task_wire.check_created(created)
    assert created["createdAt"] == "2027-01-15T08:00:00.000Z" and created["ttlMs"] == 60_000
    asked = tasks.need_input(record, {"a": ASK}, NOW, "q")
    task_wire.check_detailed({"resultType": "complete", **tasks.detailed(asked)})
    failed = tasks.fail(record, {"code": -32603, "message": "boom"}, NOW)
    view = tasks.detailed(failed)
    task_wire.check_detailed({"resultType": "complete", **view})
    assert view["error"] == {"code": -32603, "message": "boom"} and view["statusMessage"] == "failed: boom"
    completed = tasks.complete(record, {"resultType": "complete", "content": [{"type": "text", "text": "ok"}]}, NOW)
    task_wire.check_detailed({"resultType": "complete", **tasks.detailed(completed)})


def test_storage_form_round_trips():
    record = tasks.answer(tasks.need_input(fresh(), {"a": ASK, "b": ASK}, NOW, "q"), {"a": YES}, NOW)[0]
    assert tasks.loads(tasks.dumps(record)) == record
