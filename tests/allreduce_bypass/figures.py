"""The figures of the all-reduce bypass on the live CPU engine with a draft_model drafter (TP 2, k = 3),
what tests/test_vllm_allreduce_bypass_live.py checks with ngram:

    SPECMODEL_VLLM_PYTHON=.venv-vllm/bin/python python -m tests.allreduce_bypass.figures DIR

runs a baseline server (no speculation) and a draft_model server twice -- with part of the small
forwards' all-reduces routed around the hook's wrapper (sitecustomize.py here) and unaltered --
summarizes each speculative run beside the baseline with the real command, and prints each verify
row's all-reduce share of the forward and its source, and the prediction's ``allreduce_known``."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from tests.test_vllm_allreduce_bypass_live import _predict, _profile, run, verify_share
    from tests.vllm_engine import build_models, engine_python

    py = engine_python()
    if py is None or len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dest = Path(argv[1])
    models = build_models(py, dest / "models-tmp")
    run(py, models, dest / "base", bypass=False, spec=None)
    for name, bypass in (("altered", True), ("plain", False)):
        run(py, models, dest / name, bypass=bypass, spec="draft_model")
        prof = _profile(dest / name, dest / f"p-{name}", base=dest / "base")
        drafts = [(r["kind"], r["allreduce_source"], r["n_allreduce"]) for r in prof["costs"]
                  if r["kind"] in ("draft", "draft_extend")]
        print(json.dumps({"run": name, "verify": verify_share(prof), "drafter_rows": drafts,
                          "allreduce_known": _predict(dest / f"p-{name}")["allreduce_known"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
