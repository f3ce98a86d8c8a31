"""The one attribution engine: trace events -> per forward pass all-reduce / compute / other
seconds, all-reduce message bytes and the per-collective durations that skew is computed from.

``specmodel ingest`` (:mod:`specmodel.trace.kineto`, streaming files) and ``specmodel profile``
(:mod:`specmodel.profile.analysis`, the worker's in-memory events) both feed events to a
:class:`Collector` and call :func:`gpu_passes` / :func:`cpu_passes` on the spans they chose, and
both aggregate repetitions × ranks with :func:`median_of_rank_means`: the same trace gives the same
numbers through either path.

* **GPU.** A pass's window is its ``gpu_user_annotation`` span (kernels starting inside it, same
  device), or without one the kernels launched (``correlation``) from inside its CPU span.
  ``busy`` = union of kernel/memcpy/memset time; ``comm`` = union of collective-kernel time
  (:mod:`specmodel.trace.collectives`); ``exposed`` = comm not overlapped by other GPU work.
* **CPU (gloo).** The caller issues ``c10d::allreduce_`` (enqueue) and blocks while a gloo thread
  runs ``gloo:all_reduce``. A collective costs the caller from its ``c10d::`` op until it runs its
  next op (at the earliest, the end of the gloo work it enqueued): wake-up latency included.
  Nested ops (``record_param_comms`` > ``c10d::allreduce_``) count once. ``busy`` = the span.
* **Message bytes** = ``In msg nelems`` × ``dtype`` (``record_param_comms`` args, copied onto NCCL
  kernels), else the gloo op's ``Input Dims`` × ``Input type`` (traces recorded with shapes).

One module on purpose: the :class:`Collector`'s per-event loop is ingest's hot path and the pass
builders read its arrays directly; ingest and profile share every line of it.
"""

from __future__ import annotations

import bisect
import math
import sys
from array import array
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.stats import median
from specmodel.trace import _intervals as iv
from specmodel.trace._jsonstream import COLLECTIVE_OR_HOST_OP, HOST_OP, MISSING
from specmodel.trace.collectives import (
    ALL_REDUCE,
    SYNCHRONOUS_IMPLEMENTATIONS,
    classify_cpu_op,
    classify_kernel,
    message_bytes,
)
from specmodel.units import from_us

try:  # the compiled pre-filter (setup.py builds it; optional: without it the msgspec path runs)
    from specmodel.trace import _cscan
except ImportError:  # pragma: no cover - exercised by tests that hide it
    _cscan = None  # type: ignore[assignment]

GPU_BUSY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_ANNOTATION_CATS = ("user_annotation", "gpu_user_annotation")
#: Every ``args`` key :class:`Collector` and the classifier (:mod:`collectives`) read: the
#: pre-filter builds only these (a key read elsewhere and not listed here would read as absent;
#: tests/test_ingest_prefilter.py checks the list against the code).
ARGS_KEYS = ("Collective name", "correlation", "External id", "Seq", "Process Group Name", "In msg nelems",
             "dtype", "Input Dims", "Input type")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
_COLL_KEY = "Collective name"
_START = itemgetter(0)  # (a kernel's, a collective's start: the sort key)
_EPS_US = 1e-3  # ts are printed with 3 decimals (ns) in µs
_MISSING = object()

#: (start, end, pid, correlation, collective, implementation, msg_bytes, seq_key)
Kernel = tuple[float, float, Any, Any, "str | None", str, int, Any]
#: (start, end, collective, implementation, msg_bytes, seq_key) of one collective in a pass
Coll = tuple[float, float, "str | None", str, int, Any]


def is_launch(name: str) -> bool:
    """A runtime/driver call that starts GPU work (its ``args.correlation`` names the kernel)."""
    return "aunch" in name or "emcpy" in name or "emset" in name


@dataclass
class Span:
    name: str
    ts: float
    end: float
    pid: Any
    ext: Any
    tid: Any = None


@dataclass(frozen=True, kw_only=True)
class PhaseSpan:
    """A span the caller decided is a forward pass (or ``forwards`` of them), and what it is."""

    span: Span
    kind: str
    batch: int
    tokens: int
    label: str  # passes with the same label are matched across ranks by occurrence
    forwards: int = 1
    context: int | None = None  # KV tokens per request, when the span says (ctx=)


@dataclass(frozen=True, kw_only=True)
class PassRecord:
    """One forward pass on one rank (seconds)."""

    label: str
    occurrence: int  # n-th pass with this label on this rank (matches passes across ranks)
    kind: str
    batch: int
    tokens: int
    span_s: float
    busy_s: float
    comm_s: float
    exposed_s: float
    n_collectives: int
    n_allreduce: int
    msg_bytes: tuple[int, ...] = ()
    coll_keys: tuple[Any, ...] = ()
    coll_durs_s: tuple[float, ...] = ()
    coll_names: tuple[str, ...] = ()
    comm_by_impl_s: tuple[tuple[str, float], ...] = ()
    t0_us: float = 0.0  # the pass's window on the trace clock
    t1_us: float = 0.0
    forwards: int = 1
    context: int | None = None

    def scaled(self, f: float) -> PassRecord:
        """Every duration × ``f`` (the profiler's stretch of this forward, measured by the run)."""
        from dataclasses import replace

        return replace(self, span_s=self.span_s * f, busy_s=self.busy_s * f, comm_s=self.comm_s * f,
                       exposed_s=self.exposed_s * f, coll_durs_s=tuple(d * f for d in self.coll_durs_s),
                       comm_by_impl_s=tuple((k, v * f) for k, v in self.comm_by_impl_s))


@dataclass
class Collector:
    """Keeps only what attribution needs from an event stream (bounded by kernels, not bytes)."""

    path: str
    n_events: int = 0
    kernels: list[Kernel] = field(default_factory=list)
    n_kernels: int = 0
    launches: list[tuple[float, Any, Any]] = field(default_factory=list)  # (ts, pid, correlation)
    cpu_spans: list[Span] = field(default_factory=list)
    gpu_spans: list[Span] = field(default_factory=list)
    # (ts, end, pid, collective, implementation, msg_bytes, tid)
    cpu_colls: list[tuple[float, float, Any, str, str, int, Any]] = field(default_factory=list)
    # host op starts and ends per (pid, tid): where a blocked caller resumes (CPU traces only)
    host_ops: dict[tuple[Any, Any], array[float]] = field(default_factory=dict)
    span_name: Any = None  # predicate: is this annotation name a pass span?
    args_keys: tuple[str, ...] = ARGS_KEYS  # (a class constant; the pre-filter reads it)
    decisions: dict[tuple[Any, Any, Any], Any] = field(default_factory=dict)  # the pre-filter's cache
    only_ph: str = "X"  # (a class constant: complete events are the only ones on_event reads)
    _cpu_rules: dict[str, Any] = field(default_factory=dict)
    _kernel_rules: dict[tuple[str, str | None], Any] = field(default_factory=dict)  # (name, Collective name)
    _cpu_coll_rules: dict[tuple[str, str | None], Any] = field(default_factory=dict)  # the same, of cpu_ops

    def _times(self, e: dict[str, Any]) -> tuple[float, float]:
        ts, dur = e.get("ts"), e.get("dur", 0.0)
        try:
            t0 = float(ts)  # type: ignore[arg-type]
            d = float(dur)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            raise SpecmodelError(f"{self.path}: event {str(e.get('name', '?'))[:80]!r} ({str(e.get('cat'))[:40]}) has no numeric "
                                 f"ts/dur (ts={ts!r}, dur={dur!r})") from None
        if not (math.isfinite(t0) and math.isfinite(d)) or d < 0:
            raise SpecmodelError(f"{self.path}: event {e.get('name', '?')!r} has invalid ts/dur ({ts!r}, {dur!r})")
        return t0, t0 + d

    def _host_op(self, e: dict[str, Any]) -> None:
        key = (e.get("pid"), e.get("tid"))
        ops = self.host_ops.get(key)
        if ops is None:
            ops = self.host_ops[key] = array("d")
        ops.extend(self._times(e))  # start, end interleaved: 16 bytes an op

    def _key(self, e: dict[str, Any], v: Any, what: str) -> Any:
        """An id used as a dict/set key (pid, tid, correlation, External id): a list or object is no id."""
        if type(v) in (list, dict):
            raise SpecmodelError(f"{self.path}: event {str(e.get('name', '?'))[:80]!r}: {what} must be a number or "
                                 f"string, got a {type(v).__name__}")
        return v

    def _cpu_rule(self, name: str) -> Any:
        rule = self._cpu_rules.get(name, _MISSING)
        if rule is _MISSING:
            rule = self._cpu_rules[name] = classify_cpu_op(name)
        return rule

    def decide(self, ph: Any, cat: Any, name: Any) -> Any:
        """The pre-filter (``scan_trace(keep=collector)``), per (ph, cat, name): False only when
        :meth:`on_event` would do nothing with the event but count it; a quoted key (bytes) when
        that depends on whether its ``args`` has that key; else True. The same rules as
        :meth:`on_event` (a missing key is ``_jsonstream.MISSING``): kernels, collectives (the one
        classifier table), launches, the spans the caller's ``span_name`` names, and on a CPU trace
        (no kernel yet) every host op (``HOST_OP``: read off the top-level fields, :meth:`host_ops_of`)
        and every annotation a collective's name may make one (``COLLECTIVE_OR_HOST_OP``). Cached
        in :attr:`decisions`, cleared at the first kernel; a decision made before it keeps more,
        never less."""
        d: Any = False
        if ph != self.only_ph:
            pass
        elif cat in GPU_BUSY_CATS:
            d = True
        elif cat == "cpu_op":
            if isinstance(name, str):
                if self._cpu_rule(name) is not None:
                    d = True
                else:  # a collective only if its args say so; on a CPU trace a host op anyway
                    d = "Collective name" if self.n_kernels else HOST_OP
        elif cat in _RUNTIME_CATS:
            if isinstance(name, str) and is_launch(name):
                d = "correlation"
        elif cat in _ANNOTATION_CATS:
            if name is MISSING:
                name = ""  # on_event reads a missing name as ""
            if isinstance(name, str):
                if self.span_name is not None and self.span_name(name):
                    d = True
                elif cat == "user_annotation" and not self.n_kernels:
                    d = COLLECTIVE_OR_HOST_OP if self._cpu_rule(name) is not None else HOST_OP
        self.decisions[(ph, cat, name)] = d
        return d

    def host_ops_of(self, ops: Sequence[Any]) -> bool:
        """Record host ops the pre-filter read off their top-level fields (decoded structs: pid,
        tid, ts, dur; a missing key is MISSING): what :meth:`on_event` records for a ``HOST_OP``
        event. False, recording nothing, if any has an invalid ts/dur (the full decode names it)."""
        if self.n_kernels:
            return True  # a GPU trace: the host timeline is not kept
        miss = MISSING
        fin = math.isfinite
        pending: dict[tuple[Any, Any], list[float]] = {}
        last_pid: Any = miss
        last_tid: Any = miss
        out: list[float] = []
        for op in ops:
            ts, dur = op.ts, op.dur
            try:
                t0 = float(ts)
                d = float(0.0 if dur is miss else dur)
            except (TypeError, ValueError, OverflowError):
                return False
            if not (fin(t0) and fin(d)) or d < 0:
                return False
            pid, tid = op.pid, op.tid
            # (consecutive ops mostly share a thread; == is the dict key's own equality)
            if pid is miss or tid is miss or last_pid is miss or pid != last_pid or tid != last_tid:
                key = (None if pid is miss else pid, None if tid is miss else tid)
                out = pending.get(key)  # type: ignore[assignment]
                if out is None:
                    out = pending[key] = []
                last_pid, last_tid = (miss, miss) if miss in (pid, tid) else (pid, tid)
            out.append(t0)
            out.append(t0 + d)
        host = self.host_ops
        for key, times in pending.items():
            arr = host.get(key)
            if arr is None:
                arr = host[key] = array("d")
            arr.extend(times)
        return True

    def compiled(self) -> Any:
        """The compiled pre-filter bound to this collector (``_jsonstream`` calls it per buffer), or
        None where the extension is not built. ``scan(buf, pos)`` -> (status, pos, items, counted):
        kernels, launches, a GPU trace's collective callers and a CPU trace's host ops go straight
        into this collector's lists (the tuples :meth:`on_structs` builds); every other kept event
        comes back in ``items`` as the dict for :meth:`on_event`; anything it does not read exactly
        as :meth:`on_event` would (``specmodel/trace/_cscan.c``) stops the scan there (SLOW) for the
        reference decoder and :meth:`on_event`."""
        if _cscan is None:
            return None
        hosts: dict[tuple[Any, Any], bytearray] = {}  # (pid, tid) -> doubles start, end, ... (native order)
        sc = _cscan.Scanner(decide=self.decide, info=_collective_info, missing=MISSING, host_op=HOST_OP,
                            coll_or_host=COLLECTIVE_OR_HOST_OP, args_keys=self.args_keys, only_ph=self.only_ph,
                            kernels=self.kernels, launches=self.launches, cpu_colls=self.cpu_colls, hosts=hosts,
                            int_max_digits=sys.get_int_max_str_digits())

        def scan(buf: str | bytes, pos: int) -> tuple[int, int, list[dict[str, Any]], int]:
            status, pos, items, counted, new_kernels = sc.scan(buf, pos, self.n_kernels)
            self.n_kernels += new_kernels
            if hosts:  # (order within a thread does not matter: _blocked_calls sorts them)
                for key, times in hosts.items():
                    arr = self.host_ops.get(key)
                    if arr is None:
                        arr = self.host_ops[key] = array("d")
                    arr.frombytes(times)
                hosts.clear()
            return status, pos, items, counted

        return scan

    def skipped(self, n: int) -> None:
        """Events the pre-filter counted without decoding (part of ``n_events``)."""
        self.n_events += n

    def on_structs(self, events: Sequence[Any], as_dict: Any) -> None:
        """The pre-filter's kept events of one run, as structs (``_jsonstream.Prefilter``): what
        ``on_event(as_dict(ev))`` does for each, in order, without building a dict for the common
        ones — a GPU kernel / memcpy / memset, a kernel launch and, on a GPU trace, a collective's
        caller (cpu_op), with numeric ts/dur and scalar ids (half of a GPU trace's events). Any other event, or one of
        those with anything unusual (a value :meth:`on_event` would refuse or read otherwise),
        goes through :meth:`on_event` itself."""
        miss = MISSING
        fin = math.isfinite
        busy, runtime = GPU_BUSY_CATS, _RUNTIME_CATS
        kernels, launches = self.kernels, self.launches
        rules = self._kernel_rules
        cpu_rules = self._cpu_coll_rules
        only_ph = self.only_ph
        args_of = as_dict.args
        on_event = self.on_event
        n = 0
        for ev in events:
            cat = ev.cat
            if ev.ph != only_ph or not (cat in busy or cat in runtime or (cat == "cpu_op" and self.n_kernels)):
                on_event(as_dict(ev))
                continue
            dur = ev.dur
            try:
                t0 = float(ev.ts)
                d = float(0.0 if dur is miss else dur)
            except (TypeError, ValueError, OverflowError):
                on_event(as_dict(ev))  # (it names the bad field)
                continue
            a = ev.args
            if a is None or a is miss:
                corr = None
                cname = None
            else:
                corr = a.correlation
                if corr is miss:
                    corr = None
                cname = a.collective_name
            if not (fin(t0) and fin(d)) or d < 0 or type(corr) in (list, dict):
                on_event(as_dict(ev))
                continue
            pid = ev.pid
            if pid is miss:
                pid = None
            if cat == "cpu_op":  # on a GPU trace: a collective's caller (record_param_comms), no host op
                name = ev.name
                if type(name) is not str:
                    n += 1
                    continue
                args = args_of(a)
                if self._cpu_rule(name) is not None or (type(args) is dict and _COLL_KEY in args):
                    ckey = (name, cname if type(cname) is str else None)
                    cc = cpu_rules.get(ckey, miss)
                    if cc is miss:  # (the classifier reads args' Collective name only)
                        cc = cpu_rules[ckey] = classify_cpu_op(name, args)
                    if cc is not None:
                        tid = ev.tid
                        self.cpu_colls.append((t0, t0 + d, pid, cc.collective, cc.implementation,
                                               message_bytes(args), None if tid is miss else tid))
                n += 1
                continue
            if cat in runtime:
                name = ev.name
                if type(name) is str and is_launch(name) and a is not None and a is not miss \
                        and a.correlation is not miss:
                    launches.append((t0, pid, corr))
                n += 1
                continue
            if cat == "kernel":
                name = ev.name
                key = ("" if name is miss else name if type(name) is str else str(name),
                       cname if type(cname) is str else None)
                c = rules.get(key, miss)
                if c is miss:
                    c = rules[key] = classify_kernel(key[0], None if key[1] is None else {_COLL_KEY: key[1]})
                coll: Any = None
                impl = ""
                nbytes = 0
                seq = None
                if c is not None:  # a collective: its bytes and sequence number
                    args = args_of(a)
                    args = args if type(args) is dict else {}
                    if "Seq" in args:
                        seq = (args.get("Process Group Name"), args.get("Seq"))
                        if type(seq[0]) in (list, dict) or type(seq[1]) in (list, dict):
                            on_event(as_dict(ev))  # (it names the field)
                            continue
                    coll, impl, nbytes = c.collective, c.implementation, message_bytes(args)
                if not self.n_kernels:
                    self.host_ops.clear()
                    self.decisions.clear()
                self.n_kernels += 1
                kernels.append((t0, t0 + d, pid, corr, coll, impl, nbytes, seq))
                n += 1
                continue
            kernels.append((t0, t0 + d, pid, corr, None, "", 0, None))
            n += 1
        self.n_events += n

    def on_event(self, e: Any) -> None:
        # hot path: most events are cpu_ops / runtime calls we drop after a few dict lookups
        self.n_events += 1
        if type(e) is not dict or e.get("ph") != self.only_ph:
            return
        if type(e.get("pid")) in (list, dict) or type(e.get("tid")) in (list, dict):
            self._key(e, e.get("pid"), "pid")
            self._key(e, e.get("tid"), "tid")
        cat = e.get("cat")
        if cat == "cpu_op":
            name = e.get("name")
            if not isinstance(name, str):
                return
            if not self.n_kernels:  # GPU traces attribute by kernels; keep the host timeline for CPU ones
                self._host_op(e)
            rule = self._cpu_rule(name)
            args = e.get("args")
            if rule is None and not (type(args) is dict and "Collective name" in args):
                return
            self._cpu_coll(e, name, args)
        elif cat in _RUNTIME_CATS:
            name = e.get("name", "")
            if isinstance(name, str) and is_launch(name):
                args = e.get("args")
                if type(args) is dict and "correlation" in args:
                    self.launches.append((self._times(e)[0], e.get("pid"),
                                          self._key(e, args["correlation"], "args.correlation")))
        elif cat in GPU_BUSY_CATS:
            t0, t1 = self._times(e)
            args = e.get("args")
            args = args if type(args) is dict else {}
            coll = None
            impl = ""
            nbytes = 0
            seq = None
            if cat == "kernel":
                if not self.n_kernels:
                    self.host_ops.clear()  # a GPU trace: the host timeline is not needed
                    self.decisions.clear()  # (host ops no longer kept)
                self.n_kernels += 1
                c = classify_kernel(str(e.get("name", "")), args)
                if c is not None:
                    coll, impl = c.collective, c.implementation
                    nbytes = message_bytes(args)
                    if "Seq" in args:
                        seq = (self._key(e, args.get("Process Group Name"), "args.Process Group Name"),
                               self._key(e, args.get("Seq"), "args.Seq"))
            self.kernels.append((t0, t1, e.get("pid"), self._key(e, args.get("correlation"), "args.correlation"),
                                 coll, impl, nbytes, seq))
        elif cat in _ANNOTATION_CATS:
            name = e.get("name", "")
            if not isinstance(name, str):
                return
            if self.span_name is not None and self.span_name(name):
                t0, t1 = self._times(e)
                args = e.get("args")
                ext = self._key(e, args.get("External id"), "args.External id") if type(args) is dict else None
                span = Span(name=name, ts=t0, end=t1, pid=e.get("pid"), ext=ext, tid=e.get("tid"))
                (self.gpu_spans if cat == "gpu_user_annotation" else self.cpu_spans).append(span)
            elif cat == "user_annotation":  # gloo:all_reduce is recorded as a user_annotation
                if not self.n_kernels and not self._cpu_coll(e, name, e.get("args")):
                    self._host_op(e)

    def _cpu_coll(self, e: dict[str, Any], name: str, args: Any) -> bool:
        c = classify_cpu_op(name, args)
        if c is None:
            return False
        t0, t1 = self._times(e)
        self.cpu_colls.append((t0, t1, e.get("pid"), c.collective, c.implementation, message_bytes(args),
                               e.get("tid")))
        return True


def _collective_info(cpu: bool, name: str, args: dict[str, Any]) -> tuple[str, str, int] | None:
    """What the compiled pre-filter asks once per distinct (kind, name, args it reads): the
    collective, implementation and message bytes of a kernel (``cpu`` False) or a collective's
    caller, None if it is none. ``args`` holds only ``Collective name``, ``In msg nelems``,
    ``dtype``, ``Input Dims``, ``Input type``: all that the classifier and message_bytes read."""
    c = (classify_cpu_op if cpu else classify_kernel)(name, args)
    return None if c is None else (c.collective, c.implementation, message_bytes(args))


def merge_gpu_spans(spans: list[Span]) -> list[Span]:
    """Kineto may emit one gpu_user_annotation per stream for one CPU range: one window each."""
    out: list[Span] = []
    groups: dict[tuple[str, Any], Span] = {}
    for s in sorted(spans, key=lambda s: (s.name, s.ts)):
        if s.ext is not None:
            g = groups.get((s.name, s.ext))
            if g is not None:
                g.ts, g.end = min(g.ts, s.ts), max(g.end, s.end)
                continue
            groups[(s.name, s.ext)] = s
            out.append(s)
        elif out and out[-1].name == s.name and out[-1].ext is None and s.ts <= out[-1].end:
            out[-1].end = max(out[-1].end, s.end)
        else:
            out.append(s)
    return sorted(out, key=lambda s: s.ts)


def _record(ph: PhaseSpan, occ: int, lo: float, hi: float, busy_us: float, comm: list[iv.Interval],
            comp: list[iv.Interval], colls: Sequence[Coll], cpu: bool, *, merged: bool = False,
            in_order: bool = False) -> PassRecord:
    """``merged``: ``comm`` and ``comp`` are already unions (:func:`iv.merge`); ``in_order``:
    ``colls`` are already in order of start."""
    span_us = hi - lo
    comm_m = comm if merged else iv.merge(comm)
    comm_us = iv.length(comm_m)
    exposed_us = comm_us if cpu else comm_us - iv.overlap(comm_m, comp if merged else iv.merge(comp))
    if not in_order:
        colls = sorted(colls, key=_START)
    keyed = all(c[5] is not None for c in colls)
    # (list comprehensions, not generators: ~60 collectives a pass, ~10^4 a rank)
    keys = tuple([("seq", c[5]) for c in colls] if keyed else [("ord", i, c[2]) for i, c in enumerate(colls)])
    durs = tuple([from_us(c[1] - c[0]) for c in colls])
    by_impl: dict[str, float] = defaultdict(float)
    for c, d in zip(colls, durs, strict=True):
        by_impl[c[3] or "unknown"] += d
    return PassRecord(
        label=ph.label, occurrence=occ, kind=ph.kind, batch=ph.batch, tokens=ph.tokens,
        span_s=from_us(span_us), busy_s=from_us(min(busy_us, span_us)), comm_s=from_us(min(comm_us, busy_us)),
        exposed_s=from_us(max(exposed_us, 0.0)), n_collectives=len(colls),
        n_allreduce=[c[2] for c in colls].count(ALL_REDUCE),
        msg_bytes=tuple([c[4] for c in colls if c[2] == ALL_REDUCE and c[4] > 0]),
        coll_keys=keys, coll_durs_s=durs,
        coll_names=tuple([c[2] or "unknown" for c in colls]),
        comm_by_impl_s=tuple(sorted(by_impl.items())), t0_us=lo, t1_us=hi, forwards=ph.forwards,
        context=ph.context,
    )


def _pass_from_kernels(ph: PhaseSpan, occ: dict[str, int], lo: float, hi: float,
                       ks: Iterable[Kernel]) -> PassRecord:
    """One pass from its kernels, ``ks`` in order of start.

    The clipped intervals come in order of start too, so one pass over them builds the unions
    :func:`iv.merge_sorted` would (touching intervals joined): of the compute kernels, and of all
    kernels (busy); the collectives' union is merged after (a few hundred a pass)."""
    comm: list[iv.Interval] = []
    comp_m: list[iv.Interval] = []
    busy_m: list[iv.Interval] = []
    colls: list[Coll] = []
    # the open segment of each union (start, end); none yet while its start is None
    ps: float | None = None
    pe = 0.0
    bs: float | None = None
    be = 0.0
    # (the clip without max/min calls, and each union's step written out, not called: the same
    # values, ~50k kernels a rank)
    for k in ks:
        s = k[0]
        e = k[1]
        if s < lo:
            s = lo
        if e > hi:
            e = hi
        if e <= s:
            continue
        if bs is not None and s <= be:
            if e > be:
                be = e
        else:
            if bs is not None:
                busy_m.append((bs, be))
            bs, be = s, e
        if k[4] is not None:
            comm.append((s, e))
            colls.append((k[0], k[1], k[4], k[5], k[6], k[7]))
        elif ps is not None and s <= pe:
            if e > pe:
                pe = e
        else:
            if ps is not None:
                comp_m.append((ps, pe))
            ps, pe = s, e
    if bs is not None:
        busy_m.append((bs, be))
    if ps is not None:
        comp_m.append((ps, pe))
    comm_m = iv.merge_sorted(comm)
    busy = iv.length(busy_m)
    rec = _record(ph, occ[ph.label], lo, hi, busy, comm_m, comp_m, colls, cpu=False, merged=True, in_order=True)
    occ[ph.label] += 1
    return rec


def gpu_passes(col: Collector, gpu_phases: Sequence[PhaseSpan],
               cpu_phases: Sequence[PhaseSpan]) -> tuple[str, list[PassRecord]]:
    """Passes of a GPU trace: by ``gpu_phases`` (device windows) when there are any, else the
    kernels each of ``cpu_phases`` launched. Returns (attribution method, records)."""
    kernels = sorted(col.kernels, key=_START)
    starts = [k[0] for k in kernels]
    pids_with_kernels = {k[2] for k in kernels}
    one_pid = len(pids_with_kernels) == 1  # (a rank's file: then every span takes every kernel in it)
    occ: dict[str, int] = defaultdict(int)
    records: list[PassRecord] = []
    if gpu_phases:
        for ph in gpu_phases:
            lo, hi = ph.span.ts, ph.span.end
            i0 = bisect.bisect_left(starts, lo - _EPS_US)
            i1 = bisect.bisect_left(starts, hi)
            pid = ph.span.pid
            ks = kernels[i0:i1] if one_pid or pid not in pids_with_kernels else \
                [k for k in kernels[i0:i1] if k[2] == pid]
            records.append(_pass_from_kernels(ph, occ, lo, hi, ks))
        return "gpu_user_annotation", records
    by_corr: dict[Any, list[int]] = defaultdict(list)
    for i, k in enumerate(kernels):
        if k[3] is not None:
            by_corr[k[3]].append(i)
    launches = sorted(col.launches, key=_START)
    lts = [x[0] for x in launches]
    for ph in cpu_phases:
        span = ph.span
        j0 = bisect.bisect_left(lts, span.ts)
        j1 = bisect.bisect_right(lts, span.end)
        idx = sorted({i for x in launches[j0:j1] if x[1] == span.pid or span.pid is None
                      for i in by_corr.get(x[2], ())})
        ks = [kernels[i] for i in idx]
        if not ks:
            continue  # no GPU work launched from this span (e.g. a CPU-only step)
        lo, hi = min(k[0] for k in ks), max(k[1] for k in ks)
        records.append(_pass_from_kernels(ph, occ, lo, hi, ks))
    return "correlation", records


def host_ops_by_start(flat: array[float]) -> tuple[array[float], array[float]]:
    """One thread's host ops (start, end interleaved, as recorded) as their starts and ends,
    sorted by (start, end)."""
    if _cscan is None:
        pairs = sorted(zip(flat[0::2], flat[1::2], strict=True))
        return array("d", [p[0] for p in pairs]), array("d", [p[1] for p in pairs])
    flat = array("d", flat)  # (a copy: the collector's stays as recorded)
    _cscan.sort_pairs(flat)
    return flat[0::2], flat[1::2]


def _blocked_calls(col: Collector) -> list[tuple[float, float, Any, Any, str, str, int]]:
    """Each collective the callers issued, as (start, end of the caller's wait, pid, tid,
    collective, implementation, msg_bytes)."""
    colls = sorted(col.cpu_colls, key=lambda c: c[0])
    work = [c for c in colls if c[4] == "gloo"]
    callers = [c for c in colls if c[4] != "gloo"]
    outer: list[tuple[float, float, Any, str, str, int, Any]] = []
    for c in callers:  # nested ops (record_param_comms > c10d::allreduce_) count once
        o = outer[-1] if outer else None
        if o is not None and c[1] <= o[1] and c[0] >= o[0] and c[2] == o[2] and c[6] == o[6]:
            if o[3] not in (ALL_REDUCE, "all_gather") and c[3] != o[3]:  # the inner one names it
                outer[-1] = (o[0], o[1], o[2], c[3], o[4], max(o[5], c[5]), o[6])
            continue
        outer.append(c)
    if not outer:  # only the gloo work is in the trace: it is the cost
        return [(w[0], w[1], w[2], w[6], w[3], w[4], w[5]) for w in work]
    wstarts = [w[0] for w in work]
    used = [False] * len(work)
    host: dict[tuple[Any, Any], tuple[array[float], array[float]] | None] = {}
    out = []
    for ts, te, pid, coll, impl, nbytes, tid in outer:
        end = te
        j = bisect.bisect_left(wstarts, ts - 1.0)  # the gloo work this call enqueued
        while j < len(work) and (used[j] or work[j][3] != coll or work[j][2] != pid):
            j += 1
        if j < len(work):
            used[j] = True
            end = max(end, work[j][1])
            nbytes = nbytes or work[j][5]
            impl = "gloo"
        ops: tuple[array[float], array[float]] | None = None
        if impl not in SYNCHRONOUS_IMPLEMENTATIONS:
            if (pid, tid) in host:
                ops = host[(pid, tid)]
            else:  # (sorted when a caller first needs its thread's ops)
                flat = col.host_ops.get((pid, tid))
                ops = host[(pid, tid)] = None if flat is None else host_ops_by_start(flat)
        if ops is not None:  # the caller resumes at its next op
            starts, ends = ops
            k = bisect.bisect_left(starts, te)
            while k < len(starts) and ends[k] <= te:
                k += 1
            if k < len(starts):
                end = max(end, starts[k])
        out.append((ts, end, pid, tid, coll, impl, nbytes))
    return out


def cpu_passes(col: Collector, phases: Sequence[PhaseSpan]) -> list[PassRecord]:
    """Passes of a CPU (gloo) trace: busy = the span, comm = the caller's blocked time."""
    calls = _blocked_calls(col)
    starts = [c[0] for c in calls]
    occ: dict[str, int] = defaultdict(int)
    records = []
    for ph in phases:
        span = ph.span
        if span.end - span.ts <= 0:
            continue
        i0 = bisect.bisect_left(starts, span.ts)
        i1 = bisect.bisect_left(starts, span.end)
        cs = [c for c in calls[i0:i1] if c[2] == span.pid]  # (gloo work runs in the same process)
        comm = iv.clip([(c[0], c[1]) for c in cs], span.ts, span.end)
        colls = [(c[0], min(c[1], span.end), c[4], c[5], c[6], None) for c in cs]
        dur = span.end - span.ts
        records.append(_record(ph, occ[ph.label], span.ts, span.end, dur, comm, [], colls, cpu=True))
        occ[ph.label] += 1
    return records


def median_of_rank_means(reps: Iterable[Sequence[float]]) -> float:
    """``reps[r]`` = one repetition's value on each rank: per repetition the ranks' mean (a
    typical rank), then the median over repetitions. The profile's rows and ingest's phases
    both aggregate this way."""
    means = [sum(v) / len(v) for v in reps if len(v)]
    return median(means)


def collective_skew(durs: Mapping[Any, Sequence[tuple[Any, float]]]) -> tuple[dict[Any, float], bool]:
    """Seconds each rank waited in one pass's collectives: the one skew rule, for the profiler's
    analysis (profile/analysis.py) and ``specmodel ingest`` (trace/ingest.py) alike.

    ``durs[rank]`` = the pass's collectives on that rank, in issue order, as (key, seconds); key
    ``("seq", n)`` where the trace numbers its collectives (record_param_comms ``Seq``), else a
    position ``("ord", i, collective)``. A rank that arrives early waits inside the collective for
    the slowest, so its skew = Σ over matched collectives of (its duration − the shortest on any
    rank). Returns (skew by rank, matched): matched when every rank issued the same sequence. When
    they differ, numbered collectives still match by number (the common ones); positional keys
    match nothing (a collective missing on one rank shifts every later position), so skew is 0.
    """
    ranks = list(durs)
    if len(ranks) < 2:
        return {r: 0.0 for r in ranks}, True
    seqs = [tuple(k for k, _ in durs[r]) for r in ranks]
    matched = all(s == seqs[0] for s in seqs)
    if matched and len(set(seqs[0])) == len(seqs[0]):
        # every rank the same distinct keys in the same order: column-wise, the same sums as below
        cols = [[d for _, d in durs[r]] for r in ranks]
        fast = list(map(min, zip(*cols, strict=True)))
        return {r: sum([d - f for d, f in zip(col, fast, strict=True)]) for r, col in zip(ranks, cols, strict=True)}, True
    common: Iterable[Any]
    if matched:
        common = seqs[0]
    elif all(isinstance(k, tuple) and k[:1] == ("seq",) for s in seqs for k in s):
        common = set.intersection(*(set(s) for s in seqs))
    else:
        return {r: 0.0 for r in ranks}, False
    by_key = {r: dict(durs[r]) for r in ranks}
    fastest = {k: min(by_key[r][k] for r in ranks) for k in common}
    return {r: sum(by_key[r][k] - fastest[k] for k in fastest) for r in ranks}, matched
