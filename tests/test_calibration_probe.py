"""The hook's calibration probe: written once at the first recorded step and then once per period
of steps, kept out of the steps' own clocks, and a probe that fails never harms the engine (one
warning, that probe dropped, every step still recorded). vLLM stand-ins: tests/test_vllm_hook.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.hook import calibration
from specmodel.engines.vllm import writer as vwriter
from specmodel.engines.vllm.steplog import read_step_log
from tests.rank_files import rank_file
from tests.test_vllm_hook import _so, standin  # noqa: F401 - the fixture


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in rank_file(out, 1).read_text().splitlines()]


def _run(runner: Any, n: int) -> None:
    for _ in range(n):
        assert runner.execute_model(_so(1)) is None
        assert runner.sample_tokens(None) == "output"


def _period_over() -> None:
    cal = vwriter.STATE.calibrator
    assert cal is not None and cal.next_at is not None
    # as if a period of steps had passed, and another without a window of the others' share (the stand-in's
    # steps take microseconds: never half a second of them; tests/test_box_condition_both_ways.py has the window)
    cal.next_at -= 2 * calibration.PERIOD_S


def test_one_probe_at_the_first_step_then_one_per_period(standin: Any) -> None:  # noqa: F811
    r = standin.Runner(None)
    _run(r, 3)  # three stand-in steps: milliseconds, far inside one period
    kinds = [x["type"] for x in _lines(standin.out)]
    assert kinds == ["meta", "step", "probe", "step", "step"]
    _period_over()
    _run(r, 2)
    assert [x["type"] for x in _lines(standin.out)][5:] == ["step", "probe", "step"]
    log = read_step_log(rank_file(standin.out, 1))  # the project's reader takes them, validated
    assert len(log.probes) == 2 and len(log.steps) == 5
    p = log.probes[0]
    assert p["kernel"] == "matmul_f32" and p["device"] == "cpu" and p["clock"] == "perf_counter"
    assert len(p["samples_s"]) == calibration.SAMPLES and all(x > 0 for x in p["samples_s"])


def test_the_step_after_a_probe_does_not_carry_it_in_its_gap(standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    slow = calibration.Calibrator.run

    def run(self: Any) -> Any:
        import time

        time.sleep(0.2)  # a probe far longer than any gap between two stand-in steps
        return slow(self)

    monkeypatch.setattr(calibration.Calibrator, "run", run)
    _run(standin.Runner(None), 2)
    steps = [x for x in _lines(standin.out) if x["type"] == "step"]
    assert steps[1]["gap_s"] < 0.1


def test_a_probe_that_fails_warns_once_and_every_step_is_still_recorded(standin: Any, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    tries = []

    def boom(self: Any) -> Any:
        tries.append(1)
        self.next_at = 0.0  # due again at the next boundary: every step tries, and fails
        raise RuntimeError("no BLAS here")

    monkeypatch.setattr(calibration.Calibrator, "run", boom)
    _run(standin.Runner(None), 6)
    assert len(tries) == 6
    lines = _lines(standin.out)
    assert [x["type"] for x in lines].count("step") == 6 and not any(x["type"] == "probe" for x in lines)
    warnings = [x for x in capfd.readouterr().err.splitlines() if "hook: warning:" in x]
    assert len(warnings) == 1 and "calibration probe failed" in warnings[0] and "no BLAS here" in warnings[0]
    assert vwriter.STATE.step is None and vwriter.STATE.where is None


def test_the_wait_for_a_cpu_is_read_over_steps_never_over_the_engines_start_up(standin: Any,  # noqa: F811
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # the step thread's schedstat (ns on a CPU, ns waiting): start-up on a busy box waited half its
    # time; the 5 s of steps after the first probe waited 0.1 s of 1 s runnable
    readings = iter([(1_000_000_000, 1_000_000_000), (1_900_000_000, 1_100_000_000)])
    monkeypatch.setattr(calibration, "schedstat_ns", lambda: next(readings))
    r = standin.Runner(None)
    _run(r, 1)
    _period_over()
    _run(r, 1)
    log = read_step_log(rank_file(standin.out, 1))
    assert [p["wait_share"] for p in log.probes] == [None, pytest.approx(0.1)]
