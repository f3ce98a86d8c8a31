"""specmodel's go/no-go against a live vLLM CPU engine, through the user's path only.

Every specmodel step is the installed command in a subprocess, as the README tells a user:

1. ``specmodel vllm --out hook_X -- <engine python> -m vllm.entrypoints.openai.api_server ...``
   runs each profiled server (the baseline and one server per drafter kind) with the hook;
2. ``specmodel vllm --summarize hook_base --summarize hook_X -o profiles/X`` makes the profile;
3. ``specmodel predict --json --profile profiles/X --accept-log X.log --batch B [--steps k]``
   predicts each configuration from its own server log (the accept length vLLM printed).

No specmodel module is imported and no step, window or row is filtered here: whatever the
commands read and decide is what is scored, so changes to ``--summarize`` / ``predict`` are
picked up as they land.

Per TP degree, two phases:

* **Profile** (in-sample rows): the hooked baseline server stays up; the hooked ``draft_model``
  (target + 5 % weight noise, k = 3) and ``ngram`` (k = 3, greedy) servers each run beside it at
  batches 1 and 4. Their hook logs make profiles "draft" and "ngram".
* **Out of sample** (never profiled; no hook, as in production): a fresh baseline server and,
  beside it, one at a time: the same two at batch 2; the losing drafter (an unrelated random
  model of the target's shape); the noisy drafter at k = 5; the **marginal** one, the noisy
  drafter at k = 1 (one drafter forward as costly as the target's for at most 2 tokens), and
  ngram at temperature 0.2, 0.05, 0.02 and 0.01 (its lookup matches on part of the steps;
  greedy ngram runs 1.3-1.9x, at 0.05 0.65-0.85x, so the crossing lies between), greedy ngram at
  batch 8 and 16 (beyond the profiled batches, where its gain runs out); and the **silent** one,
  ngram on sampled output (temperature 0.5, both servers of the pair), which on this engine
  proposes (almost) nothing. Which rows are marginal is decided by the measurement (0.85-1.15).

Measured truth: the tok/s of the speculative server over the baseline's, from this file's own
client (127.0.0.1 only; every request and wait bounded; servers stopped by their own process
group), rounds of B concurrent requests of ``--tokens`` tokens interleaved A B B A after a
full-length warm-up each, a pause between rounds (idle TP workers spin for 1 s); the ratio of the
medians of ``--reps`` rounds, with the rounds' spread.

Targets: median |speedup error| <= 10 % out of sample; go/no-go right wherever
the measured speedup is outside 0.9-1.1; rows measured within 0.85-1.15 reported MARGINAL or with
a band (predict's speedup band, ``speedup_low`` / ``speedup_high``) that holds the measurement;
and the **action** right wherever the engine clearly decided (:func:`action`): a clear win
(measured >= 1.2x) must be GO -- a MARGINAL or a refusal there is a *missed decision* (the user
switches off a clear win), a NO-GO a wrong one -- and a clear loss (<= 0.9x) must not be GO. The
table's ``action`` column says which, for every recorded run (it is read off the row's verdict and
measurement, so older results reprint with it).

Run (needs ``make engine``):
    .venv/bin/python benchmarks/bench_vllm_cli.py [--tp 1 --tp 2] [--tokens 128] [--reps 7] [--out DIR]
Full run: 13 server starts and 25 measured rows per TP degree, about 35 min per degree on
an idle 2-core box (a start is 21-30 s idle, ~3 min on a loaded box). Smoke:
    .venv/bin/python benchmarks/bench_vllm_cli.py --tp 1 --reps 2 --tokens 32 --batches 1 \
        --only draft_noisy_k1 --only ngram_sampled
Hook-free (the profile from vLLM's own step log, ``specmodel vllm --no-hook``): add ``--no-hook``
(at TP 1 every server then runs ``--distributed-executor-backend mp``, the executor the profiled
servers run).
Table of a finished run: ``bench_vllm_cli.py --table benchmarks/results/vllm_cli_<stamp>.json``;
the commands again on its recorded logs (after ``--summarize`` / ``predict`` changed), nothing
re-measured: ``bench_vllm_cli.py --rescore RESULTS.json [--proposal-rate-from-metrics] [--decode-phase]``.

Scored: the client times whole requests, so each row is predicted per request (``predict
--request-tokens <--tokens>``: each server's prefill and time outside the engine's steps beside the
decode phase); ``--decode-phase`` scores the decode phase's speedup instead (runs before
2026-12-03 15:30 UTC did), the other figure is kept in the row either way.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# the server's process and the tiny models only: nothing of specmodel itself
from tests.vllm_engine import VllmServer, build_models, draft_spec, engine_python, ngram_spec  # noqa: E402

K = 3
PROFILED_BATCHES = (1, 4)
BATCHES = (1, 2, 4)
BAND = (0.9, 1.1)
#: a measured speedup at or above this is a clear win (the verdict must be GO), at or below the other a
#: clear loss (it must not be GO); between them the action is not scored
CLEAR_WIN, CLEAR_LOSS = 1.2, 0.9
MARGINAL_BAND = (0.85, 1.15)
TARGET_MEDIAN = 0.10
SAMPLED_TEMPERATURE = 0.5
LOW_TEMPERATURE = 0.2
VERY_LOW_TEMPERATURE = 0.05
# between greedy (ngram 1.3-1.9x) and 0.05 (0.65-0.85x, 2026-12-02): where the gain should cross 1
MARGINAL_TEMPERATURES = (0.02, 0.01)
REQUEST_TIMEOUT_S = 300.0
PAIR_PAUSE_S = 1.2
CLI_TIMEOUT_S = 600.0
PROMPT = ("the quick brown fox jumps over the lazy dog. " * 6).strip()
RESULTS = REPO / "benchmarks" / "results"


@dataclass(frozen=True, kw_only=True)
class Config:
    name: str
    spec: dict[str, Any]
    k: int
    profile: str  # which profile predicts it: "draft" or "ngram"
    profiled: bool  # its server's hook log makes that profile
    batches: tuple[int, ...]
    temperature: float = 0.0


def specmodel_exe() -> list[str]:
    """The installed command beside this interpreter (a venv's bin/), else on PATH."""
    exe = Path(sys.executable).parent / "specmodel"
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("specmodel")
    if found:
        return [found]
    raise SystemExit("bench_vllm_cli: no installed `specmodel` command (make install)")


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(specmodel_exe() + args, cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


# --------------------------------------------------------------------------- the bounded client


def _complete(url: str, tokens: int, temperature: float) -> int:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": tokens, "temperature": temperature, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
        return int(json.loads(r.read())["usage"]["completion_tokens"])


def _round(ex: ThreadPoolExecutor, srv: VllmServer, batch: int, tokens: int, temperature: float) -> float:
    """``batch`` concurrent completions of exactly ``tokens`` tokens; their tokens over the wall time."""
    t0 = time.perf_counter()
    n = sum(ex.map(lambda _: _complete(srv.url, tokens, temperature), range(batch)))
    return n / (time.perf_counter() - t0)


COUNTERS = {"vllm:spec_decode_num_drafts_total": "drafts", "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
            "vllm:spec_decode_num_accepted_tokens_total": "accepted", "vllm:generation_tokens_total": "generated"}


def _counters(srv: VllmServer) -> dict[str, float]:
    out = dict.fromkeys(COUNTERS.values(), 0.0)
    for line in srv.get("/metrics").splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if not line.startswith("#") and name in COUNTERS:
            with contextlib.suppress(ValueError):
                out[COUNTERS[name]] += float(line.rsplit(" ", 1)[1])
    return out


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


#: a row's measured fields (the rest is predict's and the score, replaced on a rescore)
MEASURED_KEYS = ("tp", "drafter", "k", "batch", "temperature", "profile", "in_sample", "base_tokens_per_s",
                 "spec_tokens_per_s", "measured_speedup", "base_rounds", "spec_rounds", "spread_rel",
                 "accept_tokens_metrics", "proposal_rate_metrics")


def measure_pair(base: VllmServer, spec: VllmServer, *, batch: int, tokens: int, reps: int,
                 temperature: float) -> dict[str, Any]:
    """Rounds interleaved A B B A ... after one full-length warm-up each; medians, spreads and the
    speculative server's counters over the measured rounds (for the record: predict never sees them)."""
    rates: dict[int, list[float]] = {0: [], 1: []}
    srvs = (base, spec)
    with ThreadPoolExecutor(batch) as ex:
        for s in srvs:
            _round(ex, s, batch, tokens, temperature)
            time.sleep(PAIR_PAUSE_S)
        before = _counters(spec)
        for i in range(reps):
            for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                rates[j].append(_round(ex, srvs[j], batch, tokens, temperature))
                time.sleep(PAIR_PAUSE_S)
        d = {k: v - before[k] for k, v in _counters(spec).items()}
    b, s = _median(rates[0]), _median(rates[1])
    drafts = d["drafts"]
    return {"base_tokens_per_s": b, "spec_tokens_per_s": s, "measured_speedup": s / b,
            "base_rounds": rates[0], "spec_rounds": rates[1],
            # (max - min) / median over the rounds, the wider of the two servers
            "spread_rel": max((max(r) - min(r)) / _median(r) for r in rates.values()),
            "accept_tokens_metrics": 1 + d["accepted"] / drafts if drafts else None,
            # drafts per request-step: generated = drafts x E[A] + steps without a draft x 1
            "proposal_rate_metrics": drafts / (d["generated"] - d["accepted"])
            if d["generated"] > d["accepted"] else None}


# --------------------------------------------------------------------------- the user's commands


#: ``--no-hook``: the profiled servers run under ``specmodel vllm --no-hook`` (no specmodel code in the
#: server; the profile comes from vLLM's own step log, engines/vllm/enginelog.py)
NO_HOOK: list[str] = []
#: with ``--no-hook`` every server, held-out ones too, runs vLLM's multiprocess executor: at TP 1 on the
#: CPU ``specmodel vllm --no-hook`` adds it to the profiled servers (under the default ``uni`` the
#: forward ends before vLLM's step timer starts: docs/vllm.md), so the held-out servers run the same
#: server command the profile describes
EXECUTOR: list[str] = []


def hook_wrap(hook_dir: Path) -> list[str]:
    return [*specmodel_exe(), "vllm", "--out", str(hook_dir), *NO_HOOK, "--"]


def summarize(d: Path, name: str, hook_dirs: list[str]) -> dict[str, Any]:
    args = ["vllm"] + [x for h in hook_dirs for x in ("--summarize", h)] + ["-o", f"profiles/{name}"]
    r = cli(args, d)
    return {"command": "specmodel " + " ".join(args), "rc": r.returncode,
            "output": (r.stdout + r.stderr).strip().splitlines()}


def predict(d: Path, row: dict[str, Any], rate: float | None = None, request_tokens: int | None = None) -> dict[str, Any]:
    """``predict --json`` for a measured row, from its server's log. ``rate``: pass
    ``--proposal-rate`` (the server's own drafts per request-step, as `specmodel watch` prints it);
    None: predict's default. ``request_tokens``: ``--request-tokens`` (the client times whole
    requests of that many tokens: prefill and the time outside the engine are in what it measures);
    the request's speedup is then the one scored, the decode phase's kept beside it."""
    args = ["predict", "--json", "--profile", f"profiles/{row['profile']}", "--accept-log", f"{row['drafter']}.log",
            "--batch", str(row["batch"]), "--steps", str(row["k"])]
    if rate is not None:
        args += ["--proposal-rate", f"{rate:.4f}"]
    if request_tokens is not None:
        args += ["--request-tokens", str(request_tokens)]
    r = cli(args, d)
    out: dict[str, Any] = {"command": "specmodel " + " ".join(args), "rc": r.returncode}
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        out["refused"] = lines[-1].removeprefix("specmodel: error: ") if lines else f"exit {r.returncode}"
        return out
    p = json.loads(r.stdout)
    sp, tps = float(p["speedup"]), float(p["tokens_per_s"])
    lo, hi = p.get("tokens_per_s_low"), p.get("tokens_per_s_high")
    # predict's own speedup band (prediction v3: the baseline's cost interval in it); older: the tok/s band
    band = ([float(p["speedup_low"]), float(p["speedup_high"])] if p.get("speedup_high") else
            [sp * lo / tps, sp * hi / tps] if lo is not None and hi is not None and tps > 0 else None)
    rq = p.get("request")
    out["predicted_decode_speedup"] = sp
    if rq:  # prediction v4: the request priced end to end, its own band
        sp, band = float(rq["speedup"]), [float(rq["speedup_low"]), float(rq["speedup_high"])]
        out["request"] = rq
    out.update({"predicted_speedup": sp, "verdict": p.get("verdict"), "consistent": p.get("consistent"),
                "inconsistencies": p.get("inconsistencies"), "p_speedup_gt_1": p.get("p_speedup_gt_1"),
                "p_withheld": p.get("p_withheld"), "accept_tokens": p.get("accept_mean_tokens"),
                "proposal_rate": p.get("proposal_rate"),
                "band": band,
                "assumed": p.get("assumed"), "extrapolated": p.get("extrapolated"), "warnings": p.get("warnings")})
    return out


def configs(models: Any) -> list[Config]:
    noisy, rand = models.draft_noisy, models.draft_random
    return [
        Config(name="draft_noisy", spec=draft_spec(noisy, K), k=K, profile="draft", profiled=True,
               batches=PROFILED_BATCHES),
        Config(name="ngram", spec=ngram_spec(K), k=K, profile="ngram", profiled=True, batches=PROFILED_BATCHES),
        Config(name="draft_noisy_b2", spec=draft_spec(noisy, K), k=K, profile="draft", profiled=False, batches=(2,)),
        Config(name="ngram_b2", spec=ngram_spec(K), k=K, profile="ngram", profiled=False, batches=(2,)),
        Config(name="draft_random", spec=draft_spec(rand, K), k=K, profile="draft", profiled=False, batches=BATCHES),
        Config(name="draft_noisy_k5", spec=draft_spec(noisy, 5), k=5, profile="draft", profiled=False,
               batches=BATCHES),
        # marginal: k = 1 pays for one same-shape drafter forward with at most one extra token
        Config(name="draft_noisy_k1", spec=draft_spec(noisy, 1), k=1, profile="draft", profiled=False,
               batches=BATCHES),
        # marginal candidate too: at a low temperature the lookup matches on part of the steps only
        Config(name="ngram_t02", spec=ngram_spec(K), k=K, profile="ngram", profiled=False, batches=BATCHES,
               temperature=LOW_TEMPERATURE),
        # marginal candidates where ngram's gain runs out: at a temperature low enough that the
        # lookup matches on part of the steps only, and greedy at a batch twice the profiled one
        Config(name="ngram_t005", spec=ngram_spec(K), k=K, profile="ngram", profiled=False, batches=BATCHES,
               temperature=VERY_LOW_TEMPERATURE),
        # greedy ngram measured 1.3-1.9x, at 0.05 0.65-0.85x: the crossing lies between (marginal rows)
        Config(name="ngram_t002", spec=ngram_spec(K), k=K, profile="ngram", profiled=False, batches=BATCHES,
               temperature=MARGINAL_TEMPERATURES[0]),
        Config(name="ngram_t001", spec=ngram_spec(K), k=K, profile="ngram", profiled=False, batches=(1, 2),
               temperature=MARGINAL_TEMPERATURES[1]),
        Config(name="ngram_b8", spec=ngram_spec(K), k=K, profile="ngram", profiled=False, batches=(8,)),
        # greedy ngram measured 1.69x, 1.45x, 1.50x, 1.16x at batch 1, 2, 4, 8 (2026-12-02): batch 16 is
        # where its gain should run out (a marginal row: measured 0.85-1.15)
        Config(name="ngram_b16", spec=ngram_spec(K), k=K, profile="ngram", profiled=False, batches=(16,)),
        # silent: sampled output leaves ngram's lookup without a match (nothing proposed)
        Config(name="ngram_sampled", spec=ngram_spec(K), k=K, profile="ngram", profiled=False, batches=BATCHES,
               temperature=SAMPLED_TEMPERATURE),
    ]


def run_phase(py: Path, model: Path, d: Path, cfgs: list[Config], *, tp: int, hooked: bool, tokens: int,
              reps: int, batches: tuple[int, ...] | None, load: list[float]) -> list[dict[str, Any]]:
    """One baseline server up for the phase; each configuration's server beside it, in turn."""
    rows: list[dict[str, Any]] = []
    phase = "profile" if hooked else "oos"
    t0 = time.monotonic()
    extra = EXECUTOR if tp == 1 and not hooked else []
    with VllmServer(python=py, model=model, tp=tp, wrap=hook_wrap(d / "hook_base") if hooked else (),
                    log_path=d / f"base_{phase}.log", extra=extra) as base:
        print(f"  tp{tp} {phase}: baseline server up in {time.monotonic() - t0:.0f} s", flush=True)
        for c in cfgs:
            bs = [b for b in c.batches if batches is None or b in batches]
            if not bs:
                continue
            t1 = time.monotonic()
            with VllmServer(python=py, model=model, tp=tp, spec=c.spec, log_path=d / f"{c.name}.log", extra=extra,
                            wrap=hook_wrap(d / f"hook_{c.name}") if hooked else ()) as srv:
                up = time.monotonic() - t1
                for b in bs:
                    m = measure_pair(base, srv, batch=b, tokens=tokens, reps=reps, temperature=c.temperature)
                    rows.append({"tp": tp, "drafter": c.name, "k": c.k, "batch": b, "temperature": c.temperature,
                                 "profile": c.profile, "in_sample": c.profiled, **m})
                    print(f"  tp{tp} {c.name:<15} b{b} (start {up:3.0f} s) {m['base_tokens_per_s']:6.1f} -> "
                          f"{m['spec_tokens_per_s']:6.1f} tok/s = {m['measured_speedup']:.2f}x "
                          f"(spread {m['spread_rel']:.0%})", flush=True)
            load.append(os.getloadavg()[0])
    return rows


# --------------------------------------------------------------------------- scoring and the table


def score(r: dict[str, Any]) -> dict[str, Any]:
    """The row's error and its go/no-go and marginal judgements (None: not decided there)."""
    m = r["measured_speedup"]
    p = r.get("predicted_speedup")
    out: dict[str, Any] = {"error": p / m - 1 if p is not None else None, "go_no_go_right": None,
                           "marginal_ok": None}
    if not BAND[0] <= m <= BAND[1]:
        # a refusal or a MARGINAL verdict where the engine clearly decided is not a right go/no-go
        v = r.get("verdict")
        out["go_no_go_right"] = p is not None and (v == "GO") == (m > 1) and v in ("GO", "NO-GO")
    if MARGINAL_BAND[0] <= m <= MARGINAL_BAND[1]:
        band = r.get("band")
        out["marginal_ok"] = r.get("verdict") == "MARGINAL" or (band is not None and band[0] <= m <= band[1])
    return out


def action(measured: float, verdict: str | None) -> str | None:
    """Is the action the verdict tells a user right? ``right`` / ``missed`` (a clear win not GO'd:
    MARGINAL, a refusal, no verdict) / ``wrong`` (a clear win called NO-GO, a clear loss called GO);
    None between :data:`CLEAR_LOSS` and :data:`CLEAR_WIN`, where the engine did not clearly decide.
    ``verdict``: predict's, or None / "refused" where predict gave none."""
    if measured >= CLEAR_WIN:
        return "right" if verdict == "GO" else "wrong" if verdict == "NO-GO" else "missed"
    if measured <= CLEAR_LOSS:
        return "wrong" if verdict == "GO" else "right"
    return None


def _action_of(r: dict[str, Any]) -> str | None:
    return action(r["measured_speedup"], None if r.get("refused") is not None else r.get("verdict"))


def actions(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many clearly decided rows got the right action, a missed decision, a wrong one."""
    got = [_action_of(r) for r in rows]
    return {k: sum(g == k for g in got) for k in ("right", "missed", "wrong")}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errs = [abs(r["error"]) for r in rows if r["error"] is not None]
    oos = [abs(r["error"]) for r in rows if r["error"] is not None and not r["in_sample"]]
    decided = [r for r in rows if r["go_no_go_right"] is not None]
    marg = [r for r in rows if r["marginal_ok"] is not None]
    med_oos = statistics.median(oos) if oos else None
    return {"median_abs_error": statistics.median(errs) if errs else None, "median_abs_error_oos": med_oos,
            "n_predicted": len(errs), "n_oos_predicted": len(oos),
            "n_refused": sum(r.get("refused") is not None for r in rows),
            "go_no_go": [sum(bool(r["go_no_go_right"]) for r in decided), len(decided)],
            "marginal": [sum(bool(r["marginal_ok"]) for r in marg), len(marg)],
            "actions": actions(rows),
            "targets": {"actions_all_right": not (actions(rows)["missed"] or actions(rows)["wrong"]),
                        "median_oos_le_10pct": med_oos is not None and med_oos <= TARGET_MEDIAN,
                        "go_no_go_all_right": all(r["go_no_go_right"] for r in decided),
                        "marginal_all_ok": all(r["marginal_ok"] for r in marg)}}


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.0%}"


def markdown(res: dict[str, Any]) -> str:
    out = ["| TP | drafter | k | batch | E[A] (log) | r (metrics) | base tok/s | spec tok/s | spread | measured | "
           "predicted [band] | verdict | action | error | go/no-go | marginal |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if r.get("refused") is not None:
            pred, verdict = "refused", "`" + r["refused"][:160].replace("|", "/") + "`"
        else:
            band = r.get("band")
            pred = f"{r['predicted_speedup']:.2f}x" + (f" [{band[0]:.2f}-{band[1]:.2f}]" if band else "")
            verdict = str(r.get("verdict"))
        g = {None: "inside 0.9-1.1", True: "right", False: "**wrong**"}[r["go_no_go_right"]]
        mg = {None: "", True: "ok", False: "**miss**"}[r["marginal_ok"]]
        ea = r.get("accept_tokens")
        rate = r.get("proposal_rate_metrics")
        act = {None: "", "right": "right", "missed": "**missed decision**", "wrong": "**wrong**"}[_action_of(r)]
        out.append(f"| {r['tp']} | {r['drafter']}{' (in-sample)' if r['in_sample'] else ''} | {r['k']} | {r['batch']} | "
                   f"{'—' if ea is None else f'{ea:.2f}'} | {'—' if rate is None else f'{rate:.2f}'} | "
                   f"{r['base_tokens_per_s']:.1f} | {r['spec_tokens_per_s']:.1f} | ±{r['spread_rel'] / 2:.0%} | "
                   f"{r['measured_speedup']:.2f}x | {pred} | {verdict} | {act} | {_pct(r['error'])} | {g} | {mg} |")
    s = res["summary"]
    t = s["targets"]
    acts = actions(res["rows"])  # from the rows: older results carry no such summary

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1%}"

    out += ["", f"Median |speedup error| {pct(s['median_abs_error_oos'])} out of sample over {s['n_oos_predicted']} "
            f"predicted rows (target <= 10 %: {'met' if t['median_oos_le_10pct'] else 'missed'}; "
            f"{pct(s['median_abs_error'])} over all {s['n_predicted']}); predict refused {s['n_refused']} row(s); "
            f"go/no-go right on {s['go_no_go'][0]}/{s['go_no_go'][1]} measured outside 0.9-1.1 "
            f"({'met' if t['go_no_go_all_right'] else 'missed'}); marginal rows (measured 0.85-1.15) MARGINAL or "
            f"inside the band: {s['marginal'][0]}/{s['marginal'][1]} ({'met' if t['marginal_all_ok'] else 'missed'}); "
            f"action (GO on a clear win >= {CLEAR_WIN:g}x, no GO on a clear loss <= {CLEAR_LOSS:g}x) right on "
            f"{acts['right']}/{sum(acts.values())}, missed decisions {acts['missed']}, wrong {acts['wrong']}. "
            f"{res['date']}, {res['box']}, load average {res['load_avg_1m'][0]:.1f}-{res['load_avg_1m'][1]:.1f} "
            f"(1 min), --tokens {res['tokens']} --reps {res['reps']}, {res['wall_s']:.0f} s; ngram proposal rate: "
            f"{res.get('proposal_rate', 'predict' + chr(39) + 's default')}"
            + (f"; re-predicted {res['rescored']} from the run's logs" if res.get("rescored") else "")
            + (f"; scored: {res['scored']}" if res.get("scored") else "") + "."]
    return "\n".join(out)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        print(markdown(json.loads(Path(sys.argv[2]).read_text())))
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "--rescore":
        return rescore(Path(sys.argv[2]), rate_from_metrics="--proposal-rate-from-metrics" in sys.argv[3:],
                       decode_phase="--decode-phase" in sys.argv[3:])
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--tp", type=int, action="append", default=None)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--batches", type=lambda s: tuple(int(x) for x in s.split(",")), default=None,
                    help="only these batches (e.g. 1 or 1,4); default: each configuration's own")
    ap.add_argument("--only", action="append", default=None,
                    help="out-of-sample configurations to run (repeatable); the profiled servers they need run too")
    ap.add_argument("--out", type=Path, default=None, help="working directory (logs, hook logs, profiles)")
    ap.add_argument("--models", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--decode-phase", action="store_true",
                    help="score predict's decode-phase speedup (no --request-tokens) against the client's "
                         "whole-request measurement, as runs before predict priced requests did")
    ap.add_argument("--no-hook", action="store_true",
                    help="profile the in-sample servers with `specmodel vllm --no-hook`: the profile comes from vLLM's "
                         "own step log alone (no specmodel code in the server); the held-out rows score it")
    ap.add_argument("--proposal-rate-from-metrics", action="store_true",
                    help="ngram rows: pass predict --proposal-rate from the server's own counters (what `specmodel "
                         "watch` prints) instead of predict's default")
    a = ap.parse_args()
    if a.no_hook:
        NO_HOOK.append("--no-hook")
        EXECUTOR.extend(["--distributed-executor-backend", "mp"])
    if a.reps < 1 or a.tokens < 1:
        ap.error("--reps and --tokens must be >= 1")
    py = engine_python()
    if py is None:
        print("bench_vllm_cli: the engine is not installed (make engine)", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-vllm-cli-"))
    out.mkdir(parents=True, exist_ok=True)
    models = build_models(py, a.models or out / "models")
    cfgs = configs(models)
    known = {c.name for c in cfgs if not c.profiled}
    if a.only and not set(a.only) <= known:
        ap.error(f"--only: unknown {sorted(set(a.only) - known)}; one of {sorted(known)}")
    t_start = time.monotonic()
    load = [os.getloadavg()[0]]
    rows: list[dict[str, Any]] = []
    commands: list[dict[str, Any]] = []
    for tp in a.tp or [1]:
        d = out / f"tp{tp}"
        d.mkdir(exist_ok=True)
        oos_cfgs = [c for c in cfgs if not c.profiled and (not a.only or c.name in a.only)]
        # with --only, the profiles those configurations are predicted from, no more
        prof_cfgs = [c for c in cfgs if c.profiled and (not a.only or c.profile in {o.profile for o in oos_cfgs})]
        rows_tp = run_phase(py, models.target, d, prof_cfgs, tp=tp, hooked=True, tokens=a.tokens, reps=a.reps,
                            batches=a.batches, load=load)
        for c in prof_cfgs:
            s = summarize(d, c.profile, ["hook_base", f"hook_{c.name}"])
            commands.append({"tp": tp, **s})
            print(f"  tp{tp} {s['command']}: exit {s['rc']}; " + (s["output"][0] if s["output"] else ""), flush=True)
        rows_tp += run_phase(py, models.target, d, oos_cfgs, tp=tp, hooked=False, tokens=a.tokens, reps=a.reps,
                             batches=a.batches, load=load)
        predict_rows(d, rows_tp, rate_from_metrics=a.proposal_rate_from_metrics,
                     request_tokens=None if a.decode_phase else a.tokens)
        rows += rows_tp
    stamp = dt.datetime.now(dt.timezone.utc)
    res = {"benchmark": "bench_vllm_cli", "date": stamp.isoformat(timespec="minutes"), "rows": rows,
           "summary": summary(rows), "commands": commands, "load_avg_1m": [min(load), max(load)],
           "box": f"{platform.machine()} {os.cpu_count()} cores", "tokens": a.tokens, "reps": a.reps,
           "batches": a.batches, "only": a.only, "tp": a.tp or [1], "wall_s": time.monotonic() - t_start,
           "argv": sys.argv[1:], "work_dir": str(out), "hook": "off (engine step log)" if a.no_hook else "on",
           "proposal_rate": "from /metrics" if a.proposal_rate_from_metrics else "predict's default",
           "scored": "decode phase" if a.decode_phase else f"per request (predict --request-tokens {a.tokens})"}
    write_results(res, a.results / f"{'vllm_enginelog_cli' if a.no_hook else 'vllm_cli'}_{stamp:%Y-%m-%d_%H%M}")
    return targets_exit(res["summary"])


def targets_exit(s: dict[str, Any]) -> int:
    """0 when every target was met, 1 when one was missed (run_all reports it), as the other
    benchmarks do: a table that misses its target must not read as a pass."""
    missed = [k for k, ok in s["targets"].items() if not ok]
    if missed:
        print(f"targets missed: {', '.join(missed)}")
    return 1 if missed else 0


def predict_rows(d: Path, rows: list[dict[str, Any]], *, rate_from_metrics: bool,
                 request_tokens: int | None) -> None:
    for r in rows:
        for k in [k for k in r if k not in MEASURED_KEYS]:
            del r[k]
        rate = r["proposal_rate_metrics"] if rate_from_metrics and r["profile"] == "ngram" else None
        p = predict(d, r, rate, request_tokens)
        r.update(p)
        r.update(score(r))
        print(f"  tp{r['tp']} {r['drafter']:<15} b{r['batch']} measured {r['measured_speedup']:.2f}x  "
              + (f"refused: {p['refused']}" if "refused" in p else
                 f"predicted {p['predicted_speedup']:.2f}x {p['verdict']}"), flush=True)


def write_results(res: dict[str, Any], base: Path) -> None:
    table = markdown(res)
    print()
    print(table)
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    base.with_suffix(".md").write_text(table + "\n")
    print(f"results: {base}.json, {base}.md")


def rescore(path: Path, *, rate_from_metrics: bool, decode_phase: bool = False) -> int:
    """The commands again on a finished run's recorded logs (its work_dir): ``--summarize`` into
    fresh profiles and ``predict`` per row, the measurements kept as they were. For when the
    commands change; writes ``<results>_rescored_<stamp>.json/.md`` beside the run's."""
    res = json.loads(path.read_text())
    stamp = dt.datetime.now(dt.timezone.utc)
    commands = []
    for tp in sorted({r["tp"] for r in res["rows"]}):
        d = Path(res["work_dir"]) / f"tp{tp}"
        if not d.is_dir():
            raise SystemExit(f"bench_vllm_cli: {d}: the run's work directory is gone; rerun the benchmark")
        shutil.rmtree(d / "profiles", ignore_errors=True)
        for prof, name in (("draft", "draft_noisy"), ("ngram", "ngram")):
            if (d / f"hook_{name}").is_dir():
                commands.append({"tp": tp, **summarize(d, prof, ["hook_base", f"hook_{name}"])})
        predict_rows(d, [r for r in res["rows"] if r["tp"] == tp], rate_from_metrics=rate_from_metrics,
                     request_tokens=None if decode_phase else int(res["tokens"]))
    res.update({"summary": summary(res["rows"]), "commands": commands, "rescored": stamp.isoformat(timespec="minutes"),
                "proposal_rate": "from /metrics" if rate_from_metrics else "predict's default",
                "scored": "decode phase" if decode_phase else f"per request (predict --request-tokens {res['tokens']})"})
    write_results(res, path.with_name(f"{path.stem}_rescored_{stamp:%H%M}"))
    return targets_exit(res["summary"])


if __name__ == "__main__":
    sys.exit(main())
