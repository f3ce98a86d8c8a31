"""A profile from vLLM's own step clock: the ``Iteration(N): ...`` lines that
``--enable-logging-iteration-details`` makes the server print, one per engine step. Runs anywhere:
no vLLM, no torch.

The line (``vllm/v1/metrics/loggers.py:200``, identical in 0.32.0 CPU, 0.33.0 and 0.34.0)::

    [Engine 000: ]Iteration(N): C context requests, T context tokens, G generation requests,
    g generation tokens, iteration elapsed time: X ms[ (dummy)], <device> KV cache usage: U%[, encoder ...]

**What X times** (``vllm/v1/engine/core.py``, 0.32.0 line numbers; 0.33.0 +10, 0.34.0 +56):
``capture_iteration_details`` (core.py:578-623) takes ``time.monotonic()`` on entry and again
when its ``with`` block ends (core.py:622). In ``EngineCore.step`` (core.py:657) that block holds
only ``future.result()`` and, where ``execute_model`` deferred sampling, ``sample_tokens``
(core.py:671-676): the scheduler's ``schedule()`` before it, the ``execute_model`` submit
(core.py:668) and ``update_from_output`` after it are outside. So X is the host's wall time
from "the step was handed to the workers" to "its sampled tokens (and the next proposal) are
back", on the engine core's host clock -- not a GPU span:

* **multiprocess executor** (``mp``: every TP > 1 run, or ``--distributed-executor-backend mp``):
  ``execute_model(non_block=True)`` returns a future at once, so X holds the target forward,
  sampling / rejection, the drafter's proposal (vLLM proposes inside ``sample_tokens``:
  ``gpu_model_runner.py`` 0.32.0:4362-4489) and the message round trip.
* **uniprocess executor** (``uni``, the default at TP 1, ``config/parallel.py:1079-1080``):
  ``UniProcExecutor.collective_rpc`` runs the worker's ``execute_model`` *synchronously* before
  returning a finished future (``v1/executor/uniproc_executor.py:108-115``). On a GPU the
  forward's kernels are only launched by then, so X holds what of them is still running plus
  sampling and the proposal (the launch's host time is outside X); on the CPU the forward has
  *finished* before X starts, so X holds sampling and the proposal only: a CPU run at TP 1 under
  ``uni`` gives no forward cost, and its engine-log profile is refused (one line).
  ``specmodel vllm --no-hook`` adds ``--distributed-executor-backend mp`` at TP 1 for this reason
  (unless the user chose an executor); with the hook on the user's executor is left alone.
* **async scheduling** (``step_with_batch_queue``, core.py:698-789; on by default on GPUs, forced
  off on the CPU platform, ``platforms/cpu.py:331``): step N+1 is scheduled and launched before
  the engine blocks on step N's output (core.py:770), so X is the part of step N's device work
  still outstanding once N+1 was launched: below the GPU's step by the host work that overlapped
  it. In steady state, GPU-bound, the GPU step ≈ X + the host time between two waits.

In every case X leaves out the engine core's host work around the wait (``schedule()``,
``update_from_output``, output processing), which the hook's rows carry in ``other_s`` as the
gap before a step; the engine log's timestamps are whole seconds, so that gap cannot be read from
it. :func:`host_gap_s` recovers each server's mean per request-step from its kept ``/metrics``
page and :func:`with_gap` adds it to the generation rows' ``other_s``; without the page the rows
are lower bounds. :func:`agreement` says per row how far they are from the hook's.

**Rows** (:func:`engine_rows`; one row per (kind, batch, tokens) cell, its median X, cells seen
fewer than ``min_samples`` times left out like the hook's):

* C = 0, g = G: ``decode`` at batch G (the server without speculation), or a speculative server's
  step in which no request proposed (a host proposer's miss: ``host_proposer.decode``);
* C = 0, g > G: ``verify`` at batch G, tokens g. A forward drafter proposes k for every request
  (g = G·(k+1)); ``ngram`` / ``suffix`` propose per request, fewer or none where the lookup found
  no match, so their verify rows sit at the tokens actually scheduled (G < g ≤ G·(k+1)) and the
  share of drafted tokens, (g − G)/(k·G) summed over steps, is the proposal rate's estimate (a
  request that proposed fewer than k counts as a fraction of one);
* C > 0, G = 0: ``extend`` (prefill) at batch C, tokens T;
* C > 0, G > 0: a mixed step (chunked prefill beside decodes): the log gives one time for both,
  with no split, so it is counted and left out.
* ``(dummy)`` lines (a data-parallel padding step) are left out.

**What the rows cannot give**: the all-reduce share (``allreduce_s`` 0 with the profile's
``allreduce`` origin "unknown" at TP > 1), the split of a speculative step into draft and verify
(the verify row is the whole cycle: its ``compute_s`` holds forward + proposal + sampling, the
profile has no draft rows and its ``draft`` origin says the draft is inside the verify row, so
:func:`specmodel.model.cyclecost.cycle_costs` prices T_cycle = T_verify row without adding a
drafter a second time), the context per request (rows at context 0), and the host gap named above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmodel.engines.vllm.enginerun import (
    CLOCK,
    EXECUTOR_FLAG,
    SERVER_LOG,
    EngineRun,
    Iteration,
    engine_version,
    model_of,
)
from specmodel.errors import SpecmodelError
from specmodel.stats import median


@dataclass(frozen=True, kw_only=True)
class Cells:
    """The steps of one server sorted into (kind, batch, tokens) cells of elapsed seconds."""

    cells: dict[tuple[str, int, int], list[float]]
    #: decode-shaped steps of a speculative server (no request proposed)
    misses: dict[tuple[str, int, int], list[float]]
    mixed: int
    dummy: int
    #: Σ(g − G) and Σ G over the speculative server's generation-only steps (the proposal rate's estimate)
    drafted_tokens: int
    request_steps: int


def sort_steps(iters: Sequence[Iteration], *, speculative: bool) -> Cells:
    """Each step to its cell (rules in the module docstring)."""
    cells: dict[tuple[str, int, int], list[float]] = {}
    misses: dict[tuple[str, int, int], list[float]] = {}
    mixed = dummy = drafted = req_steps = 0
    for it in iters:
        if it.dummy:
            dummy += 1
            continue
        c, g_req, g_tok = it.ctx_requests, it.gen_requests, it.gen_tokens
        if c and g_req:
            mixed += 1
            continue
        if c:
            cells.setdefault(("extend", c, it.ctx_tokens), []).append(it.elapsed_s)
            continue
        if not g_req:
            continue
        if speculative:
            drafted += g_tok - g_req
            req_steps += g_req
            if g_tok == g_req:
                misses.setdefault(("decode", g_req, g_tok), []).append(it.elapsed_s)
            else:
                cells.setdefault(("verify", g_req, g_tok), []).append(it.elapsed_s)
        elif g_tok == g_req:
            cells.setdefault(("decode", g_req, g_tok), []).append(it.elapsed_s)
        else:
            raise SpecmodelError(f"step {it.index}: {g_tok} generation tokens for {g_req} requests on a server "
                                 "without speculation (engine_run.json says no --speculative-config)")
    return Cells(cells=cells, misses=misses, mixed=mixed, dummy=dummy, drafted_tokens=drafted,
                 request_steps=req_steps)


def engine_rows(cells: dict[tuple[str, int, int], list[float]], *, min_samples: int) -> tuple[list[Any], list[str]]:
    """One :class:`~specmodel.schema.profile.CostRow` per cell seen ``min_samples`` times (a kind
    none of whose cells reaches it is kept whole, as in the hook's summary): ``total_s`` =
    ``compute_s`` = the median X, ``allreduce_s`` 0 (unknown: the profile's origins say so),
    ``other_s`` 0 (the host work inside X is not split out; :func:`with_gap` adds the gap outside
    it). Returns (rows, dropped cell names)."""
    from specmodel.schema.costrows import CostRow

    rows, dropped = [], []
    kinds_ok = {k for (k, _, _), v in cells.items() if len(v) >= min_samples}
    for (kind, b, t), v in sorted(cells.items()):
        if len(v) < min_samples and kind in kinds_ok:
            dropped.append(f"{kind} b{b} t{t} ({len(v)})")
            continue
        m = median(v)
        if m <= 0:
            continue
        rows.append(CostRow(kind=kind, batch=b, tokens=t, total_s=m, allreduce_s=0.0, compute_s=m, other_s=0.0,
                            samples=len(v), spread_s=max(v) - min(v)))
    return rows, dropped


# --------------------------------------------------------------------------- beside the hook


def agreement(engine: Sequence[Any], hook: Sequence[Any]) -> list[tuple[Any, Any, float]]:
    """Per engine-log row, the hook's row of the same (kind, batch, tokens) (the one with most
    samples over its context bands) and (engine − hook) / hook of ``total_s``."""
    best: dict[tuple[str, int, int], Any] = {}
    for r in hook:
        key = (r.kind, r.batch, r.tokens)
        if key not in best or r.samples > best[key].samples:
            best[key] = r
    out = []
    for e in engine:
        h = best.get((e.kind, e.batch, e.tokens))
        if h is not None:
            out.append((e, h, (e.total_s - h.total_s) / h.total_s))
    return out


def agreement_note(pairs: Sequence[tuple[Any, Any, float]], n_engine_rows: int) -> str:
    from specmodel.units import ms

    if not pairs:
        return (f"engine log ({CLOCK}): {n_engine_rows} row(s), none on a (kind, batch, tokens) the hook's rows have")
    parts = [f"{e.kind} b{e.batch} t{e.tokens}: {ms(e.total_s, 2)} vs {ms(h.total_s, 2)} ({d:+.0%})"
             for e, h, d in pairs]
    worst = max(abs(d) for _, _, d in pairs)
    return (f"engine log vs hook, same steps (clock {CLOCK}: the engine core's host wait for the step's output, "
            "plus the server's mean host gap from /metrics where kept; hook: the step with its host work and the gap "
            "before it): "
            + "; ".join(parts) + f"; largest difference {worst:.0%}")


# --------------------------------------------------------------------------- the host gap

#: vLLM's per-request decode phase (first token to finish, seconds), summed over requests
DECODE_TIME = "vllm:request_decode_time_seconds"


def host_gap_s(runs: Sequence[EngineRun]) -> tuple[float | None, int]:
    """(the mean host time per request-step outside X, the request-steps it is over) of these
    servers, from their kept ``/metrics`` page; (None, 0) where a page or the series is missing.

    Every request in a generation step waits that step's whole period, X + gap, so over a run
    Σ_requests decode_time = Σ_steps G·(X + gap): gap = (Σ decode_time − Σ G·X) / Σ G (the steps
    with G > 0, mixed ones included: their decoding requests wait for them too). A mean weighted
    by G, so large batches weigh more; vLLM's decode time is taken at the front end, so its
    output processing is in it as it is in a client's wait."""
    from specmodel.engines.hook.records import METRICS_FILE
    from specmodel.engines.prom import parse_page, total
    from specmodel.io import read_bytes
    from specmodel.limits import MAX_METRICS_PAGE_BYTES

    dec = sx = 0.0
    n = 0
    for r in runs:
        page_path = Path(r.dir) / METRICS_FILE
        if not page_path.exists():
            return None, 0
        body = read_bytes(page_path, "a /metrics page", max_bytes=MAX_METRICS_PAGE_BYTES, decompress=False)
        v = total(parse_page(body.decode("utf-8", errors="replace"), str(page_path)), f"{DECODE_TIME}_sum")
        if v is None:
            return None, 0
        dec += float(v)
        gen = [it for it in r.iterations if it.gen_requests and not it.dummy]
        sx += sum(it.gen_requests * it.elapsed_s for it in gen)
        n += sum(it.gen_requests for it in gen)
    if n == 0:
        return None, 0
    return max(dec - sx, 0.0) / n, n


def with_gap(rows: Sequence[Any], gap_s: float | None) -> list[Any]:
    """Each generation row with the host gap in ``other_s`` (and ``total_s``); unchanged where unknown."""
    import dataclasses

    if not gap_s:
        return list(rows)
    return [dataclasses.replace(r, other_s=r.other_s + gap_s, total_s=r.total_s + gap_s) for r in rows]


# --------------------------------------------------------------------------- the profile

#: the profile's origins for what the engine log cannot split (module docstring)
DRAFT_IN_VERIFY = ("inside the verify row: the engine log times a speculative step whole (verify forward, "
                   "sampling, the drafter's proposal), so T_cycle = that row with no draft added")
OVERHEAD_IN_STEP = "inside each engine step (the proposal runs within the step the engine log timed)"
ALLREDUCE_UNKNOWN = "unknown: the engine log times whole steps (no all-reduce split)"


def summarize_engine_log(runs: Sequence[EngineRun], *, name: str, tp: int | None = None,
                         min_samples: int = 5, hook_rows: Sequence[Any] = ()) -> Any:
    """A :class:`~specmodel.schema.profile.Profile` from the engine log alone (rows and what they
    leave unknown: module docstring). ``runs``: the baseline server's (no speculation) and one
    speculative server's. ``hook_rows``: the hook's rows of the same runs, when it ran, for the
    per-row agreement note."""
    from specmodel.schema.costrows import HostProposer, SpecConfig
    from specmodel.schema.phases import is_host_proposer
    from specmodel.schema.profile import Profile
    from specmodel.schema.source import Source

    where = ", ".join(r.dir for r in runs)
    outside = next((r for r in runs if r.forward_outside), None)
    if outside is not None:
        raise SpecmodelError(f"{Path(outside.dir) / SERVER_LOG}: a CPU server at TP 1 under the uni executor: its "
                             "forward ends before vLLM's step timer starts (v1/executor/uniproc_executor.py:108-115), "
                             f"so its steps hold no forward cost; rerun with {EXECUTOR_FLAG} mp")
    tps = {r.tp for r in runs}
    if len(tps) > 1:
        raise SpecmodelError(f"{where}: the runs' commands have different TP degrees ({sorted(tps)}); one box, one TP")
    tp_val = tp if tp is not None else next(iter(tps))
    if tp is not None and tps != {tp}:
        raise SpecmodelError(f"{where}: the server commands ran TP {next(iter(tps))}, not {tp}")
    specs = {(r.method, r.k) for r in runs if r.method}
    if len(specs) > 1:
        raise SpecmodelError(f"{where}: the runs mix speculative configurations ({sorted(map(str, specs))}); "
                             "summarize one at a time")
    base_runs = [r for r in runs if not r.method]
    if not base_runs:
        raise SpecmodelError(f"{where}: no server without --speculative-config among the runs; a profile needs "
                             "the baseline's decode steps")
    base_cells: dict[tuple[str, int, int], list[float]] = {}
    spec_cells: dict[tuple[str, int, int], list[float]] = {}
    spec_prefill: dict[tuple[str, int, int], list[float]] = {}
    misses: dict[tuple[str, int, int], list[float]] = {}
    mixed = dummy = drafted = req_steps = 0
    for r in runs:
        c = sort_steps(r.iterations, speculative=bool(r.method))
        into = spec_cells if r.method else base_cells
        for key, v in c.cells.items():
            if r.method and key[0] == "extend":
                # the speculative server's prefill (its drafter's over the prompt too): the request's, not a cycle's
                spec_prefill.setdefault(key, []).extend(v)
                continue
            into.setdefault(key, []).extend(v)
        for key, v in c.misses.items():
            misses.setdefault(key, []).extend(v)
        mixed, dummy = mixed + c.mixed, dummy + c.dummy
        drafted, req_steps = drafted + c.drafted_tokens, req_steps + c.request_steps
    if not any(k[0] == "decode" for k in base_cells):
        raise SpecmodelError(f"{where}: the baseline server's log holds no decode step (did it serve a request?)")
    rows, dropped = engine_rows(base_cells, min_samples=min_samples)
    vrows, vdropped = engine_rows(spec_cells, min_samples=min_samples)
    mrows, _ = engine_rows(misses, min_samples=min_samples)
    # each server's host gap (its own: speculation changes the engine core's host work) into its generation rows
    gap_base, n_base = host_gap_s([r for r in runs if not r.method])
    gap_spec, n_spec = host_gap_s([r for r in runs if r.method]) if any(r.method for r in runs) else (None, 0)
    rows = [*with_gap([r for r in rows if r.kind == "decode"], gap_base), *(r for r in rows if r.kind != "decode")]
    vrows, mrows = with_gap(vrows, gap_spec), with_gap(mrows, gap_spec)
    rows += vrows
    dropped += vdropped
    method, k = next(iter(specs)) if specs else (None, None)
    spec = SpecConfig(algorithm=method.upper(), steps=k, topk=1, num_draft_tokens=k + 1) if method and k else SpecConfig()
    host = bool(method and is_host_proposer(method))
    hp = None
    if host and method and k and req_steps:
        # proposing request-steps, estimated as drafted tokens / k (whole ones: the profile stores the
        # rate as their share, schema/profile.HostProposer)
        proposed = min(round(drafted / k), req_steps)
        hp = HostProposer(method=method, proposal_rate=proposed / req_steps, request_steps=req_steps,
                          proposed_request_steps=proposed, lookup_s=0.0, lookup_steps=0, decode=tuple(mrows))
    from specmodel.units import ms

    def gap_txt(g: float | None, n: int, who: str) -> str:
        return (f"{who} {ms(g, 3)} over {n} request-steps" if g is not None else
                f"{who} not recovered (no {DECODE_TIME} in its metrics.prom): its rows are lower bounds")

    notes = [f"rows from vLLM's own step log (clock {CLOCK}: `iteration elapsed time`, the engine core's host wait "
             "from handing a step to the workers to its sampled tokens, v1/engine/core.py:578-623); every row is a "
             "whole engine step: its compute_s holds forward, sampling and the proposal; allreduce_s is not split "
             "(0); rows are at context 0 (the log gives no context per request).",
             "other_s of the decode/verify rows: the engine core's host gap around each step (scheduling, output "
             "processing: outside X), each server's mean per request-step from its /metrics (Σ decode time − Σ G·X) "
             "/ Σ G: " + gap_txt(gap_base, n_base, "baseline") + "; "
             + (gap_txt(gap_spec, n_spec, "speculative") if any(r.method for r in runs) else "no speculative server")
             + "; extend rows carry none."]
    if method and not host:
        notes.append(f"{method}: no draft rows; each verify row is the whole cycle (draft inside it): the model "
                     "adds no drafter to it, and the draft/verify split is unknown.")
    if hp is not None:
        notes.append(f"host proposer ({method}): proposal rate {hp.proposal_rate:.0%} estimated from the scheduled "
                     f"tokens ((g − G)/(k·G) over {req_steps} request-steps: a request that proposed fewer than "
                     f"{k} counts as part of one); the lookup is inside each step (overhead 0); {len(mrows)} "
                     "no-proposal decode row(s) of the speculative server.")
    if mixed or dummy:
        notes.append(f"{mixed} mixed step(s) (prefill beside decodes: one time for both) and {dummy} dummy step(s) "
                     "left out.")
    if dropped:
        notes.append(f"{len(dropped)} cell(s) seen fewer than {min_samples} times left out (ramp steps): "
                     + ", ".join(dropped[:8]) + (" …" if len(dropped) > 8 else ""))
    requests, req_note = _requests(runs, base_cells, spec_prefill, min_samples=min_samples)
    notes.append(req_note)
    if hook_rows:
        notes.append(agreement_note(agreement(rows, hook_rows), len(rows)))
    if not any(r.hook for r in runs):
        notes.append("hook-free run (no specmodel code in the server): no all-reduce split, no draft/verify split, "
                     "no context per row, no box-condition probe.")
    versions = sorted({v for v in (engine_version(r) for r in runs) if v})
    origins = {"overhead": OVERHEAD_IN_STEP}
    if method and not host:
        origins["draft"] = DRAFT_IN_VERIFY
    if tp_val > 1:
        origins["allreduce"] = ALLREDUCE_UNKNOWN
    source = Source.hook_summary(engine="vllm", engine_version=", ".join(versions),
                                 files=tuple(str(Path(r.dir) / SERVER_LOG) for r in runs), clock=CLOCK,
                                 description=f"vLLM engine step log ({CLOCK}): "
                                             f"{sum(len(r.iterations) for r in runs)} steps from {len(runs)} "
                                             f"server run(s), TP {tp_val}").with_origins(origins)
    model_path = next((m for m in (model_of(r.command) for r in runs) if m), None)
    model = {"name": model_path, "path": model_path} if model_path else {}
    return Profile(name=name, source=source, tp=tp_val, costs=tuple(rows), spec=spec, overhead_s=0.0,
                   model=model, notes=tuple(notes), host_proposer=hp, requests=requests)


def _requests(runs: Sequence[EngineRun], base_cells: dict[tuple[str, int, int], list[float]],
              spec_prefill: dict[tuple[str, int, int], list[float]], *, min_samples: int) -> tuple[Any, str]:
    """The profile's ``requests`` from the engine log: the prompt length of the baseline's
    prefill-only steps, the speculative server's own prefill rows, and each server's time per
    request outside the engine's steps from its kept ``metrics.prom`` (as the hook's summary does:
    :func:`specmodel.engines.vllm.hooklog.outside_per_request`)."""
    from specmodel.engines.hook.records import METRICS_FILE
    from specmodel.engines.vllm.hooklog import outside_per_request
    from specmodel.schema.costrows import RequestCosts, prompt_tokens_of

    steps = [(b, t, len(v)) for (k, b, t), v in base_cells.items() if k == "extend"]
    steps = steps or [(b, t, len(v)) for (_, b, t), v in spec_prefill.items()]
    if not steps:
        return None, "requests: not recorded (no prefill-only step in the engine logs)"
    prompt = max(1, prompt_tokens_of(steps))
    rows, _ = engine_rows(spec_prefill, min_samples=min_samples)
    outside: dict[bool, tuple[float | None, int]] = {}
    for spec in (False, True):
        tot, n_all = 0.0, 0
        for r in runs:
            page = Path(r.dir) / METRICS_FILE
            if bool(r.method) == spec and page.exists():
                sec, n = outside_per_request(page)
                if sec is not None:
                    tot, n_all = tot + sec * n, n_all + n
        outside[spec] = (tot / n_all, n_all) if n_all else (None, 0)
    req = RequestCosts(prompt_tokens=prompt, spec_prefill=tuple(rows), baseline_outside_s=outside[False][0],
                       spec_outside_s=outside[True][0], baseline_requests=outside[False][1],
                       spec_requests=outside[True][1])
    return req, (f"requests: prompt {prompt} tokens; {len(rows)} prefill row(s) of the speculative server "
                 "(engine log); time outside the engine's steps from each server's metrics.prom where kept")

