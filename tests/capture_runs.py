"""TP 2 CPU vLLM runs under `specmodel vllm --capture-steps N` (tests/vllm_engine.py servers): what
the live capture test runs and what recorded tests/data/vllm_cpu_032_capture.

    SPECMODEL_VLLM_PYTHON=.venv-vllm/bin/python python -m tests.capture_runs record DIR

records DIR/base (no speculation) and DIR/spec (draft_model, k = 3), both with the hook's
all-reduce wrapper on and a 3-step capture: the wrapper's timings (outside the capture window)
and the capture's shares of the same run, side by side;

    ... python -m tests.capture_runs spread DIR PAIRS

runs PAIRS pairs of the live test's two servers (ngram, k = 3; wrapper off + a 16-step capture;
wrapper on), summarizes each beside a baseline stood in by its own decode steps
(tests/conftest.py baseline_standin) and prints each pair's all-reduce share of the forward per
row from both profiles: the spread the live test's tolerance rests on
(tests/test_vllm_capture_live.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.vllm_engine import draft_spec, hooked, ngram_spec

CAPTURE_STEPS = 3
REQUESTS = 3
TOKENS = 24


def run(python: Path, models: Any, out: Path, *, spec: str | None, wrapper: bool, capture_steps: int = CAPTURE_STEPS,
        requests: int = REQUESTS, tokens: int = TOKENS) -> str:
    """One TP 2 server under the hook (``spec``: "draft_model", "ngram" or None, k = 3) until it served
    ``requests`` greedy completions; its log."""
    env = {"SPECMODEL_VLLM_CAPTURE_STEPS": str(capture_steps)}
    if not wrapper:
        env["SPECMODEL_VLLM_NO_ALLREDUCE_WRAPPER"] = "1"
    kw: dict[str, Any] = {}
    if spec == "draft_model":
        kw["spec"] = draft_spec(models.draft_noisy, 3)
    elif spec == "ngram":
        kw["spec"] = ngram_spec(3)
    with hooked(python, models.target, out, tp=2, env=env, **kw) as srv:
        for _ in range(requests):
            srv.complete(max_tokens=tokens)
        return srv.log_text()


def _spread(py: Path, models: Any, dest: Path, pairs: int) -> None:
    import json

    from specmodel.engines.vllm.hooklog import summarize
    from tests.conftest import baseline_standin

    for i in range(pairs):
        shares = []
        for name, wrapper in (("off", False), ("on", True)):
            out = dest / f"{name}{i}"
            run(py, models, out, spec="ngram", wrapper=wrapper, capture_steps=0 if wrapper else 16, requests=4,
                tokens=32)
            prof = summarize([baseline_standin(out, dest / f"{name}{i}-base"), out], name=name, min_samples=3)
            rows = [r for r in prof.costs if r.kind in ("decode", "verify")]
            shares.append({f"{r.kind} b{r.batch} t{r.tokens}": (round(r.allreduce_s / (r.allreduce_s + r.compute_s), 4),
                                                                r.allreduce_source) for r in rows})
        print(json.dumps({"pair": i, "capture": shares[0], "wrapper": shares[1]}), flush=True)


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or argv[1] not in ("record", "spread"):
        print(__doc__, file=sys.stderr)
        return 2
    from tests.vllm_engine import build_models, engine_python

    py = engine_python()
    if py is None:
        print("no vLLM engine ($SPECMODEL_VLLM_PYTHON)", file=sys.stderr)
        return 2
    dest = Path(argv[2])
    models = build_models(py, dest / "models-tmp")
    if argv[1] == "spread":
        _spread(py, models, dest, int(argv[3]) if len(argv) == 4 else 3)
        return 0
    for name, spec in (("base", None), ("spec", "draft_model")):
        log = run(py, models, dest / name, spec=spec, wrapper=True)
        if "specmodel vllm hook: warning" in log:
            print(log[-3000:], file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
