"""Scenario files, the pure half: parsing (errors name the step and the key), answers in order, judging."""

from __future__ import annotations

import json

import pytest

from kit.check import InputKind
from kit.scenario import Answers, ScenarioError, StepObservation, Target, judge_step, parse


def one(**step: object) -> dict[str, object]:
    return {"step": [step]}


def test_a_step_parses_with_its_answers_and_expectations() -> None:
    scenario = parse(one(call="summarize_repo", sampling=[{"json": ["a", "b"]}, "done"], expect_rounds=3,
                         expect_inputs=["sampling"]), "f.toml")
    step = scenario.steps[0]
    assert step.target is Target.CALL and step.request() == ("tools/call", {"name": "summarize_repo",
                                                                             "arguments": {}})
    first, later = (step.answers.result(InputKind.SAMPLING, i) for i in (0, 5))
    assert first and json.loads(first["content"]["text"]) == ["a", "b"]
    assert later and later["content"]["text"] == "done"  # the last answer repeats
    assert step.expect.rounds == 3 and step.expect.inputs == ("sampling",)


def test_roots_and_a_resource_step() -> None:
    step = parse(one(resource="file:///x", roots=["file:///a"]), "f").steps[0]
    assert step.request() == ("resources/read", {"uri": "file:///x"})
    assert step.answers.result(InputKind.ROOTS, 0) == {"roots": [{"uri": "file:///a"}]}
    assert Answers().result(InputKind.ELICITATION_FORM, 0) is None


@pytest.mark.parametrize("document, message", [
    ({"steps": []}, "unknown key(s) ['steps']"),
    ({"step": []}, "no [[step]] tables"),
    (one(arguments={}), "step 1: give exactly one of call, prompt or resource"),
    (one(call="a", prompt="b"), "step 1: give exactly one"),
    (one(call="echo", expect_txt="x"), "step 1 (call echo): unknown key(s) ['expect_txt']"),
    (one(call="echo", expect_rounds=0), "step 1 (call echo): expect_rounds: expected a positive integer"),
    (one(call="echo", expect_error="x"), "step 1 (call echo): expect_error"),
    (one(call="echo", expect_inputs=["smapling"]), "step 1 (call echo): expect_inputs"),
    (one(call="echo", sampling=[5]), "step 1 (call echo): sampling: expected text"),
    (one(call="echo", elicitation={"action": "yes"}), "step 1 (call echo): elicitation: expected a table"),
    (one(call="echo", roots="file:///a"), "step 1 (call echo): roots"),
    (one(resource="file:///a", arguments={"x": 1}), "arguments"),
])
def test_a_bad_file_names_the_step_and_key(document: dict[str, object], message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse(document, "f.toml")
    assert message in str(caught.value)


def test_judging() -> None:
    step = parse(one(call="t", expect_text="Paris", expect_inputs=["elicitation"], expect_rounds=2), "f").steps[0]
    good = StepObservation((InputKind.ELICITATION_FORM,), 2, {"content": [{"type": "text", "text": "Paris!"}]})
    assert judge_step(step, good).passed
    bad = StepObservation((InputKind.SAMPLING,), 1, {"content": [{"type": "text", "text": "Rome"}]})
    failures = judge_step(step, bad).failures
    assert len(failures) == 3 and "'Paris'" in failures[0] and "['sampling']" in failures[1]
    errored = judge_step(step, StepObservation(error={"code": -32602, "message": "no"}))
    assert errored.failures[0].startswith("expected a result, got error -32602")


def test_an_expected_error() -> None:
    step = parse(one(call="t", expect_error=-32602), "f").steps[0]
    assert judge_step(step, StepObservation(error={"code": -32602})).passed
    assert not judge_step(step, StepObservation(result={"content": []})).passed
    assert judge_step(step, StepObservation(timed_out=True)).failures == ("no answer in time",)
