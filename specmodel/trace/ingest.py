"""Many ranks' traces -> one :class:`~specmodel.schema.profile.Profile` (``specmodel ingest``).

Each rank file is read by :func:`specmodel.trace.kineto.parse_rank_file` in a process pool
(one file per worker); :func:`aggregate` takes, per phase (kind, batch, tokens), the median over
passes x ranks of every figure and the per-rank skew; :func:`build_profile` writes the cost rows.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmodel.errors import FieldError, SpecmodelError, spell, verbatim
from specmodel.procs import die_with_parent, kill_and_reap
from specmodel.schema.costrows import KINDS, CostRow, HostProposer, SpecConfig
from specmodel.schema.phases import draft_steps
from specmodel.schema.profile import Profile
from specmodel.schema.source import Source
from specmodel.stats import iqr, median, median_ci95_rel
from specmodel.trace.attribution import (
    PassRecord,
    collective_skew,
    median_of_rank_means,
)
from specmodel.trace.kineto import (
    SGLANG_STEP,
    VLLM_DRAFT,
    VLLM_STEP,
    IngestOptions,
    RankTrace,
    check_same_run,
    find_traces,
    parse_rank_file,
    read_meta,
)


@dataclass(frozen=True, kw_only=True)
class PhaseStats:
    """Medians over passes × ranks of one (kind, batch, tokens, context)."""

    kind: str
    batch: int
    tokens: int
    labels: tuple[str, ...]
    samples: int
    ranks: int
    span_s: float
    busy_s: float
    allreduce_s: float
    exposed_s: float
    compute_s: float
    other_s: float
    skew_s: float
    spread_s: float
    n_collectives: int
    n_allreduce: int
    allreduce_msg_bytes: int
    comm_by_impl_s: tuple[tuple[str, float], ...]
    context_tokens: int = 0  # KV tokens per request (the span's ctx=; 0 when it does not say)
    #: half-width of the 95 % interval of span_s (the median over repetitions), relative to it
    ci95_rel: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["labels"] = list(self.labels)
        d["comm_by_impl_s"] = dict(self.comm_by_impl_s)
        return d

    def cost_row(self) -> CostRow:
        """The profile row: ``total_s`` = median span; the medians of the parts, which need not add
        up to it (they may come from different passes), are scaled to sum to it."""
        parts = self.allreduce_s + self.compute_s + self.other_s
        f = self.span_s / parts if parts > 0 else 0.0
        ar, comp, other = self.allreduce_s * f, self.compute_s * f, self.other_s * f
        if parts <= 0:
            other = self.span_s
        return CostRow(kind=self.kind, batch=self.batch, tokens=self.tokens, total_s=self.span_s,
                       allreduce_s=ar, compute_s=comp, other_s=other,
                       n_allreduce=self.n_allreduce, allreduce_msg_bytes=self.allreduce_msg_bytes,
                       spread_s=self.spread_s, skew_s=min(self.skew_s * f, ar), samples=self.samples,
                       context_tokens=self.context_tokens, ci95_rel=self.ci95_rel)


@dataclass(frozen=True, kw_only=True)
class RankStats:
    rank: int
    path: str
    passes: int
    busy_s: float
    comm_s: float
    skew_s: float


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    traces: tuple[RankTrace, ...]
    phases: tuple[PhaseStats, ...]
    ranks: tuple[RankStats, ...]
    mode: str
    world_size: int
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "world_size": self.world_size,
            "files": [t.meta.path for t in self.traces],
            "phases": [p.to_dict() for p in self.phases],
            "ranks": [r.__dict__ for r in self.ranks],
            "notes": list(self.notes),
        }


def skews(traces: Sequence[RankTrace]) -> dict[tuple[int, str, int], float]:
    """(rank, label, occurrence) -> seconds this rank waited in the pass's collectives."""
    groups: dict[tuple[str, int], dict[int, PassRecord]] = defaultdict(dict)
    for t in traces:
        for p in t.passes:
            groups[(p.label, p.occurrence)][t.meta.rank] = p
    out: dict[tuple[int, str, int], float] = {}
    for (label, occ), by_rank in groups.items():
        sk, _ = collective_skew({r: tuple(zip(p.coll_keys, p.coll_durs_s, strict=True)) for r, p in by_rank.items()})
        for r, v in sk.items():
            out[(r, label, occ)] = v
    return out


def aggregate(traces: Sequence[RankTrace], opts: IngestOptions) -> IngestResult:
    modes = {t.mode for t in traces}
    if len(modes) > 1:
        gpu = next(t for t in traces if t.mode == "gpu")
        cpu = next(t for t in traces if t.mode == "cpu")
        raise SpecmodelError(f"{gpu.meta.path} and {cpu.meta.path} come from different runs "
                             "(one has GPU kernels, the other none)")
    mode = modes.pop()
    sk = skews(traces)
    bare_by_rank = {t.meta.rank: dict(t.bare_totals_s) for t in traces}
    by_phase: dict[tuple[str, int, int, int], list[tuple[int, PassRecord]]] = defaultdict(list)
    for t in traces:
        for p in t.passes:
            by_phase[(p.kind, p.batch, p.tokens, p.context or 0)].append((t.meta.rank, p))
    phases = []
    for (kind, batch, tokens, context), items in sorted(by_phase.items(),
                                                         key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1:])):
        recs = [p for _, p in items]
        # one repetition = one (label, occurrence) across ranks: the engine's aggregation (a
        # typical rank per repetition, median over repetitions), the same as `specmodel profile`
        reps: dict[tuple[str, int], list[tuple[int, PassRecord]]] = defaultdict(list)
        for r, p in items:
            reps[(p.label, p.occurrence)].append((r, p))

        def agg(f: Callable[[int, PassRecord], float], reps: dict[tuple[str, int], list[tuple[int, PassRecord]]]
                = reps) -> float:
            return median_of_rank_means([f(r, p) for r, p in rep] for rep in reps.values())

        allreduce_s = agg(lambda r, p: p.comm_s)
        labels = {p.label for p in recs}
        timed = [bare_by_rank.get(r, {}).get(lbl) for r in {r for r, _ in items} for lbl in labels]
        if len(labels) == 1 and timed and all(timed):
            # a `specmodel profile` trace: as its rows, the profiled all-reduce share (typical rank,
            # median repetition) applied to the unprofiled total (rank mean per timing pass, median)
            prof_total = agg(lambda r, p: p.span_s)
            share = min(allreduce_s, prof_total) / prof_total if prof_total > 0 else 0.0
            n = min(len(t) for t in timed if t)
            allreduce_s = median_of_rank_means([t[j] for t in timed if t] for j in range(n)) * min(share, 1.0)
        impl: dict[str, list[float]] = defaultdict(list)
        for p in recs:
            for name, s in p.comm_by_impl_s:
                impl[name].append(s)
        msg = [b for p in recs for b in p.msg_bytes]
        rep_spans = [sum(p.span_s for _, p in rep) / len(rep) for rep in reps.values()]
        phases.append(PhaseStats(
            kind=kind, batch=batch, tokens=tokens, context_tokens=context, ci95_rel=median_ci95_rel(rep_spans),
            labels=tuple(sorted({p.label for p in recs})),
            samples=len(recs), ranks=len({r for r, _ in items}),
            span_s=agg(lambda r, p: p.span_s), busy_s=agg(lambda r, p: p.busy_s),
            allreduce_s=allreduce_s, exposed_s=agg(lambda r, p: p.exposed_s),
            compute_s=agg(lambda r, p: p.busy_s - p.comm_s), other_s=agg(lambda r, p: p.span_s - p.busy_s),
            skew_s=agg(lambda r, p: sk.get((r, p.label, p.occurrence), 0.0)),
            spread_s=iqr([p.span_s for p in recs]),
            n_collectives=round(median([p.n_collectives for p in recs])),
            n_allreduce=round(median([p.n_allreduce for p in recs])),
            allreduce_msg_bytes=round(median(msg)) if msg else 0,
            comm_by_impl_s=tuple((k, median(v + [0.0] * (len(recs) - len(v)))) for k, v in sorted(impl.items())),
        ))
    ranks = tuple(RankStats(
        rank=t.meta.rank, path=t.meta.path, passes=len(t.passes),
        busy_s=median([p.busy_s for p in t.passes]), comm_s=median([p.comm_s for p in t.passes]),
        skew_s=median([sk.get((t.meta.rank, p.label, p.occurrence), 0.0) for p in t.passes]),
    ) for t in sorted(traces, key=lambda t: t.meta.rank))
    world = max((t.meta.world_size or 0 for t in traces), default=0) or len(traces)
    notes = [f"per-phase figures: per forward pass the mean over ranks, then the median over passes "
             f"({len(traces)} rank trace(s)); "
             "a profile row's total is the median span, its parts the medians scaled to add up to it"]
    if mode == "cpu":
        notes.append("CPU trace (no GPU kernels): communication = the CPU collective ops (gloo, vLLM shm) inside each span; "
                     "busy = the whole span; all communication counted as exposed")
    else:
        attrs = sorted({t.attribution for t in traces})
        notes.append(f"GPU kernels attributed to forward passes by {', '.join(attrs)}; "
                     "allreduce_s = all collective-kernel time (all-reduce, all-gather, ...) in the pass")
    if any(p.kind in ("verify", "draft_extend") and not any(SGLANG_STEP.match(lbl) and "toks=" in lbl
                                                              or lbl.startswith("specmodel.") or VLLM_STEP.match(lbl)
                                                              for lbl in p.labels)
           for p in phases):
        notes.append(spell(f"verify / draft_extend tokens = batch x {{num_draft_tokens}} ({opts.num_draft_tokens})"))
    if any(p.kind == "draft" for p in phases) and opts.topk != 1:
        notes.append(spell(f"draft tokens = batch x {{topk}} ({opts.topk})"))
    if any("ProfilerStep" in p.labels for p in phases):
        notes.append(spell(f"ProfilerStep# spans read as {opts.step_kind} forwards at batch {opts.step_batch} "
                           "({step_kind}/{batch})"))
    if any(lbl.startswith(VLLM_DRAFT) for p in phases for lbl in p.labels):
        notes.append(f"vLLM draft rows: one '{VLLM_DRAFT}' span = {opts.draft_steps if opts.draft_forwards is None else opts.draft_forwards}"
                     + spell(" drafter forwards ({draft_forwards}; 0 for a host-side proposer such as ngram)"))
    if any(p.context_tokens for p in phases):
        notes.append("rows keyed by the KV context the spans name (ctx=)")
    elif any(p.kind in ("decode", "verify") for p in phases):
        notes.append("the spans name no KV context: every row is at context 0 (trace each context separately, "
                     "or label spans with ctx=)")
    if len(traces) < world:
        notes.append(f"only {len(traces)} of {world} ranks' traces were given")
    return IngestResult(traces=tuple(sorted(traces, key=lambda t: t.meta.rank)), phases=tuple(phases),
                        ranks=ranks, mode=mode, world_size=world, notes=tuple(notes))


def _parse_one(args: tuple[str, IngestOptions, bool, bool], hold: list[Any] | None = None) -> RankTrace:
    path, opts, single, full_decode = args
    return parse_rank_file(path, opts, single, full_decode=full_decode, hold=hold)


def ingest(inputs: Sequence[str | Path], opts: IngestOptions | None = None, *, jobs: int | None = None,
           progress: Callable[[str], None] | None = None, full_decode: bool = False) -> IngestResult:
    """Read every rank's trace (in parallel), check they are one run, aggregate per phase.
    ``full_decode``: decode every event (the pre-filter's reference path; same result)."""
    opts = opts or IngestOptions()
    paths = find_traces(inputs)
    single = len(paths) == 1
    check_same_run([read_meta(p, single=single) for p in paths])  # fail fast, before the heavy pass
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(paths)))
    work = [(str(p), opts, single, full_decode) for p in paths]
    if jobs == 1:
        traces = [_parse_one(w) for w in work]
    elif len(work) <= jobs and sys.platform.startswith("linux"):  # (fork, without importing multiprocessing)
        traces = _forked(work)
    else:
        from concurrent.futures import ProcessPoolExecutor  # (only here: ~25 ms of start-up)
        from multiprocessing import get_context

        ctx = get_context("fork") if "fork" in _start_methods() else None
        # one file per core: this process reads the first itself (one fork and one result's
        # pickling fewer); more files than cores: every core a worker, as they free up
        own = len(work) <= jobs
        # workers die with this process: a SIGKILLed `ingest` must not leave them parsing for minutes
        with ProcessPoolExecutor(max_workers=jobs - own, mp_context=ctx, initializer=die_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            futures = [pool.submit(_parse_one, w) for w in work[own:]]
            traces = [_parse_one(work[0])] if own else []
            traces += [f.result() for f in futures]
    if progress:
        for t in traces:
            progress(f"{t.meta.path}: rank {t.meta.rank}, {len(t.passes)} passes, {t.n_kernels} kernels")
    check_same_run([t.meta for t in traces])
    return aggregate(traces, opts)


def _forked(work: list[tuple[str, IngestOptions, bool, bool]]) -> list[RankTrace]:
    """A core per file: one forked child per file after the first, which this process reads
    itself; each child sends back its result (or its error) pickled through a pipe. No pool: its
    import and its threads cost ~25 ms of a ~0.5 s ingest. Children die with this process
    (SIGKILLed ``ingest``) and are killed and reaped whatever happens here."""
    import pickle

    parent = os.getpid()
    children: list[tuple[int, int]] = []
    try:
        for w in work[1:]:
            r, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: parse, send, leave without running the parent's cleanup
                code = 0
                try:
                    os.close(r)
                    die_with_parent(parent)
                    held: list[Any] = []  # (freed by os._exit, not object by object)
                    try:
                        out: tuple[str, Any] = ("ok", _parse_one(w, held))
                    except SpecmodelError as exc:
                        out = ("error", str(exc))
                    except BaseException as exc:  # (a crash: named, not lost)
                        out = ("error", f"{w[0]}: worker failed: {type(exc).__name__}: {exc}")
                    data = memoryview(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
                    while data:
                        data = data[os.write(wfd, data):]
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            os.close(wfd)
            children.append((pid, r))
        traces = [_parse_one(work[0])]
        while children:
            pid, r = children[0]
            with os.fdopen(r, "rb") as f:
                payload = f.read()
            os.waitpid(pid, 0)
            children.pop(0)
            if not payload:
                raise SpecmodelError(f"{work[len(traces)][0]}: the worker reading it died")
            kind, val = pickle.loads(payload)
            if kind == "error":
                raise SpecmodelError(val)
            traces.append(val)
        return traces
    finally:
        for pid, r in children:  # (an error here or in a worker: the rest are stopped, not waited for)
            try:
                os.close(r)
            except OSError:
                pass
            kill_and_reap(pid)


def _start_methods() -> list[str]:
    import multiprocessing

    return multiprocessing.get_all_start_methods()


def build_profile(result: IngestResult, *, name: str, opts: IngestOptions, steps: int | None = None,
                  baseline: Profile | None = None) -> Profile:
    """The :class:`Profile` (``source.kind = "ingested"``) for an ingest result.

    A speculative server's trace holds verify/draft passes only; its baseline decode step
    comes from ``baseline`` (a profile of a non-speculative run: its decode rows are copied
    in when the traces have none).
    """
    rows = tuple(p.cost_row() for p in result.phases)
    notes = tuple(result.notes)
    tp = result.world_size
    host = bool(result.traces) and all(t.host_proposer for t in result.traces)
    own_decode: tuple[CostRow, ...] = ()
    if host and any(r.kind == "verify" for r in rows):
        # a host proposer's speculative server: its decode-shaped forwards are steps where nothing
        # was proposed, not the baseline (as `specmodel vllm --summarize` keeps them apart)
        own_decode = tuple(r for r in rows if r.kind == "decode")
        rows = tuple(r for r in rows if r.kind != "decode")
    if baseline is not None and baseline.tp != tp:
        raise FieldError(None, f"{{baseline}} {baseline.path or baseline.name}: TP {baseline.tp} but the traces "
                             f"({result.traces[0].meta.path}) are TP {tp}: a baseline step of another TP degree "
                             "is not this server's")
    if not any(r.kind == "decode" for r in rows) and baseline is not None:
        rows = rows + baseline.rows("decode")
        notes += (f"decode rows (the baseline step) copied from profile {baseline.name} ({baseline.path})",)
    if not any(r.kind == "decode" for r in rows):
        found = ", ".join(sorted({r.kind for r in rows}))
        if own_decode:
            found += " and the ngram server's own decode-shaped steps, which are not the baseline"
        raise FieldError(None, f"no decode forward passes in the traces (found: {found}); a profile needs the "
                               "baseline decode step: also trace a non-speculative run and pass its profile with "
                               "{baseline} (or use `specmodel profile`)")
    first = result.traces[0].meta
    backend = first.backend or ("gloo" if result.mode == "cpu" else "nccl")
    hardware: dict[str, Any] = {"gpu_count": tp} if result.mode == "gpu" else {"device": "cpu"}
    if first.device_name:
        hardware["gpu_name"] = first.device_name
    if first.nccl_version:
        hardware["nccl_version"] = first.nccl_version
    if steps is None:
        steps = draft_steps(opts.num_draft_tokens, opts.topk)
    algorithm = "EAGLE3"
    hp = None
    if host:
        # the trace shows the proposal ran but no drafter forward: a host proposer
        algorithm = "NGRAM"
        notes += ("vLLM trace: the draft scope ran no drafter forward, so the proposer is a host-side one "
                  "(ngram or suffix; the trace does not say which): recorded as NGRAM",)
        if own_decode:
            # the trace shows neither the proposal rate nor the lookup: counted as not measured (0 steps)
            hp = HostProposer(method="ngram", proposal_rate=0.0, request_steps=0, proposed_request_steps=0,
                              lookup_s=0.0, lookup_steps=0, decode=own_decode)
            notes += (f"{len(own_decode)} decode row(s) of the ngram server (no proposal that step) kept in "
                      + spell("host_proposer.decode; the baseline decode step comes from {baseline}"),)
    spec = SpecConfig(algorithm=algorithm, steps=steps, topk=opts.topk, num_draft_tokens=max(2, opts.num_draft_tokens))
    files = [Path(t.meta.path).name for t in result.traces]
    engines = sorted({t.engine for t in result.traces if t.engine})
    versions = sorted({t.engine_version for t in result.traces if t.engine_version})
    model = dict(baseline.model) if baseline is not None and baseline.model else {}
    if model:
        notes += (spell(f"model recorded from the {{baseline}} profile {verbatim(baseline.name if baseline else '')} "
                        "(a trace names none)"),)
    source = Source.ingested(
        description=f"ingested from {len(files)} Kineto trace(s) ({'GPU kernels' if result.mode == 'gpu' else 'CPU/gloo'}"
                    f", TP{tp})",
        files=tuple(files),
        mode=result.mode,
        phases=[p.to_dict() for p in result.phases],
        ranks=[{"rank": r.rank, "file": Path(r.path).name, "passes": r.passes, "busy_s": r.busy_s,
                "comm_s": r.comm_s, "skew_s": r.skew_s} for r in result.ranks],
    )
    if engines:
        source = dataclasses.replace(source, engine=", ".join(engines), engine_version=", ".join(versions))
    return Profile(name=name, source=source, tp=tp, costs=rows, spec=spec, hardware=hardware, backend=backend,
                   model=model, notes=notes, host_proposer=hp)
