"""The benchmark's verdicts on its targets (``bench.targets``), from made-up ratios: each target
flips at its limit, an unmeasured one is neither met nor missed, and a dropped idle stream is a miss; and the
all-CPU figures the bridged targets are read beside, from made-up CPU times."""

from __future__ import annotations

from typing import Any

import pytest

from bench.targets import missed, verdicts


def _ratios(**c1: float) -> dict[str, Any]:
    base = {"passthrough/forwarder": 1.0, "translated/forwarder": 1.1, "bridged_round_added_ms": 0.9,
            "bridged/mrtr_forwarder": 1.05, "bridged_round_cpu/translated_cpu": 1.0}
    return {"c1": {**base, **c1}, "c32": {**base, "bridged_round_cpu/translated_cpu": 0.9},
            "idle": [{"sessions": 10000, "kib_per_session": 23.1, "held": 10000}]}


def _by_name(ratios: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["target"]: row for row in verdicts(ratios)}


def test_every_target_is_met_at_its_limit_and_missed_just_above_it() -> None:
    assert missed(verdicts(_ratios())) == []
    at_limit = _ratios(**{"passthrough/forwarder": 1.10, "translated/forwarder": 1.15,
                          "bridged_round_added_ms": 1.0, "bridged/mrtr_forwarder": 1.10,
                          "bridged_round_cpu/translated_cpu": 1.10})
    assert missed(verdicts(at_limit)) == []
    for key, over, name in [("passthrough/forwarder", 1.11, "passthrough/forwarder median, c=1"),
                            ("translated/forwarder", 1.16, "translated/forwarder median, c=1"),
                            ("bridged_round_added_ms", 1.01, "bridged round added ms, c=1"),
                            ("bridged/mrtr_forwarder", 1.11, "bridged/mrtr_forwarder median, c=1")]:
        assert missed(verdicts(_ratios(**{key: over}))) == [name]


def test_the_bridged_latency_is_judged_at_c1_and_reported_above() -> None:
    ratios = _ratios()
    ratios["c32"]["bridged/mrtr_forwarder"] = 1.3
    assert missed(verdicts(ratios)) == []
    row = _by_name(ratios)["bridged/mrtr_forwarder median, c=32"]
    assert (row["met"], row["judged"]) == (False, False)
    ratios["c1"]["bridged/mrtr_forwarder"] = 1.3
    assert missed(verdicts(ratios)) == ["bridged/mrtr_forwarder median, c=1"]


def test_a_rounds_timed_cpu_is_reported_not_judged() -> None:
    """Judged in instructions (bench.instructions) instead, which the host's drift does not move."""
    ratios = _ratios(**{"bridged_round_cpu/translated_cpu": 1.5})
    row = _by_name(ratios)["gateway CPU per bridged round / per translated call, c=1"]
    assert (row["met"], row["judged"]) == (False, False)
    assert missed(verdicts(ratios)) == []


def test_idle_memory_and_sessions_held() -> None:
    ratios = _ratios()
    ratios["idle"] = [{"sessions": 1000, "kib_per_session": 24.5, "held": 1000},
                      {"sessions": 10000, "kib_per_session": 23.0, "held": 9999}]
    assert missed(verdicts(ratios)) == ["KiB per idle session, 1000 sessions",
                                       "idle sessions whose GET stream stayed open, of 10000"]


def test_a_target_not_measured_is_neither_met_nor_missed() -> None:
    ratios = _ratios()
    del ratios["c1"]  # --concurrency 32 alone: the c=1 targets were not measured
    ratios["idle"] = []
    rows = _by_name(ratios)
    assert rows["translated/forwarder median, c=1"]["met"] is None
    assert rows["bridged round added ms, c=1"]["value"] is None
    assert "bridged/mrtr_forwarder median, c=1" not in rows
    assert rows["bridged/mrtr_forwarder median, c=32"]["met"] is True
    assert missed(verdicts(ratios)) == []


def test_the_redis_targets_are_judged_when_it_ran_on_redis() -> None:
    ratios = _ratios()
    assert not any("redis" in row["target"].lower() for row in verdicts(ratios))  # not run: not reported
    on_redis = {"translated redis/memory p50": 1.15, "bridged redis/memory p50": 1.1,
                "translated redis/memory cpu": 1.0, "bridged redis/memory cpu": 1.1,
                "translated workers2/workers1 throughput": 0.8}
    ratios["c1"] |= on_redis
    ratios["c32"] |= on_redis | {"bridged redis/memory cpu": 1.16}
    ratios["redis_idle"] = [{"sessions": 200, "bytes_per_session": 4097}]
    assert missed(verdicts(ratios)) == ["bridged redis/memory gateway CPU per request, c=32",
                                       "bytes in Redis per idle session, 200 sessions"]
    assert not any("workers" in row["target"] for row in verdicts(ratios))  # reported, not judged


def test_the_machine_ratios_put_a_bridged_call_at_a_plain_calls_price() -> None:
    """Made-up CPU per request: the client and core of a bridged call take 600 us, its gateway 900 (three hops);
    a translated call costs the gateway 250; the MRTR scenario through the forwarder takes 1,400 in all."""
    from bench.__main__ import Stats, _machine_ratios

    def stats(name: str, front: float, machine: float) -> Stats:
        return Stats(name, 32, 100, 1.0, 1.0, 2.0, 100.0, front, 0.0, machine)

    at = {(s.scenario, 32): s for s in (stats("translated", 250, 500), stats("bridged", 900, 1500),
                                        stats("mrtr_forwarder", 500, 1400), stats("bridged_one", 600, 1000),
                                        stats("mrtr_forwarder_one", 300, 800))}
    ratios = _machine_ratios(at, 32)
    assert ratios["bridged/mrtr_forwarder machine cpu"] == round(1500 / 1400, 3)
    assert ratios["bridged/mrtr_forwarder at a plain call's price"] == round((600 + 3 * 250) / 1400, 3)
    assert ratios["bridged gateway cpu budget us"] == round(1.10 * 1400 - 600, 1)
    assert ratios["bridged_one/mrtr_forwarder_one at a plain call's price"] == round((400 + 2 * 250) / 800, 3)
    assert ratios["bridged_one gateway cpu us"] == 600


def test_all_cpu_counts_the_process_behind_the_front_once() -> None:
    """``interleaved`` with stand-in processes whose CPU grows by 1.5 s at every reading: a scenario behind a
    forwarder counts the forwarder and the core (twice the front's CPU, plus this process's few ms), one whose
    front is the core counts the core once."""
    import argparse
    import asyncio

    from bench.__main__ import interleaved

    class Ticking:
        def __init__(self) -> None:
            self.user = 0.0

        def cpu_times(self) -> tuple[float, float]:
            self.user += 1.0
            return self.user, self.user / 2

    async def op() -> None:
        await asyncio.sleep(0.001)  # sleep: an operation that takes some time

    core, fwd = Ticking(), Ticking()
    args = argparse.Namespace(warmup=0.0, duration=0.02, slice=0.01)
    results = asyncio.run(interleaved({"direct": [op], "forwarder": [op]}, 1, args,
                                      {"direct": core, "forwarder": fwd}, core))  # type: ignore[dict-item,arg-type]
    by = {r.scenario: r for r in results}
    ratio = {name: by[name].machine_cpu_us_per_request / by[name].front_cpu_us_per_request  # type: ignore[operator]
             for name in by}
    assert 1.0 < ratio["direct"] < 1.1
    assert 2.0 < ratio["forwarder"] < 2.1


def test_the_balanced_replicas_and_the_store_round_trips_are_judged_when_they_ran() -> None:
    assert not any("_rr" in name or "round trips" in name for name in _by_name(_ratios()))  # not run: no rows
    ratios = _ratios(**{"translated_rr/translated_redis p50": 1.15, "bridged_rr/bridged_redis p50": 1.30})
    ratios["c32"]["bridged_rr/bridged_redis p50"] = 1.31
    ratios["store_trips"] = {"one replica": 6, "answers on another replica": 14}
    judged = _by_name(ratios)
    assert judged["translated_rr/translated_redis median, c=1"]["met"] is True
    assert judged["bridged_rr/bridged_redis median, c=1"]["met"] is True
    assert judged["Redis round trips per two-round bridged call"]["met"] is True
    assert missed(verdicts(ratios)) == ["bridged_rr/bridged_redis median, c=32"]
    ratios["store_trips"]["one replica"] = 7
    assert "Redis round trips per two-round bridged call" in missed(verdicts(ratios))


def test_the_replicas_over_their_floor_are_reported_and_never_missed() -> None:
    ratios = _ratios(**{"translated_rr/translated_redis p50": 1.15, "bridged_rr/bridged_redis p50": 1.30})
    assert not any("over its floor" in name for name in _by_name(ratios))  # the floor did not run: no rows
    for conc, (translated, bridged) in (("c1", (1.10, 1.16)), ("c32", (1.2, 1.15))):
        ratios[conc] |= {"translated_rr/translated_redis over its floor": translated,
                         "bridged_rr/bridged_redis over its floor": bridged}
    judged = _by_name(ratios)
    assert judged["translated_rr/translated_redis over its floor, c=1"]["met"] is True
    assert judged["bridged_rr/bridged_redis over its floor, c=1"]["met"] is False
    assert judged["bridged_rr/bridged_redis over its floor, c=32"]["met"] is True
    assert "translated_rr/translated_redis over its floor, c=32" not in judged  # a plain call: at c=1 alone
    assert not any("over its floor" in name for name in missed(verdicts(ratios)))


@pytest.mark.parametrize(("scenario", "other", "at_limit", "over", "said"), [
    ("round", "bridged", 3_200_000.0, 3_300_000.0, "a round / a translated call 1.100 (target <= 1.1: met)"),
    ("auth", "translated_auth", 1_050_000.0, 1_060_000.0,
     "authenticated / unauthenticated 1.050 (target <= 1.05: met)"),
])
def test_a_ratio_judged_in_instructions_follows_its_counts(monkeypatch: Any, capsys: Any, scenario: str, other: str,
                                                           at_limit: float, over: float, said: str) -> None:
    """``bench.instructions --scenario round|auth``: a round ((bridged - translated) / 2) or an authenticated call
    over a translated call, met at the limit and missed just above it."""
    import argparse

    from bench import instructions

    counts = {"translated": 1_000_000.0, other: at_limit}
    monkeypatch.setattr(instructions, "count", lambda name, *rest: counts[name])
    args = argparse.Namespace(requests=10, gc_gen0=10_000, store=None, concurrency=1)
    assert instructions.judge(scenario, args, ".") is True
    assert said in capsys.readouterr().out
    counts[other] = over
    assert instructions.judge(scenario, args, ".") is False
    assert "NOT MET" in capsys.readouterr().out
