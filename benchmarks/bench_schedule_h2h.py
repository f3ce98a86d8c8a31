"""Head to head on the live vLLM engine (the engine's own schedule against a fixed configuration): total tok/s at concurrency 1, 2, 4, 8
(one context, bounded requests) with

  (a) no speculation, (b) static k, (c) specmodel's exported schedule (``plan --engine vllm
  --export``, the band for this context), (d) vLLM's ``enable_adaptive_verification`` (tried; vLLM
  0.32 only runs it for method "dspark" with full CUDA graphs, so on CPU its refusal is recorded).

Measured like pyperf: each round starts every configuration's server in a rotated order and runs
every concurrency in a rotated order (interleaved, so drift from the other engineers' load lands on
all of them alike); rounds repeat; the table gives the median and min..max over rounds. Each
measurement sends ``REQUESTS_PER_SLOT x c`` requests of ``--max-tokens`` tokens (``ignore_eos``), the
same prompt length for all, and reads the engine's spec-decode counters before and after, so the
draft tokens per draft (the k the engine ran) are shown beside tok/s.

Goal: (c) never below the best of (a), (b) by more than the noise (the spread of the two) at any
concurrency, and at least (d). The box is shared: ``uptime`` is printed before and after.

Run (after ``make engine``; the fixture's tiny models by default):
  python benchmarks/bench_schedule_h2h.py [--drafter draft_noisy|draft_random|ngram|DIR] [--target DIR]
      [--schedule S.json] [--rounds 3]
The schedule must come from a profile of this same engine and model (docs/serving.md); without
--schedule one is made first: ``specmodel vllm`` profiles this engine, ``plan --engine vllm
--export`` writes the schedule (benchmarks/_engine_schedule.py), in runs separate from the rounds.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._vllm_live import metrics_counters, run_load, start  # noqa: E402
from specmodel.commands.plan_schedule import check_document as check_schedule_document  # noqa: E402
from specmodel.errors import SpecmodelError  # noqa: E402
from specmodel.io import read_json  # noqa: E402
from specmodel.model.schedule import band_for  # noqa: E402
from specmodel.schema.formats import SCHEDULE  # noqa: E402
from tests.vllm_engine import build_models, engine_python  # noqa: E402

CONCURRENCY = (1, 2, 4, 8)
REQUESTS_PER_SLOT = 3


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def load_schedule(path: str, *, target: str, tp: int, context_tokens: int) -> dict[str, Any]:
    doc = read_json(path)
    SCHEDULE.check(doc, path)
    check_schedule_document(doc, path)
    if doc["engine"] != "vllm":
        raise SpecmodelError(f"{path}: engine: a vLLM schedule is needed, got {doc['engine']!r}")
    if doc["tp"] is not None and doc["tp"] != tp:
        raise SpecmodelError(f"{path}: tp: the schedule is for TP{doc['tp']}, the engine runs TP{tp}")
    want = str(doc.get("model") or "").rstrip("/").rsplit("/", 1)[-1].lower()
    if want and want != target.rstrip("/").rsplit("/", 1)[-1].lower():
        raise SpecmodelError(f"{path}: model: the schedule is for {doc['model']!r}, the engine serves {target!r}")
    return dict(band_for(doc, context_tokens))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=None, help="target model dir (default: the fixture's tiny target)")
    ap.add_argument("--drafter", default="draft_noisy",
                    help="draft model dir (method draft_model), 'draft_noisy' / 'draft_random' (the fixture's), "
                         "or 'ngram'")
    ap.add_argument("--schedule", default=None,
                    help="specmodel.schedule JSON from plan --engine vllm --export (default: profile this engine "
                         "with `specmodel vllm` first and export one, benchmarks/_engine_schedule.py)")
    ap.add_argument("--work-dir", default=".bench/schedule_h2h", help="models, the derived profile and schedule")
    ap.add_argument("--static-k", type=int, default=3)
    ap.add_argument("--prompt-words", type=int, default=200, help="the one context (prompt length, words)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args(argv)
    conc = [int(x) for x in a.concurrency.split(",")]
    if a.schedule is not None and a.target is not None:  # bad input first, before any engine starts
        try:
            load_schedule(a.schedule, target=a.target, tp=a.tp, context_tokens=a.prompt_words)
        except SpecmodelError as e:
            print(f"bench_schedule_h2h: {e}", file=sys.stderr)
            return 2
    py = engine_python()
    if py is None:
        print("bench_schedule_h2h: vLLM is not installed (make engine)", file=sys.stderr)
        return 1
    work = Path(a.work_dir)
    models = build_models(py, work / "models")
    target = Path(a.target) if a.target else models.target
    base: dict[str, Any]
    if a.drafter == "ngram":
        base = {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    else:
        d = {"draft_noisy": models.draft_noisy, "draft_random": models.draft_random}.get(a.drafter, Path(a.drafter))
        base = {"method": "draft_model", "model": str(d)}
    max_len = 2 * a.prompt_words + a.max_tokens + 128  # words -> tokens: at most ~2 with this BPE
    print(f"uptime at start: {uptime()}", flush=True)
    if a.schedule is None:
        from benchmarks._engine_schedule import derive_schedule

        a.schedule = str(derive_schedule(python=py, target=target, base=base, static_k=a.static_k,
                                         prompt_words=a.prompt_words, max_tokens=a.max_tokens, out_dir=work,
                                         conc=tuple(conc), max_num_seqs=max(conc), max_model_len=max_len, tp=a.tp))
    try:
        band = load_schedule(a.schedule, target=str(target), tp=a.tp, context_tokens=a.prompt_words)
    except SpecmodelError as e:
        print(f"bench_schedule_h2h: {e}", file=sys.stderr)
        return 2
    sched_cfg = band["vllm"]["speculative_config"]
    if sched_cfg is not None:
        sched_cfg = {**base, **{k: v for k, v in sched_cfg.items() if k not in ("method", "model")}}
    configs: dict[str, dict[str, Any] | None] = {
        "a none": None,
        "b static": {**base, "num_speculative_tokens": a.static_k},
        "c schedule": sched_cfg,
        "d adaptive": {**base, "num_speculative_tokens": a.static_k, "enable_adaptive_verification": True},
    }
    print(f"uptime before: {uptime()}", flush=True)
    print(f"schedule band: context {band['context_tokens']}: "
          f"{[[r['start'], r['end'], r['k']] for r in band['ranges']]}", flush=True)
    results: dict[str, dict[int, list[float]]] = {n: {c: [] for c in conc} for n in configs}
    kruns: dict[str, dict[int, list[float]]] = {n: {c: [] for c in conc} for n in configs}
    refused: dict[str, str] = {}
    names = list(configs)
    t0 = time.perf_counter()
    for rnd in range(a.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for name in order:
            if name in refused:
                continue
            srv, why = start(py, target, spec=configs[name], max_num_seqs=max(conc), max_model_len=max_len, tp=a.tp)
            if srv is None:
                refused[name] = why
                print(f"{name}: engine refused to start: {why}", flush=True)
                continue
            try:
                if rnd == 0 and configs[name] is not None:  # the engine's echo of the config it was given / built
                    for ln in srv.log_text().splitlines():
                        if "non-default args" in ln or "speculative_config=SpeculativeConfig" in ln:
                            m = re.search(r"('speculative_config': \{[^{}]*\}|speculative_config=SpeculativeConfig\([^)]*\))",
                                          ln)
                            print(f"{name} engine log: {m.group(1) if m else ln[-300:]}", flush=True)
                run_load(srv.url, concurrency=1, requests=1, prompt_words=a.prompt_words, max_tokens=8)  # warm-up
                corder = conc[rnd % len(conc):] + conc[:rnd % len(conc)]
                for c in corder:
                    before = metrics_counters(srv.url)
                    tps = run_load(srv.url, concurrency=c, requests=REQUESTS_PER_SLOT * c,
                                   prompt_words=a.prompt_words, max_tokens=a.max_tokens)
                    after = metrics_counters(srv.url)
                    drafts = after["drafts"] - before["drafts"]
                    k = (after["draft_tokens"] - before["draft_tokens"]) / drafts if drafts > 0 else 0.0
                    results[name][c].append(tps)
                    kruns[name][c].append(k)
                    print(f"round {rnd + 1} {name:<11} c={c}: {tps:7.1f} tok/s  mean k per draft {k:.2f}  "
                          f"drafts {drafts:.0f}", flush=True)
            finally:
                srv.stop()
    print(f"uptime after: {uptime()}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    print()
    print(f"{'concurrency':>11} | " + " | ".join(f"{n:>22}" for n in names if n not in refused))
    ok_all = True
    for c in conc:
        cells = []
        for n in names:
            if n in refused:
                continue
            xs = results[n][c]
            cells.append(f"{statistics.median(xs):7.1f} [{min(xs):6.1f}..{max(xs):6.1f}] k{statistics.median(kruns[n][c]):.1f}"
                         if xs else f"{'-':>22}")
        print(f"{c:>11} | " + " | ".join(cells))
        best = max((statistics.median(results[n][c]), n) for n in ("a none", "b static") if results[n][c])
        if results["c schedule"][c]:
            sched = results["c schedule"][c]
            # noise: the spread of the best competitor's own rounds and of the schedule's, added
            bx = results[best[1]][c]
            noise = (max(bx) - min(bx)) + (max(sched) - min(sched))
            verdict = statistics.median(sched) >= best[0] - noise
            ok_all &= verdict
            print(f"{'':>11}   (c) vs best of (a),(b) = {best[1]}: {statistics.median(sched) / best[0] - 1:+.1%} "
                  f"(noise {noise / best[0]:.1%}) -> {'ok' if verdict else 'BELOW'}")
    for n, why in refused.items():
        print(f"{n}: not run: {why}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({"results": results, "k": kruns, "refused": refused,
                                                "uptime": uptime(), "args": vars(a)}, indent=2))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
