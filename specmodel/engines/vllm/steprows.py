"""The vLLM hook summary's step cells and cost rows: :class:`Recording` sorts every step of every
rank file into (kind, batch, tokens, context band) cells -- the baseline server's, the speculative
server's, its prefill, its drafter forwards, a host proposer's lookups -- and :func:`cost_rows` turns
cells into :class:`~specmodel.schema.profile.CostRow` s (what a row means:
:mod:`specmodel.engines.vllm.hooklog`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from specmodel.engines.hook.records import Drops, dp_replica
from specmodel.engines.vllm.steplog import StepLog
from specmodel.schema.phases import VLLM_FORWARD_DRAFTERS, is_host_proposer
from specmodel.stats import iqr, median, series_median_ci95_rel


def context_band(context_tokens: float) -> int:
    """Index of the context band (:data:`specmodel.model.accept.BAND_EDGES`, the bands acceptance
    is split by) that holds ``context_tokens``."""
    from specmodel.model.accept import BAND_EDGES

    return max(i for i, lo in enumerate(BAND_EDGES) if context_tokens >= lo)


@dataclass
class Cell:
    """The samples of one (kind, batch, tokens, context band) cell, one entry per step."""

    total: list[float]
    ar: list[float]
    fwd: list[float]
    n_ar: list[float]
    ctx: list[float]


def new_cell() -> Cell:
    return Cell(total=[], ar=[], fwd=[], n_ar=[], ctx=[])


def band_contexts(*groups: dict[tuple[str, int, int, int], Cell]) -> dict[tuple[bool, int], int]:
    """One context per band, (is_prefill, band) -> the median context of every step in it: the rows of
    a band share it, so each band's token curve is one curve of the cost surface (a context per cell
    would make every cell its own curve, and a lookup between them an extrapolation)."""
    ctx: dict[tuple[bool, int], list[float]] = {}
    for cells in groups:
        for (kind, _b, _t, band), g in cells.items():
            ctx.setdefault((kind == "extend", band), []).extend(g.ctx)
    return {k: round(median(v)) for k, v in ctx.items() if v}


#: slack on a per-forward all-reduce count (a drafter row's count is a step's count / k)
_COUNT_SLACK = 1e-6


def expected_allreduces(samples: list[float], layers: int | None) -> int | None:
    """All-reduces one forward of a model runs, from what the engine showed: the most the wrapper
    saw in any forward (a large prefill runs eager and unfused: the wrapper sees every one there),
    raised to ``2 * layers + 1`` -- two per transformer layer (attention's and the MLP's
    row-parallel output) plus the vocab-parallel embedding's, vllm ``model_executor/layers/linear.py``
    ``RowParallelLinear`` / ``vocab_parallel_embedding.py`` -- when the model config is known and the
    wrapper never saw that many (then no forward was seen whole). None: nothing to go on."""
    seen = max(samples, default=0.0)
    want = 2 * layers + 1 if layers else 0
    best = max(seen, float(want))
    return round(best) if best > 0 else None


def cost_rows(cells: dict[tuple[str, int, int, int], Cell], *, min_samples: int, n_ranks: int, tp: int,
              dropped: list[str], few_kinds: list[str], band_ctx: dict[tuple[bool, int], int],
              shares: dict[tuple[str, int, int], float] | None = None, capture_tp: int = 1,
              expected_n_ar: int | None = None, partial: list[str] | None = None) -> tuple[list[Any], int]:
    """Cost rows of step cells ((kind, batch, tokens, band) -> samples); (rows, rows at TP ``tp`` > 1
    without a timed all-reduce). A row the wrapper timed no all-reduce of, at ``capture_tp`` > 1,
    takes its phase's capture share (:mod:`specmodel.engines.vllm.capture_ingest`) × its forward time.

    A row with a forward where the wrapper saw fewer than ``expected_n_ar`` all-reduces
    (:func:`expected_allreduces`) is *partial*: some all-reduces ran where the wrapper cannot see
    them (a fused all-reduce + RMSNorm, a graph replay), so its timed sum is low. It takes the
    capture's share like an unseen row, or its all-reduce is unknown (0, source ""); never
    ``wrapper``. Its label goes to ``partial``."""
    from specmodel.engines.vllm.capture_ingest import share_for_row
    from specmodel.schema.costrows import CostRow

    for kind in sorted({k[0] for k in cells}):
        keys = [c for c in cells if c[0] == kind]
        if all(len(cells[c].total) < min_samples * n_ranks for c in keys):
            few_kinds.append(kind)
            continue
        for c in keys:
            if len(cells[c].total) < min_samples * n_ranks:
                dropped.append(f"{kind} b{c[1]} t{c[2]} ({len(cells[c].total)})")
                del cells[c]
    rows = []
    no_ar = 0
    for (kind, b, t, _band), g in sorted(cells.items()):
        total = median(g.total)
        if total <= 0:
            continue
        ar = min(median(g.ar), total)
        short = expected_n_ar is not None and min(g.n_ar) < expected_n_ar - _COUNT_SLACK
        source = "wrapper" if max(g.n_ar) > 0 and not short else ""
        if short and max(g.n_ar) > 0:
            ar = 0.0  # a partial sum: unknown, unless the capture prices it
            if partial is not None:
                partial.append(f"{kind} b{b} t{t} ({min(g.n_ar):g} of {expected_n_ar})")
        share = share_for_row(shares, kind, b, t) if shares and capture_tp > 1 and not source else None
        if share:  # (a capture that found no all-reduce in a TP > 1 forward missed it: still unknown)
            ar, source = min(share * median(g.fwd), total), "capture"
        compute = min(max(median(g.fwd) - ar, 0.0), total - ar)
        if tp > 1 and not source and not (short and max(g.n_ar) > 0):  # (a partial row: its own note)
            no_ar += 1
        rows.append(CostRow(kind=kind, batch=b, tokens=t, total_s=total, allreduce_s=ar, compute_s=compute,
                            other_s=max(total - ar - compute, 0.0), n_allreduce=round(median(g.n_ar)),
                            spread_s=iqr(g.total), samples=len(g.total),
                            # steps in log order: the interval allows for the box's drift between them
                            ci95_rel=series_median_ci95_rel(g.total),
                            context_tokens=band_ctx.get((kind == "extend", _band), 0),
                            allreduce_source=source))
    return rows, no_ar


def _add_draft(r: dict[str, Any], k: int, ctx: float, drafts: dict[tuple[int, int], Cell],
               extends: dict[tuple[int, int, int], Cell]) -> None:
    """A verify step's proposal as drafter-forward samples: split at the first forward when the hook
    timed it (``draft_first_s``), else k forwards of the mean (see :mod:`specmodel.engines.vllm.hooklog`)."""
    total, ar = float(r["draft_s"]), float(r.get("draft_allreduce_s") or 0.0)
    n_ar = float(r.get("draft_n_allreduce") or 0)
    first = r.get("draft_first_s")
    band = context_band(ctx)
    if first is not None:
        f_ar = min(float(r.get("draft_first_allreduce_s") or 0.0), ar)
        f_n = min(float(r.get("draft_first_n_allreduce") or 0), n_ar)
        e = extends.setdefault((r["batch"], r["tokens"], band), new_cell())
        e.total.append(float(first))
        e.ar.append(f_ar)
        e.fwd.append(float(first))
        e.n_ar.append(f_n)
        e.ctx.append(ctx)
        if k == 1:
            return
        total, ar, n_ar, k = max(total - float(first), 0.0), max(ar - f_ar, 0.0), max(n_ar - f_n, 0.0), k - 1
    d = drafts.setdefault((r["batch"], band), new_cell())
    d.total.append(total / k)
    d.ar.append(ar / k)
    d.fwd.append(total / k)
    d.n_ar.append(n_ar / k)
    d.ctx.append(ctx)


@dataclass(kw_only=True)
class Recording:
    """What the summary (:func:`specmodel.engines.vllm.hooklog.summarize`) gathers from every step of
    every rank file before it builds a row (filled by :meth:`add_log`, then read once)."""

    base_cells: dict[tuple[str, int, int, int], Cell] = field(default_factory=dict)
    spec_cells: dict[tuple[str, int, int, int], Cell] = field(default_factory=dict)
    nodraft_cells: dict[tuple[str, int, int, int], Cell] = field(default_factory=dict)  # a host proposer's decode-shaped steps
    drafts: dict[tuple[int, int], Cell] = field(default_factory=dict)
    extends: dict[tuple[int, int, int], Cell] = field(default_factory=dict)  # (batch, tokens, band): first drafter forwards
    spec_prefill_cells: dict[tuple[str, int, int, int], Cell] = field(default_factory=dict)  # the speculative server's extend steps
    base_prompts: list[tuple[int, int, int]] = field(default_factory=list)  # (batch, tokens, 1) of the extend steps, each server apart
    spec_prompts: list[tuple[int, int, int]] = field(default_factory=list)
    spec_dirs: dict[str, bool] = field(default_factory=dict)  # --summarize directory -> whether its server speculates
    lookups: list[float] = field(default_factory=list)
    request_steps: int = 0
    proposed: int = 0
    versions: dict[str, str] = field(default_factory=dict)
    tps: dict[int, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    served: set[str] = field(default_factory=set)
    runners: set[str] = field(default_factory=set)
    clocks: set[str] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    cpu_names: set[str] = field(default_factory=set)
    spec_meta: dict[str, Any] = field(default_factory=dict)
    run_ranks: dict[tuple[str, int, int], set[str]] = field(default_factory=dict)  # (directory, DP replica, segment) -> ranks
    n_steps: int = 0
    step_spec: set[tuple[str, int]] = field(default_factory=set)  # (method, k) of the speculative steps: what actually ran
    probes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # --summarize directory -> its servers' probes
    step_clocks: set[str] = field(default_factory=set)  # "cuda_event" / "perf_counter" (v2), "host_less_gpu" (a v1 GPU step)
    drops: Drops = field(default_factory=lambda: Drops("step"))  # steps the hook dropped (its queue of GPU records full)
    in_capture: int = 0  # steps run under the torch.profiler capture: left out of the rows
    metas: list[dict[str, Any]] = field(default_factory=list)  # the meta lines read (their seams_missing)
    layers: dict[str, set[int]] = field(default_factory=dict)  # "target" / "draft" -> num_hidden_layers in the meta lines
    compilation: set[str] = field(default_factory=set)  # the engines' compilation settings, as the notes say them
    fwd_n_ar: list[float] = field(default_factory=list)  # all-reduces the wrapper saw in each target forward
    draft_n_ar: list[float] = field(default_factory=list)  # ... in each drafter forward over a prompt (V1's split)

    def add_log(self, lg: StepLog, *, replica: int | None, captures: dict[str, Any], max_gap_s: float) -> None:
        run_dir = str(os.path.dirname(lg.path))
        self.spec_dirs.setdefault(run_dir, False)
        if replica is None or all(dp_replica(m) == replica for m, _ in lg.runs):
            self.probes.setdefault(run_dir, []).extend(lg.probes)
        for seg, (m, steps) in enumerate(lg.runs):
            if replica is not None and dp_replica(m) != replica:
                continue  # another DP replica: another engine
            self.drops.add_run(m, steps, "kind")
            if m:
                self.metas.append(m)
                self.versions.setdefault(str(m.get("vllm_version")), lg.path)
                self.clocks.add(str(m.get("clock") or "perf_counter"))
                if m.get("tp_size") is not None:
                    self.tps.setdefault(m["tp_size"], lg.path)
                if m.get("model_path"):
                    self.models.setdefault(str(m["model_path"]), lg.path)
                if m.get("served_model_name"):
                    self.served.add(str(m["served_model_name"]))
                if m.get("model_runner"):
                    changed = m.get("model_runner_changed")
                    self.runners.add(str(m["model_runner"]) + (f" (chosen by specmodel: {changed})" if changed else
                                                          " (vLLM's choice)"))
                if m.get("device_name"):
                    self.devices.add(str(m["device_name"]))
                if str(m.get("device") or "").startswith("cpu"):
                    self.cpu_names.add(str(m.get("cpu_name") or "CPU"))
                layers = m.get("num_hidden_layers")
                for role, n in (layers.items() if isinstance(layers, dict) else ()):
                    if isinstance(n, int):
                        self.layers.setdefault(role, set()).add(n)
                comp = m.get("compilation")
                if isinstance(comp, dict):
                    self.compilation.add(", ".join(f"{k} {v}" for k, v in comp.items() if v is not None) or "none recorded")
                if isinstance(m.get("spec"), dict) and not self.spec_meta:
                    self.spec_meta = m["spec"]
            self.run_ranks.setdefault((run_dir, dp_replica(m), seg), set()).add(str(m.get("rank", lg.path)))
            self.n_steps += len(steps)
            cap = captures.get(run_dir)
            for r in steps:
                if cap is not None and cap.holds(r):
                    self.in_capture += 1
                    continue
                self._add_step(r, m, run_dir, max_gap_s)

    def _add_step(self, r: dict[str, Any], m: dict[str, Any], run_dir: str, max_gap_s: float) -> None:
        """One step into its cell: the baseline's, the speculative server's, its prefill or drafts."""
        method, k = r.get("draft_method"), r.get("draft_k")
        speculative = method is not None
        if speculative:
            self.spec_dirs[run_dir] = True
        if speculative and k:  # (k = 0: a step that drafted nothing, V2's skip_drafts)
            self.step_spec.add((str(method), int(k)))
        if r.get("forward_s") is None:
            return  # the forward was not seen (a step that ran no model)
        self.fwd_n_ar.append(float(r.get("forward_n_allreduce") or 0))
        # the host part on the step's own clock: a GPU step's overhead and gap are the GPU's
        on_gpu = r.get("step_clock") == "cuda_event"
        self.step_clocks.add(str(r.get("step_clock") or
                                 ("host_less_gpu" if m.get("clock") == "cuda_event" else "perf_counter")))
        gap = r.get("gpu_gap_s") if on_gpu else r.get("gap_s")
        # the gap before a prefill is mostly the engine waiting for the request (queue time on
        # /metrics), not scheduling: a prefill step's cost is its own time
        host = float(r["overhead_s"]) + (float(gap) if gap is not None and gap <= max_gap_s
                                         and r["kind"] != "extend" else 0.0)
        ctx = float(r.get("context_tokens") or 0.0)
        host_prop = speculative and is_host_proposer(str(method))
        spec_tokens = int(r.get("spec_tokens") or 0)
        if speculative and r.get("draft_s") is not None:
            if host_prop and r["kind"] in ("decode", "verify"):
                self.lookups.append(float(r["draft_s"]))  # every lookup: a miss costs one too
            self.request_steps += r["batch"]
            if spec_tokens:
                # a proposing request brings 1..k drafts; at least ceil(spec / k) of them proposed
                self.proposed += min(r["batch"], -(-spec_tokens // k) if k else r["batch"])
        if not speculative:
            cells = self.base_cells if r["kind"] != "verify" else self.spec_cells
        elif r["kind"] == "verify":
            cells = self.spec_cells
        elif r["kind"] == "decode" and host_prop:
            cells = self.nodraft_cells
        elif r["kind"] == "extend":
            # the speculative server's prefill: requests.spec_prefill, never the baseline's rows.
            # The proposal after it (draft_s) is the drafter over the prompt -- a forward drafter's
            # prefill and first k drafts, an ngram's lookup -- so it is part of this step's cost
            self.spec_prompts.append((r["batch"], r["tokens"], 1))
            if r.get("draft_first_n_allreduce") is not None:  # the drafter's forward over the prompt: eager, unfused
                self.draft_n_ar.append(float(r["draft_first_n_allreduce"]))
            d_s = float(r.get("draft_s") or 0.0)
            g = self.spec_prefill_cells.setdefault(("extend", r["batch"], r["tokens"], context_band(ctx)), new_cell())
            g.total.append(float(r["forward_s"]) + d_s + host)
            g.ar.append(float(r.get("forward_allreduce_s") or 0.0) + float(r.get("draft_allreduce_s") or 0.0))
            g.fwd.append(float(r["forward_s"]) + d_s)
            g.n_ar.append(float(r.get("forward_n_allreduce") or 0) + float(r.get("draft_n_allreduce") or 0))
            g.ctx.append(ctx)
            return
        else:
            return  # a speculative server's post-prefill step: not the baseline's
        if not speculative and r["kind"] == "extend":
            self.base_prompts.append((r["batch"], r["tokens"], 1))
        g = cells.setdefault((r["kind"], r["batch"], r["tokens"], context_band(ctx)), new_cell())
        g.total.append(float(r["forward_s"]) + host)
        g.ar.append(float(r.get("forward_allreduce_s") or 0.0))
        g.fwd.append(float(r["forward_s"]))
        g.n_ar.append(float(r.get("forward_n_allreduce") or 0))
        g.ctx.append(ctx)
        if r["kind"] == "verify" and r.get("draft_s") is not None and method in VLLM_FORWARD_DRAFTERS \
                and k:
            _add_draft(r, int(k), ctx, self.drafts, self.extends)

