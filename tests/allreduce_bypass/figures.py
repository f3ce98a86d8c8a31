"""The figures of the all-reduce bypass on the live CPU engine with a draft_model drafter (TP 2, k = 3),
what tests/test_vllm_allreduce_bypass_live.py checks with ngram:

    SPECMODEL_VLLM_PYTHON=.venv-vllm/bin/python python -m tests.allreduce_bypass.figures DIR

runs a baseline server (no speculation) and a draft_model server twice -- with part of the small
forwards' all-reduces routed around the hook's wrapper (sitecustomize.py here) and unaltered --
summarizes each speculative run beside the baseline with the real command, and prints each verify
row's all-reduce share of the forward and its source, and the profile's all-reduce origin."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from tests.test_vllm_allreduce_bypass_live import _profile, run, verify_share
    from tests.vllm_engine import build_models, engine_python

    py = engine_python()
    if py is None or len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dest = Path(argv[1])
    models = build_models(py, dest / "models-tmp")
    if not (dest / "base").is_dir():  # (a run already in DIR is kept: the script resumes)
        run(py, models, dest / "base", bypass=False, spec=None)
    for name, bypass in (("altered", True), ("plain", False)):
        if not (dest / name).is_dir():
            run(py, models, dest / name, bypass=bypass, spec="draft_model")
        shutil.rmtree(dest / f"p-{name}", ignore_errors=True)
        shutil.rmtree(dest / f"p-{name}-base", ignore_errors=True)
        prof = _profile(dest / name, dest / f"p-{name}", base=dest / "base")
        drafts = [(r["kind"], r.get("allreduce_source", ""), r["n_allreduce"]) for r in prof["costs"]
                  if r["kind"] in ("draft", "draft_extend")]
        # (no predict here: on a shared box the baseline's recording may meet another load, which
        # predict refuses; the rows and the profile's all-reduce origin are what this compares)
        print(json.dumps({"run": name, "verify": verify_share(prof), "drafter_rows": drafts,
                          "allreduce_origin": dict(prof["source"].get("cost_origin") or {}).get("allreduce")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
