"""``python -m gateway replay``, the pure half: scenario files and the judging of what their steps saw.

Owns the scenario model (:class:`Scenario` of :class:`Step`\\ s, each with its request, its canned
:class:`Answers` and its :class:`Expect`\\ ations), parsing a loaded TOML document into it with errors that name
the step and the key (:class:`ScenarioError`), the answer a step gives to the n-th live request of a kind, the
judging of one step's :class:`StepObservation` into a :class:`StepReport`, and the renderings. The shell
(``gateway.ops.replay``) reads the file, drives the legacy client and feeds observations in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from adapters.client_answers import roots_result, sampling_result
from kit.check import InputKind, Observation, Status, ToolReport

_ACTIONS = ("accept", "decline", "cancel")
_INPUT_NAMES = ("sampling", "elicitation", "elicitation.form", "elicitation.url", "roots")
_STEP_KEYS = {"call", "prompt", "resource", "arguments", "sampling", "elicitation", "roots", "expect_text",
              "expect_error", "expect_inputs", "expect_rounds"}


class ScenarioError(ValueError):
    """A scenario file that cannot be replayed; the message names the step and the key."""


class Target(Enum):
    """What a step asks for, and the 2025-11-25 method that asks it."""

    CALL = "tools/call"
    PROMPT = "prompts/get"
    RESOURCE = "resources/read"


_TARGET_KEYS = {"call": Target.CALL, "prompt": Target.PROMPT, "resource": Target.RESOURCE}


@dataclass(frozen=True, slots=True)
class Answers:
    """The step's canned answers, in order per kind; the last one answers any further request of its kind."""

    sampling: tuple[Mapping[str, Any], ...] = ()
    elicitation: tuple[Mapping[str, Any], ...] = ()
    roots: tuple[str, ...] | None = None

    def result(self, kind: InputKind, index: int) -> dict[str, Any] | None:
        """The result for the ``index``-th (from 0) live request of ``kind``; None when the step has none."""
        if kind is InputKind.ROOTS:
            return None if self.roots is None else roots_result(self.roots)
        given = self.sampling if kind is InputKind.SAMPLING else self.elicitation
        return dict(given[min(index, len(given) - 1)]) if given else None


@dataclass(frozen=True, slots=True)
class Expect:
    text: str | None = None  # a substring of the result's text
    error: int | None = None  # the JSON-RPC error code; unset, any error fails the step
    inputs: tuple[str, ...] | None = None  # exactly these input kinds were asked for
    rounds: int | None = None  # upstream requests (MRTR rounds)


@dataclass(frozen=True, slots=True)
class Step:
    number: int  # from 1, as a person counts [[step]] tables
    target: Target
    name: str  # the tool or prompt name, or the resource URI
    arguments: Mapping[str, Any]
    answers: Answers
    expect: Expect

    @property
    def label(self) -> str:
        return f"step {self.number} ({self.target.name.lower()} {self.name})"

    def request(self) -> tuple[str, dict[str, Any]]:
        if self.target is Target.RESOURCE:
            return self.target.value, {"uri": self.name}
        return self.target.value, {"name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True, slots=True)
class Scenario:
    source: str
    steps: tuple[Step, ...]


# --- parsing ------------------------------------------------------------------------------------------------
def parse(document: Mapping[str, Any], source: str) -> Scenario:
    """A loaded TOML document -> its scenario: ``[[step]]`` tables (and an optional ``description``)."""
    unknown = set(document) - {"step", "description"}
    if unknown:
        raise ScenarioError(f"{source}: unknown key(s) {sorted(unknown)}: a scenario has [[step]] tables")
    raw = document.get("step")
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(f"{source}: no [[step]] tables")
    return Scenario(source, tuple(_step(i, table) for i, table in enumerate(raw, 1)))


def _step(number: int, raw: Any) -> Step:
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"step {number}: expected a table")
    targets = [key for key in _TARGET_KEYS if key in raw]
    if len(targets) != 1:
        raise ScenarioError(f"step {number}: give exactly one of call, prompt or resource (got {targets or 'none'})")
    name = raw[targets[0]]
    where = f"step {number} ({targets[0]} {name})"
    if not isinstance(name, str) or not name:
        raise ScenarioError(f"step {number}: {targets[0]}: expected a non-empty string")
    if unknown := sorted(set(raw) - _STEP_KEYS):
        raise ScenarioError(f"{where}: unknown key(s) {unknown}")
    arguments = raw.get("arguments", {})
    if not isinstance(arguments, Mapping) or (targets[0] == "resource" and arguments):
        raise ScenarioError(f"{where}: arguments: expected a table (and none for a resource)")
    return Step(number, _TARGET_KEYS[targets[0]], name, dict(arguments), _answers(where, raw), _expect(where, raw))


def _answers(where: str, raw: Mapping[str, Any]) -> Answers:
    sampling = tuple(_sampling(f"{where}: sampling", a) for a in _in_order(raw.get("sampling")))
    elicitation = tuple(_elicitation(f"{where}: elicitation", a) for a in _in_order(raw.get("elicitation")))
    roots = raw.get("roots")
    if roots is not None and not (isinstance(roots, list) and all(isinstance(r, str) for r in roots)):
        raise ScenarioError(f"{where}: roots: expected an array of URI strings")
    return Answers(sampling, elicitation, None if roots is None else tuple(roots))


def _in_order(value: Any) -> list[Any]:
    """One answer, or an array of answers given in order (an array of one answer each)."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _sampling(where: str, answer: Any) -> Mapping[str, Any]:
    """A string is the model's text; ``{json = value}`` sends the value as JSON text (a model asked for a JSON
    array of paths); ``{text = "..."}`` is the text; a table with ``content`` is the full result."""
    if isinstance(answer, str):
        return sampling_result(answer)
    if isinstance(answer, Mapping) and set(answer) == {"json"}:
        return sampling_result(json.dumps(answer["json"]))
    if isinstance(answer, Mapping) and set(answer) == {"text"} and isinstance(answer["text"], str):
        return sampling_result(answer["text"])
    if isinstance(answer, Mapping) and "content" in answer:
        return sampling_result(answer)
    raise ScenarioError(f"{where}: expected text, {{json = ...}}, {{text = ...}} or a result with content")


def _elicitation(where: str, answer: Any) -> Mapping[str, Any]:
    if not isinstance(answer, Mapping) or answer.get("action") not in _ACTIONS:
        raise ScenarioError(f"{where}: expected a table with action = one of {list(_ACTIONS)}")
    if "content" in answer and not isinstance(answer["content"], Mapping):
        raise ScenarioError(f"{where}: content: expected a table")
    return dict(answer)


def _expect(where: str, raw: Mapping[str, Any]) -> Expect:
    text, error, inputs, rounds = (raw.get(k) for k in ("expect_text", "expect_error", "expect_inputs",
                                                           "expect_rounds"))
    if text is not None and not isinstance(text, str):
        raise ScenarioError(f"{where}: expect_text: expected a string")
    if error is not None and (isinstance(error, bool) or not isinstance(error, int)):
        raise ScenarioError(f"{where}: expect_error: expected an integer JSON-RPC error code")
    if inputs is not None and not (isinstance(inputs, list) and all(i in _INPUT_NAMES for i in inputs)):
        raise ScenarioError(f"{where}: expect_inputs: expected an array of {list(_INPUT_NAMES)}")
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
        raise ScenarioError(f"{where}: expect_rounds: expected a positive integer")
    return Expect(text, error, None if inputs is None else tuple(inputs), rounds)


# --- judging ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepObservation:
    """What the legacy client saw for one step: a result, an error, or no answer in time."""

    inputs: tuple[InputKind, ...] = ()
    rounds: int = 0
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class StepReport:
    label: str
    failures: tuple[str, ...]
    inputs: tuple[InputKind, ...]
    rounds: int

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {"step": self.label, "passed": self.passed, "failures": list(self.failures),
                "inputs": [k.value for k in self.inputs], "rounds": self.rounds}


def judge_step(step: Step, obs: StepObservation) -> StepReport:
    failures = [*_outcome_failures(step.expect, obs), *_input_failures(step.expect, obs)]
    if step.expect.rounds is not None and obs.rounds != step.expect.rounds:
        failures.append(f"expected {step.expect.rounds} round(s), saw {obs.rounds}")
    return StepReport(step.label, tuple(failures), obs.inputs, obs.rounds)


def _outcome_failures(expect: Expect, obs: StepObservation) -> list[str]:
    if obs.timed_out:
        return ["no answer in time"]
    if obs.error is not None:
        code = obs.error.get("code")
        if expect.error is None or code != expect.error:
            wanted = f"error {expect.error}" if expect.error is not None else "a result"
            return [f"expected {wanted}, got error {code}: {obs.error.get('message', '')}"]
        return []
    if expect.error is not None:
        return [f"expected error {expect.error}, got a result"]
    said = "\n".join(result_texts(obs.result or {}))
    if expect.text is not None and expect.text not in said:
        return [f"expected text containing {expect.text!r}, got {said[:200]!r}"]
    return []


def _input_failures(expect: Expect, obs: StepObservation) -> list[str]:
    if expect.inputs is None:
        return []
    seen = [k.value for k in obs.inputs]

    def covers(name: str, kind: str) -> bool:
        return kind == name or kind.startswith(name + ".")

    if all(any(covers(e, k) for k in seen) for e in expect.inputs) and all(
            any(covers(e, k) for e in expect.inputs) for k in seen):
        return []
    return [f"expected inputs {list(expect.inputs)}, saw {seen}"]


def result_texts(value: Any) -> list[str]:
    """Every ``text`` string in a result (content blocks, prompt messages, resource contents), in order."""
    if isinstance(value, Mapping):
        own = [value["text"]] if isinstance(value.get("text"), str) else []
        return own + [t for k, v in value.items() if k != "text" for t in result_texts(v)]
    if isinstance(value, list):
        return [t for item in value for t in result_texts(item)]
    return []


def expected(report: ToolReport, step: Step, obs: Observation) -> ToolReport:
    """``check --answers``: a tool's report, failed when the step's expectations were not met (a report the
    check already failed keeps its own reason)."""
    seen = StepObservation(obs.inputs, obs.rounds, obs.result, obs.error, obs.timed_out)
    failures = judge_step(step, seen).failures
    if not failures or report.status is Status.FAILED or obs.timed_out:
        return report
    return ToolReport(report.name, Status.FAILED, report.inputs, report.rounds, report.problems, "; ".join(failures))


# --- output -------------------------------------------------------------------------------------------------
def exit_code(reports: Iterable[StepReport]) -> int:
    return 0 if all(r.passed for r in reports) else 1


def render(source: str, reports: Sequence[StepReport]) -> str:
    lines = [f"{source}:"]
    for r in reports:
        inputs = ",".join(k.value for k in r.inputs) or "-"
        verdict = "ok" if r.passed else "FAILED: " + "; ".join(r.failures)
        lines.append(f"  {r.label}  inputs={inputs} rounds={r.rounds}  {verdict}")
    passed = sum(r.passed for r in reports)
    lines.append(f"  {len(reports)} steps: {passed} passed, {len(reports) - passed} failed")
    return "\n".join(lines)
