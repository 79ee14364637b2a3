"""``python -m gateway replay FILE... --upstream URL``, the shell half: replays scenario files (the steps of a
2025-11-25 client, with canned answers and expectations; :mod:`kit.scenario`) through an in-process gateway.

Owns the I/O: reading the TOML files, the 2026-07-28 probe of the upstream (``gateway.ops.check.probe``), one
legacy session of :mod:`gateway.ops.legacy_client` per file, and the output. Exit 0 when every step met its
expectations, 1 when one did not, 2 for a bad file or an unreachable/non-2026 server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from gateway.ops.check import Options, probe
from gateway.ops.legacy_client import LegacyClient, Rounds, Unusable, served_gateway
from kit import check as C
from kit import scenario as S


def load(path: str) -> S.Scenario:
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise S.ScenarioError(f"{path}: {exc}") from None
    try:
        return S.parse(document, path)
    except S.ScenarioError as exc:
        raise S.ScenarioError(f"{path}: {exc}") from None


async def replay(upstream: str, scenarios: list[S.Scenario],
                 step_seconds: float) -> list[tuple[str, tuple[S.StepReport, ...]]]:
    """Raises :class:`Unusable` when the upstream is unreachable or not 2026-07-28."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as http:
        await probe(http, Options(upstream))
        rounds = Rounds()
        async with served_gateway(upstream, rounds) as url:
            return [(s.source, await _replay_one(http, url, rounds, s, step_seconds)) for s in scenarios]


async def _replay_one(http: aiohttp.ClientSession, url: str, rounds: Rounds, scenario: S.Scenario,
                      step_seconds: float) -> tuple[S.StepReport, ...]:
    answering = _StepAnswers()
    client = LegacyClient(http, url, answering)
    try:
        await client.initialize()
        return tuple([await _step(client, rounds, answering, step, step_seconds) for step in scenario.steps])
    finally:
        await client.close()


class _StepAnswers:
    """The client's Answerer: the current step's answers, the n-th request of a kind getting the n-th answer."""

    def __init__(self) -> None:
        self.answers, self.seen = S.Answers(), dict[C.InputKind, int]()

    def start(self, answers: S.Answers) -> None:
        self.answers, self.seen = answers, {}

    def __call__(self, method: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        kind = C.input_kind(method, params)
        if kind is None:
            return None
        # Form and URL elicitations take their answers from one sequence, as the file gives them.
        key = C.InputKind.ELICITATION_FORM if kind is C.InputKind.ELICITATION_URL else kind
        index = self.seen[key] = self.seen.get(key, -1) + 1
        return self.answers.result(kind, index)


async def _step(client: LegacyClient, rounds: Rounds, answering: _StepAnswers, step: S.Step,
                step_seconds: float) -> S.StepReport:
    answering.start(step.answers)
    method, params = step.request()
    rounds.method, rounds.count = method, 0
    inputs: list[C.InputKind] = []
    try:
        async with asyncio.timeout(step_seconds):
            message = await client.request(method, params, inputs)
    except TimeoutError:
        await client.cancel("python -m gateway replay: no answer in time")
        return S.judge_step(step, S.StepObservation(tuple(inputs), rounds.count, timed_out=True))
    observed = S.StepObservation(tuple(inputs), rounds.count, message.get("result"), message.get("error"))
    return S.judge_step(step, observed)


# --- the command line ---------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="scenario TOML files (config/scenarios/)")
    parser.add_argument("--upstream", required=True, help="the 2026-07-28 server's URL")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per step (default 60)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def run(args: argparse.Namespace) -> int:
    try:
        scenarios = [load(path) for path in args.files]
        results = asyncio.run(replay(args.upstream, scenarios, args.timeout))
    except (S.ScenarioError, Unusable) as exc:
        prefix = "bad scenario" if isinstance(exc, S.ScenarioError) else f"cannot replay against {args.upstream}"
        print(json.dumps({"error": f"{prefix}: {exc}"}) if args.json else f"{prefix}: {exc}",
              file=sys.stdout if args.json else sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"upstream": args.upstream, "files": [
            {"file": source, "steps": [r.to_json() for r in reports]} for source, reports in results]}, indent=2))
    else:
        print("\n".join(S.render(source, reports) for source, reports in results))
    return max((S.exit_code(reports) for _source, reports in results), default=0)
