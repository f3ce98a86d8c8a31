"""What the vLLM hook (:mod:`specmodel.engines.vllm.hook`) wrote -- one ``specmodel.vllm_step``
JSONL file per rank, read by :mod:`specmodel.engines.vllm.steplog` and sorted into cells by
:mod:`specmodel.engines.vllm.steprows` -- turned into a profile: :func:`summarize`, its notes, the
request costs from the kept ``/metrics`` pages. Runs anywhere: no vLLM, no torch.

What a vLLM profile row means (the cycle model's T_base and T_cycle must both carry what the
engine does around a forward, or a small model's host overhead -- a large share of its step --
would make every drafter look better than it is):

* ``decode`` / ``verify`` / ``extend`` rows are engine steps without the drafter: ``total_s`` =
  median over steps (every rank) of forward + the step's host work (``overhead_s``: input
  preparation, sampling / rejection, bookkeeping) + the gap before the step (the engine core's
  scheduling and output processing); ``allreduce_s`` = the all-reduces timed inside the forward,
  ``compute_s`` = the rest of the forward, ``other_s`` = the host part.
* ``draft_extend`` / ``draft`` rows (drafters that run a forward: ``draft_model``, EAGLE, ...):
  vLLM's proposer runs its first forward over the verified tokens (B·(k+1)) and the other k − 1
  over one token per request. Where the hook split the proposal (``draft_first_s``, V1), the
  first forward with the proposal's set-up is a ``draft_extend`` row at the step's tokens and each
  later one a ``draft`` row at B tokens: (draft_s − draft_first_s)/(k − 1). Older logs (and V2)
  carry only the whole proposal: one ``draft`` row = draft_s / k, every forward the mean.
* host-side drafters (``ngram``): no draft row; the median lookup time over *every* step that ran
  the lookup (a miss costs one too) is the profile's ``overhead_s`` and ``host_proposer.lookup_s``;
  the share of request-steps that proposed is ``host_proposer.proposal_rate``; the speculative
  server's own decode-shaped steps (no request proposed) are ``host_proposer.decode`` rows.

Each server's steps stay apart: ``decode`` / ``extend`` rows come from steps without speculation
(``draft_method`` null) only, ``verify`` and ``draft`` rows from the speculative server. Rows are
split by the steps' ``context_tokens`` into the context bands of
:data:`specmodel.model.accept.BAND_EDGES` (each row at its steps' median context).

What a request costs beside its decode steps (the profile's ``requests``): the prompt length
profiled, the speculative server's own prefill rows (its ``extend`` steps, the drafter's proposal
included) and, from each server's ``metrics.prom`` (its last ``/metrics`` page, kept by ``specmodel
vllm``), the time per finished request spent outside the engine's steps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from specmodel.engines.hook.records import METRICS_FILE
from specmodel.engines.vllm.steplog import read_step_log
from specmodel.engines.vllm.steprows import Cell, Recording, band_contexts, cost_rows, expected_allreduces
from specmodel.errors import FieldError, SpecmodelError, spell, verbatim
from specmodel.limits import MAX_CONTEXT_TOKENS, MAX_METRICS_PAGE_BYTES
from specmodel.schema.phases import is_host_proposer
from specmodel.stats import median
from specmodel.units import ms

COMMAND = "specmodel vllm"
MIN_SAMPLES = 5
#: vLLM's per-request histograms (seconds): arrival to finish, waiting for the scheduler, running
_E2E, _QUEUE, _INFER = ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                        "vllm:request_inference_time_seconds")


def _request_costs(base_prompts: list[tuple[int, int, int]], spec_prompts: list[tuple[int, int, int]],
                   spec_prefill_cells: dict[tuple[str, int, int, int], Cell], spec_dirs: dict[str, bool], *,
                   min_samples: int, n_ranks: int, tp: int) -> tuple[Any, str]:
    """The profile's ``requests`` (None when no prefill step was recorded) and its note."""
    from specmodel.schema.costrows import RequestCosts, prompt_tokens_of

    prompts = base_prompts or spec_prompts
    if not prompts:
        return None, "requests: not recorded (no prefill step in the logs)"
    prompt = min(prompt_tokens_of(prompts), MAX_CONTEXT_TOKENS)
    # its own context per band: the baseline's rows keep theirs, whatever this server recorded
    rows, _ = cost_rows(spec_prefill_cells, min_samples=min_samples, n_ranks=n_ranks, tp=tp, dropped=[],
                        few_kinds=[], band_ctx=band_contexts(spec_prefill_cells))
    outside: dict[bool, tuple[float | None, int]] = {}
    kept = False
    for spec in (False, True):
        sums: list[tuple[float, int]] = []
        for d in sorted(x for x, s in spec_dirs.items() if s == spec):
            page = os.path.join(d, METRICS_FILE)
            if not os.path.exists(page):
                continue
            kept = True
            sec, n = outside_per_request(page)
            if sec is not None:
                sums.append((sec * n, n))
        n_all = sum(n for _, n in sums)
        outside[spec] = (sum(t for t, _ in sums) / n_all, n_all) if n_all else (None, 0)
    (b_s, b_n), (s_s, s_n) = outside[False], outside[True]
    req = RequestCosts(prompt_tokens=prompt, spec_prefill=tuple(rows), baseline_outside_s=b_s, spec_outside_s=s_s,
                       baseline_requests=b_n, spec_requests=s_n)
    head = f"requests: prompt {prompt} tokens; {len(rows)} prefill row(s) of the speculative server"
    if not kept:
        return req, (f"{head}; time outside the engine's steps not recorded (no {METRICS_FILE}: rerun under this "
                     "specmodel's `vllm`)")

    def per(sec: float | None, n: int) -> str:
        return f"{ms(sec, 1)} over {n} request(s)" if sec is not None else "not recorded"

    return req, (f"{head}; outside the engine's steps per request: baseline {per(b_s, b_n)}, speculative "
                 f"{per(s_s, s_n)} (from /metrics)")


def outside_per_request(path: str | os.PathLike[str]) -> tuple[float | None, int]:
    """(seconds per finished request the server spent outside the engine's steps, finished
    requests) from a kept ``/metrics`` page: end-to-end latency less queue and inference time,
    summed over every label set (engines); (None, 0) when no request finished or a series is
    missing. A page that does not parse is one line naming the file."""
    from specmodel.engines.prom import parse_page, total
    from specmodel.io import read_bytes

    where = str(path)
    body = read_bytes(path, "a /metrics page", max_bytes=MAX_METRICS_PAGE_BYTES, decompress=False)
    page = parse_page(body.decode("utf-8", errors="replace"), where)
    count = total(page, f"{_E2E}_count")
    parts = [total(page, f"{name}_sum") for name in (_E2E, _QUEUE, _INFER)]
    if count is None or count < 1 or any(v is None for v in parts):
        return None, 0
    e2e, queue, infer = (float(v or 0.0) for v in parts)
    n = round(count)
    outside = max(e2e - queue - infer, 0.0) / n
    if outside > 1e3:
        raise SpecmodelError(f"{where}: {outside:.3g} s per request outside the engine's steps "
                             f"({_E2E} less queue and inference time): not a page of one run")
    return outside, n


def capture_note(caps: Sequence[Any], from_capture: Sequence[Any], in_capture: int) -> str:
    """The profile's note on the captures it read (:mod:`specmodel.engines.vllm.capture_ingest`)."""
    kinds = sorted({r.kind for r in from_capture})
    used = (f"{len(from_capture)} row(s) ({', '.join(kinds)}) take all-reduce = capture share × forward time "
            "(allreduce_source 'capture')") if from_capture else "no row needed it (the wrapper timed every row)"
    shares = "; ".join(f"{k[0]} b{k[1]} t{k[2]} {s:.1%}" for c in caps for k, s in c.shares[:6])
    fused = sorted({f"{impl} (with {what})" for c in caps for impl, what in c.fused})
    if fused:
        shares += (f"; fused all-reduce kernels counted as all-reduce, with the {'/'.join(sorted({w for c in caps for _, w in c.fused}))} "
                   f"inside their time: {', '.join(fused)}")
    return (f"torch.profiler capture ({', '.join(sorted({c.mode for c in caps}))}, {sum(len(c.files) for c in caps)} "
            f"trace(s)): all-reduce share per phase {shares}; {used}; {in_capture} step record(s) inside the capture "
            "window left out of the rows (the profiler stretches them).")




def _layers_said(a: Recording) -> str:
    t, d = sorted(a.layers.get("target", ())), sorted(a.layers.get("draft", ()))
    said = [f"target {', '.join(map(str, t))} layers (2 per layer + 1 = {2 * t[-1] + 1})"] if t else []
    if d:
        said.append(f"drafter {', '.join(map(str, d))} layers ({2 * d[-1] + 1})")
    return f" (model config: {'; '.join(said)})" if said else " (model config: not recorded)"


def _compilation_said(a: Recording) -> str:
    return f"engine compilation: {' | '.join(sorted(a.compilation))}" if a.compilation else \
        "engine compilation: not recorded (a log older than vllm_step v3)"


def allreduce_count_note(partial: Sequence[str], expect_fwd: int | None, expect_draft: int | None, a: Recording,
                         captured: bool) -> str:
    """The note on rows whose wrapper saw fewer all-reduces than a forward runs (partial rows)."""
    exp = f"{expect_fwd} per target forward" + (f", {expect_draft} per drafter forward" if expect_draft else "")
    return (f"{len(partial)} row(s) saw fewer all-reduces than a forward runs ({exp}: the most any forward showed"
            f"{_layers_said(a)}): {', '.join(partial[:8])}{' …' if len(partial) > 8 else ''}. The rest ran where "
            "the hook's wrapper cannot see them (vLLM's fused all-reduce + RMSNorm, fuse_allreduce_rms, or a graph "
            "replay), so their timed all-reduce is a partial sum: "
            + ("such rows take the capture's share where it held their phase, else their all-reduce is unknown"
               if captured else spell("their all-reduce is unknown, not the partial sum; `specmodel vllm "
                                      "{capture_steps} N` measures it from a torch.profiler capture"))
            + f"; {_compilation_said(a)}.")


def summarize(dirs: Sequence[str | os.PathLike[str]], *, name: str, tp: int | None = None,
              max_gap_s: float = 1.0, min_samples: int = MIN_SAMPLES, dp_rank: int | None = None) -> Any:
    """Aggregate rank logs into an "ingested" :class:`~specmodel.schema.profile.Profile`
    (see the module docstring for what the rows mean). Steps whose ``gap_s`` exceeds
    ``max_gap_s`` follow an idle engine: their gap is not scheduling and is left out of the host
    time. Several directories are combined: the baseline server's (``decode``, ``extend``) and the
    speculative server's (``verify``, ``draft``, a host proposer's rate, lookup and no-proposal
    steps). Logs of different TP degrees, models or vLLM versions, or a ``tp`` the logs contradict,
    are refused.

    A (kind, batch, tokens, context band) cell seen fewer than ``min_samples`` times (per rank) is
    left out: such cells are the ramp of a request wave (batch 3 on the way from 4 to 0), one step
    each, and a single slow one (a 78 ms step, measured) would otherwise become a cost row that the
    running-max cost surface carries to every larger batch. A kind is kept whole when none of its
    cells reaches the bound (a short run still yields a profile, with a note).

    Each process's file is its own series (one file per process since v2); a recording of several
    data-parallel replicas is summarized one replica at a time (``dp_rank``), a pipeline-parallel
    one is refused (:func:`specmodel.engines.hook.records.pick_replica`). A row's host part is on its
    steps' own clock: on a GPU (``step_clock`` cuda_event) the GPU's overhead and GPU gap, never a
    host span less GPU forwards."""
    from specmodel.engines.hook.probe import conditions_note, conditions_of
    from specmodel.engines.hook.records import check_one_server_kind, log_files, pick_replica
    from specmodel.engines.seams import missing_from_meta, seams_notes
    from specmodel.engines.vllm.capture_ingest import merged_shares, read_capture
    from specmodel.schema.costrows import HostProposer, SpecConfig
    from specmodel.schema.profile import Profile
    from specmodel.schema.source import Source

    files = log_files(dirs, COMMAND)
    logs = [read_step_log(f) for f in files]
    # each run directory's torch.profiler capture: its steps ran under the profiler (left out of the
    # rows); its shares price the all-reduce of the rows the wrapper did not see
    captures = {d: read_capture(d) for d in dict.fromkeys(str(os.path.dirname(lg.path)) for lg in logs)}
    where = ", ".join(str(d) for d in dirs)
    replica = pick_replica([(m, lg.path) for lg in logs for m, _ in lg.runs if m], dp_rank, where)
    a = Recording()
    for lg in logs:
        a.add_log(lg, replica=replica, captures=captures, max_gap_s=max_gap_s)
    check_one_server_kind(tp=tp, tp_sizes=a.tps, models=a.models, versions=a.versions, version_key="vllm_version",
                          engine="vLLM")
    if not (a.base_cells or a.spec_cells or a.nodraft_cells):
        raise SpecmodelError(f"{where}: no engine steps recorded (the logs hold only meta lines; did the server "
                             "serve a request under `specmodel vllm`?)")
    if not any(k[0] == "decode" for k in a.base_cells):
        raise FieldError(None, f"{verbatim(where)}: no decode steps recorded without speculation; a profile needs the "
                               "baseline step: also run the server without --speculative-config under `specmodel "
                               "vllm` and pass both directories to {summarize}")
    if len(a.step_spec) > 1:
        raise SpecmodelError(f"{where}: the logs mix speculative configurations "
                             f"({', '.join(f'{m} k={k}' for m, k in sorted(a.step_spec))}); summarize one at a time")
    ranks_per_run = max(len(v) for v in a.run_ranks.values()) if a.run_ranks else 1
    tp_val = tp if tp is not None else (next(iter(a.tps)) if a.tps else max(1, ranks_per_run))
    n_ranks = max(1, min(tp_val, ranks_per_run))
    dropped: list[str] = []
    few_kinds: list[str] = []
    draft_cells = {("draft", b, b, band): d for (b, band), d in a.drafts.items()}
    draft_cells.update({("draft_extend", b, t, band): d for (b, t, band), d in a.extends.items()})
    band_ctx = band_contexts(a.base_cells, a.spec_cells, a.nodraft_cells)
    caps = [c for c in captures.values() if c is not None]
    shares = merged_shares(caps)
    # all-reduces per forward, per model: a row whose wrapper saw fewer is partial (steprows.cost_rows)
    expect_fwd = expect_draft = None
    if tp_val > 1:
        expect_fwd = expected_allreduces(a.fwd_n_ar, max(a.layers.get("target", ()), default=None))
        expect_draft = expected_allreduces([n for d in draft_cells.values() for n in d.n_ar] + a.draft_n_ar,
                                           max(a.layers.get("draft", ()), default=None))
    partial: list[str] = []
    costs, no_ar_timed = cost_rows({**a.base_cells, **a.spec_cells}, min_samples=min_samples, n_ranks=n_ranks,
                                   tp=tp_val, dropped=dropped, few_kinds=few_kinds, band_ctx=band_ctx, shares=shares,
                                   capture_tp=tp_val, expected_n_ar=expect_fwd, partial=partial)
    nodraft, _ = cost_rows(dict(a.nodraft_cells), min_samples=min_samples, n_ranks=n_ranks, tp=tp_val,
                           dropped=dropped, few_kinds=[], band_ctx=band_ctx, shares=shares, capture_tp=tp_val,
                           expected_n_ar=expect_fwd, partial=partial)
    draft_rows, _ = cost_rows(draft_cells, min_samples=min_samples, n_ranks=n_ranks, tp=1, dropped=dropped,
                              few_kinds=few_kinds, band_ctx=band_ctx, shares=shares, capture_tp=tp_val,
                              expected_n_ar=expect_draft, partial=partial)
    costs += draft_rows
    requests, requests_note = _request_costs(a.base_prompts, a.spec_prompts, a.spec_prefill_cells, a.spec_dirs,
                                             min_samples=min_samples, n_ranks=n_ranks, tp=tp_val)
    # each directory is one server's recording (a speculative one if any of its steps speculated)
    conditions = conditions_of([p for d, ps in a.probes.items() if not a.spec_dirs[d] for p in ps],
                               [p for d, ps in a.probes.items() if a.spec_dirs[d] for p in ps])
    method, k = next(iter(a.step_spec)) if a.step_spec else (a.spec_meta.get("method"), a.spec_meta.get("num_speculative_tokens"))
    method = method if isinstance(method, str) else None
    k = k if isinstance(k, int) else None
    spec = SpecConfig(algorithm=str(method).upper(), steps=k, topk=1, num_draft_tokens=k + 1) if method and k else SpecConfig()
    host_method = method if method and is_host_proposer(method) else None
    overhead = median(a.lookups) if host_method and a.lookups else 0.0
    hp = None
    if host_method and a.request_steps:
        proposed = min(a.proposed, a.request_steps)
        hp = HostProposer(method=host_method, proposal_rate=proposed / a.request_steps, request_steps=a.request_steps,
                          proposed_request_steps=proposed, lookup_s=overhead, lookup_steps=len(a.lookups),
                          decode=tuple(nodraft))
    clock = "cuda_event" if a.clocks == {"cuda_event"} else "perf_counter"
    notes = ["vLLM rows are engine steps: forward (all-reduce split timed around vLLM's all-reduce) + the step's "
             "host work (sampling/rejection, bookkeeping, input prep, scheduling gap) in other_s; draft rows are "
             "one drafter forward (draft_extend: the first, over the verified tokens, with the proposal's set-up, "
             "where the hook split it; else proposal time / k). decode rows come from the server without "
             "speculation.",
             "rows are split by context band (0, 1K, 2K, 4K, ... tokens of KV per request), each at its steps' "
             "median context."]
    if hp is not None:
        notes.append(spell(f"host proposer ({verbatim(host_method)}): proposed on {hp.proposal_rate:.0%} of "
                           f"{hp.request_steps} request-steps that ran the lookup (the default {{proposal_rate}}); "
                           f"median lookup {ms(overhead, 3)} over {hp.lookup_steps} steps (every lookup, hit or "
                           f"miss) is the profile's overhead_s; {len(hp.decode)} no-proposal decode row(s) of the "
                           "speculative server in host_proposer.decode."))
    notes.append(requests_note)
    if conditions is not None:
        notes.append(conditions_note(conditions))
    if a.runners:
        notes.append(f"vLLM model runner: {', '.join(sorted(a.runners))}")
    if clock == "perf_counter":
        notes.append("Timed with perf_counter on the host (a CPU engine): not GPU figures.")
    if "cuda_event" in a.step_clocks:
        notes.append("GPU steps: other_s (the step's host work) is on the CUDA events' clock: the GPU's span of the "
                     "step less its forward and proposal, plus the GPU's gap since the previous step; the host's "
                     "span (host_step_s in the logs) is not used: under async scheduling it ends before the GPU's.")
    if "host_less_gpu" in a.step_clocks:
        notes.append("older GPU logs (vllm_step v1): other_s is the host's step less the GPU's forwards, two clocks; "
                     "under async scheduling the GPU's time past the host's step end is lost (clamped at 0): "
                     "re-record under this specmodel for the GPU's own overhead.")
    missing = missing_from_meta(a.metas, engine="vllm", version_key="vllm_version")
    notes.extend(seams_notes(missing))
    dropped_note = a.drops.note()
    if dropped_note:
        notes.append(dropped_note)
    if no_ar_timed:
        notes.append(f"{no_ar_timed} row(s) at TP {tp_val} timed no all-reduce (CUDA-graph replays bypass Python): "
                     "their all-reduce share is unknown, not zero"
                     + (" (the capture held no pass of their phase)." if caps else
                        spell("; `specmodel vllm {capture_steps} N` measures it from a torch.profiler capture.")))
    if partial:
        notes.append(allreduce_count_note(partial, expect_fwd, expect_draft, a, bool(caps)))
    elif tp_val > 1 and expect_fwd is not None:
        notes.append(f"all-reduces per forward: every forward the wrapper timed ran {expect_fwd} (target)"
                     + (f", {expect_draft} (drafter)" if expect_draft is not None else "")
                     + _layers_said(a) + "; " + _compilation_said(a))
    from_capture = [r for r in costs if r.allreduce_source == "capture"]
    if caps:
        notes.append(capture_note(caps, from_capture, a.in_capture))
    if dropped:
        notes.append(f"{len(dropped)} cell(s) seen fewer than {min_samples} times per rank left out (ramp steps): "
                     + ", ".join(sorted(dropped)[:8]) + (" …" if len(dropped) > 8 else ""))
    if few_kinds:
        notes.append(f"{', '.join(sorted(few_kinds))}: no cell seen {min_samples} times per rank; every cell kept "
                     "(a short run: costs rest on few steps)")
    n_runs = len(a.run_ranks)
    source = Source.hook_summary(engine="vllm", engine_version=", ".join(sorted(a.versions)),
                                 files=tuple(str(f) for f in files), clock=clock,
                                 description=f"vLLM step hook (hook): {a.n_steps} steps from {n_runs} server run(s), "
                                             f"{len(files)} rank file(s), TP {tp_val}")
    if partial and not from_capture:
        source = source.with_origins({"allreduce": "unknown for some rows: the hook's wrapper saw only part of their "
                                                   "all-reduces (a fused all-reduce or a graph replay bypasses it)"})
    elif no_ar_timed:
        source = source.with_origins({"allreduce": "unknown for some rows: CUDA-graph replays bypass the hook"})
    elif from_capture:
        source = source.with_origins({"allreduce": "capture share × forward time for the rows the hook's wrapper did "
                                                   "not see (torch.profiler capture)"})
    # the keys the model/device checks read (validation.profile_device, check_log_model_matches_profile):
    # vLLM logs the model as the --model value, which is what the hook recorded
    hardware: dict[str, Any] = {}
    if a.devices:
        hardware = {"gpu_name": sorted(a.devices)[0], "gpu_count": tp_val}
    elif a.cpu_names:
        hardware = {"cpu_name": sorted(a.cpu_names)[0]}
    model: dict[str, Any] = {}
    if a.models:
        path = next(iter(a.models))
        model = {"name": path, "path": path}
        if a.served:
            model["served_name"] = ", ".join(sorted(a.served))
    return Profile(name=name, source=source, tp=tp_val, costs=tuple(costs), spec=spec, overhead_s=overhead,
                   hardware=hardware, model=model, notes=tuple(notes), host_proposer=hp, requests=requests,
                   conditions=conditions, missing_seams=missing)
