"""What every engine plug-in shares: the records a log becomes and the plug-in shapes (the
number/line helpers each parser uses: :mod:`specmodel.engines.parse`).

A log plug-in (:class:`LogFormat`) says whether a file is its kind (``sniff``), turns it into a
:class:`LogFile` (``parse``), and turns parsed files into an accept-length distribution
(``summarize``); a metrics plug-in (:class:`MetricsFormat`, ``specmodel watch``) reads one
Prometheus page. Acceptance mixtures and pooled per-position rates are built by
:mod:`specmodel.model.accept`, never here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specmodel.errors import SpecmodelError
from specmodel.model import accept as acc

# ---------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True, kw_only=True)
class DecodeWindow:
    """One logged window: SGLang decode line, vLLM stats pair, or a bench_speculative row.

    ``accept_len`` is tokens per request per verify step incl. the bonus token (None when the
    server ran without speculation). ``tokens_per_s`` is the total generated tok/s of the window.
    ``steps``/``topk``/``num_draft_tokens`` are known only for bench rows (0 = baseline run).
    """

    file: str
    line: int
    engine: str
    batch: int
    accept_len: float | None
    tokens_per_s: float
    timestamp: str = ""
    rank: str = ""
    steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    completion_tokens: float | None = None  # bench rows: mean output tokens per request
    #: mean KV tokens per running request in the window (None when the log does not say):
    #: SGLang ``#token`` (or ``#full token``) / ``#running-req`` — ``#token`` is the KV pool in use
    #: by running requests (max_total − available − evictable, scheduler._get_token_info), so a
    #: prefix shared by several requests counts once; vLLM ``GPU KV cache usage`` × the startup
    #: ``GPU KV cache size: N tokens`` / ``Running`` when the log has that startup line.
    context_tokens: float | None = None
    #: per-position acceptance rates and number of drafts (verify steps) of the window, where the
    #: engine prints them (vLLM's SpecDecoding line); None elsewhere
    per_position: tuple[float, ...] | None = None
    drafts: float | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "engine": self.engine, "batch": self.batch,
                "accept_len": self.accept_len, "tokens_per_s": self.tokens_per_s, "timestamp": self.timestamp,
                "rank": self.rank, "steps": self.steps, "topk": self.topk, "num_draft_tokens": self.num_draft_tokens,
                "context_tokens": self.context_tokens}


def window_skip_reason(w: DecodeWindow) -> str | None:
    """Why ``w`` says nothing about speculation at load, or None when it is usable.

    One rule for ``accept`` (the distribution) and ``validate`` (the per-window error): a
    window with no running request or no tokens generated (the server idle between bursts;
    SGLang still prints its last ``accept len``) measured no verify step, and a window without
    an accept length (a baseline run) has none to give.
    """
    if w.batch < 1:
        return "#running-req 0"
    if w.tokens_per_s <= 0:
        return "throughput 0"
    if w.accept_len is None and w.steps != 0:
        return "no accept length"
    return None


CONFIG_FIELDS = ("model", "tp", "algorithm", "draft_model", "steps", "topk", "num_draft_tokens",
                 "decode_log_interval", "device", "speculative")


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """The server's own configuration as it logged it (None = not in the log).

    Each log plug-in reads its engine's start-up lines (``parse_config``); see the engine modules.
    """

    engine: str
    where: str
    model: str | None = None
    tp: int | None = None
    algorithm: str | None = None
    draft_model: str | None = None
    steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    decode_log_interval: int | None = None
    #: where the server ran: "cuda" (a GPU), "cpu", "npu", … (SGLang's "<device> graph:" key,
    #: vLLM's "<GPU|CPU> KV cache" lines and device_config=)
    device: str | None = None
    #: False when the server logged that it runs without speculative decoding
    speculative: bool | None = None

    def merged(self, other: EngineConfig) -> EngineConfig:
        """Fill this config's unknowns from ``other`` (a later line of the same log)."""
        vals = {f: getattr(self, f) if getattr(self, f) is not None else getattr(other, f)
                for f in CONFIG_FIELDS}
        return EngineConfig(engine=self.engine, where=self.where, **vals)

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in (("model", self.model), ("TP", self.tp), ("steps", self.steps),
                                          ("topk", self.topk), ("draft tokens", self.num_draft_tokens),
                                          ("device", self.device))
                 if v is not None]
        return f"{', '.join(parts)} ({self.where})"


@dataclass(frozen=True, kw_only=True)
class LogFile:
    """Everything matched in one file. ``engine`` is the name of the plug-in that read it;
    ``records`` holds that plug-in's own per-line records (vLLM: its ``SpecDecoding`` lines)."""

    path: str
    engine: str
    fmt: str
    lines_read: int
    lines_matched: int
    windows: tuple[DecodeWindow, ...] = ()
    records: tuple[Any, ...] = ()
    skipped: dict[str, int] = field(default_factory=dict)
    saved: dict[str, Any] | None = None  # a specmodel.accept document
    config: EngineConfig | None = None  # the server's logged start-up configuration
    warnings: tuple[str, ...] = ()  # e.g. a partial last line left out
    #: a speculative server that generated tokens without a single draft (vLLM prints its
    #: ``SpecDecoding`` line only for intervals with drafts, v1/spec_decode/metrics.py)
    proposed_nothing: bool = False
    #: tokens the server generated over the log (vLLM: its throughput lines x the logging period), or None
    generated_tokens: float | None = None
    #: the server's logging period (vLLM: :func:`~specmodel.engines.vllm.log.log_period_s`), or None
    period_s: float | None = None
    #: the reading format's ``description`` (set by the dispatcher, :func:`specmodel.engines.logs.parse_lines`)
    format_description: str = ""

    @property
    def vllm(self) -> tuple[Any, ...]:
        """vLLM ``SpecDecoding metrics`` records (kept under the name callers used before the split)."""
        return self.records if self.engine == "vllm" else ()

    @property
    def description(self) -> str:
        return self.format_description + (f" ({self.fmt})" if self.fmt else "")


@dataclass(frozen=True, kw_only=True)
class AcceptSummary:
    """What ``specmodel accept`` shows: the distribution and where it came from."""

    dist: acc.AcceptDist
    rates: tuple[float, ...] | None
    files: tuple[LogFile, ...]
    windows_used: int
    windows: tuple[DecodeWindow, ...] = ()  # the windows behind the distribution (tok/s series)
    notes: tuple[str, ...] = ()
    config: EngineConfig | None = None  # the server's logged configuration, when it logged one
    #: acceptance per context band, when the log gives each window's context (None: it does not,
    #: or all windows fall in one band)
    by_context: acc.AcceptByContext | None = None
    #: the share of request-steps that proposed, when the log measures it (0.0: a speculative server
    #: that generated tokens and proposed none); None: the log does not say
    proposal_rate: float | None = None
    #: (tokens per request-step, request-steps) of each window, where the log gives both
    #: (:func:`specmodel.model.accept.window_drift_rel` reads how far they moved); () elsewhere
    window_steps: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True, kw_only=True)
class SummaryInputs:
    """What a plug-in's ``summarize`` gets besides the parsed files (checked by :func:`specmodel.engines.logs.summarize_files`)."""

    max_tokens: int
    label: str
    num_spec_tokens: int | None
    #: given or logged; None: neither (the plug-in whose lines depend on it applies its engine's default)
    decode_log_interval: int | None


# ---------------------------------------------------------------------------------------------
# plug-in shapes


@dataclass(frozen=True, kw_only=True)
class LogFormat:
    """One engine log format. ``sniff(path, lines, first)`` → this plug-in reads the file;
    ``parse(path, lines, unterminated)`` → :class:`LogFile`; ``summarize(files, inputs)`` →
    :class:`AcceptSummary`; ``steps_of(files, num_spec_tokens)`` → the draft depth the files
    carry, or None. ``text``: a line-oriented server log (two text formats sniffing one file
    is an error: one server's log per file)."""

    name: str
    description: str  # "SGLang decode log": what `accept` prints per file
    help_name: str  # "SGLang server log": what the commands' help lists
    text: bool
    sniff: Callable[[str, Sequence[str], str], bool]
    parse: Callable[[str, list[str], bool], LogFile]
    summarize: Callable[[Sequence[LogFile], SummaryInputs], AcceptSummary]
    steps_of: Callable[[Sequence[LogFile], int | None], int | None]
    #: what to pass when ``steps_of`` is None (a :class:`~specmodel.errors.FieldError` tail: inputs as ``{field}``)
    steps_hint: str = "pass {steps}"
    kind: str = "log"


@dataclass(frozen=True, kw_only=True)
class MetricsSample:
    """One scrape of an engine's Prometheus page, engine-neutral.

    Counters (monotone totals since server start; None when the page lacks them): drafts,
    draft tokens, accepted tokens, accepted per position. Gauges: running requests, and, for
    engines that export acceptance itself as a gauge (SGLang), ``accept_len_gauge`` (tokens per
    verify step incl. the bonus token) and ``context_tokens`` (KV tokens per running request).
    """

    engine: str
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_pos: tuple[float, ...] | None = None
    running: float | None = None
    accept_len_gauge: float | None = None
    context_tokens: float | None = None
    gen_tokens: float | None = None  # generation tokens counter (vLLM), for tok/s
    engine_steps: float | None = None  # engine steps counter (vLLM: iteration_tokens_total histogram count)
    gen_tokens_per_s_gauge: float | None = None  # SGLang's gen throughput gauge
    model: str | None = None  # model_name label, when the page carries one
    #: the engine's own cost counters on this page (SGLang's device timer), read only by its
    #: format's ``live_costs``; None where the page has none
    live: Any = None


@dataclass(frozen=True, kw_only=True)
class MetricsFormat:
    """One engine's Prometheus ``/metrics`` page: ``sniff(text)``, ``parse(text, where)`` → :class:`MetricsSample`."""

    name: str
    description: str
    help_name: str
    sniff: Callable[[str], bool]
    parse: Callable[[str, str], MetricsSample]
    kind: str = "metrics"
    #: the same reading from series already parsed (name → samples), e.g. one scrape's values read
    #: back from a Prometheus server; ``series``: the metric names it reads (what a fleet query asks for)
    from_page: Callable[[dict[str, list[Any]], str], MetricsSample] | None = None
    series: tuple[str, ...] = ()
    #: the costs per cycle between two samples' ``live`` counters (a :class:`LiveCosts`), or why
    #: there are none (a reason string); None: the engine's page has no cost counters
    live_costs: Callable[[Any, Any], Any] | None = None


class LiveCosts(Protocol):
    """Per-cycle costs a server's page measured over a window, on its own ``clock``; None: not seen
    (``unknown`` says why)."""

    clock: str
    verify_s: float | None
    decode_s: float | None
    draft_s: float | None
    host_s: float | None
    cycles: float
    unknown: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]: ...


def finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


# ---------------------------------------------------------------------------------------------
# the engine record


#: how an engine's /metrics page publishes acceptance: monotone totals since the server started
#: (a window is the difference of two scrapes) or gauges of the last logged window (a window
#: averages the scrapes). A plug-in is read with its kind's meaning only.
COUNTERS, GAUGES = "counters", "gauges"


class ConfigLike(Protocol):
    """One speculative configuration (a plan's :class:`specmodel.model.optimize.Candidate`)."""

    @property
    def steps(self) -> int: ...
    @property
    def topk(self) -> int: ...
    @property
    def num_draft_tokens(self) -> int: ...


class RangeLike(ConfigLike, Protocol):
    """Batches start..end running k draft tokens (:class:`specmodel.model.schedule.BatchRange`)."""

    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def k(self) -> int: ...


class ScheduleLike(Protocol):
    """One context's batch schedule (:class:`specmodel.model.schedule.ContextSchedule`)."""

    @property
    def max_k(self) -> int: ...
    @property
    def ranges(self) -> Sequence[RangeLike]: ...


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """Everything specmodel knows about one serving engine, in one record (docs/engines.md).

    Readers: ``metrics_format`` / ``log_format`` name its plug-ins in :data:`ENGINES`;
    ``metrics_kind`` (:data:`COUNTERS` / :data:`GAUGES`) says how ``watch`` reads the page, and
    ``metric_names`` the spec-decode metrics a page of a speculating server carries. Methods:
    ``methods`` (its rows of :data:`specmodel.schema.phases.METHODS`) and ``method_for`` (a
    profile's algorithm in the engine's spelling). Writers: ``paste`` (one configuration as the
    engine's flags, None where it cannot run it), ``base_config`` / ``write_band`` /
    ``check_band`` / ``format_band`` / ``schedule_notes`` (the per-batch schedule of ``plan
    --engine``). ``chains_only``: it drafts chains (topk 1), so plans and schedules search topk 1;
    ``static_trees``: its static flags may run trees (a second, unrestricted plan for them).
    The live-timing hook: ``hook_module`` and the hook's ``step_format`` (None: no hook).
    """

    name: str
    label: str
    metrics_kind: str
    metrics_format: str | None
    log_format: str | None
    metric_names: tuple[str, ...]
    methods: tuple[str, ...]
    method_for: Callable[[str], str]
    chains_only: bool
    static_trees: bool
    paste: Callable[[ConfigLike, str], str | None]
    base_config: Callable[[str, dict[str, Any] | None, str | None], dict[str, Any]]
    write_band: Callable[[ScheduleLike, ScheduleLike, str, dict[str, Any], dict[str, Any]], dict[str, Any]]
    check_band: Callable[[dict[str, Any], str], None]
    format_band: Callable[[dict[str, Any]], list[str]]
    schedule_notes: Callable[[Sequence[ScheduleLike], dict[str, Any]], list[str]]
    schedule_source: str
    hook_module: str | None = None
    step_format: str | None = None
    #: whether the engine's k = 0 still runs a drafter forward for this base configuration (then an
    #: "off" range is not free, and a marginal batch keeps its k)
    k0_runs_drafter: Callable[[dict[str, Any]], bool] = lambda base: False
    #: whether the engine can price its speculation from a verify-cost table it times at start-up at
    #: one context (vLLM 0.34's adaptive verification): ``plan`` then states the error that table inherits
    startup_verify_table: bool = False

    def __post_init__(self) -> None:
        if self.metrics_kind not in (COUNTERS, GAUGES):
            raise ValueError(f"engine {self.name}: metrics_kind must be {COUNTERS!r} or {GAUGES!r}")
        if not self.methods:
            raise ValueError(f"engine {self.name}: needs at least one method")


def check_batch_ranges(entries: Any, what: str) -> list[tuple[int, int, int]]:
    """Inclusive, non-overlapping ``[start, end, k]`` integer ranges, the first at batch 1, k >= 0
    (the shape every engine's per-batch schedule has; vLLM 0.32 applies exactly these checks in
    ``validate_and_normalize_dynamic_sd_schedule``)."""
    if not isinstance(entries, list) or not entries:
        raise SpecmodelError(f"{what}: must be a non-empty list of [start, end, k]")
    parsed = []
    for e in entries:
        if not isinstance(e, (list, tuple)) or len(e) != 3 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                      for x in e):
            raise SpecmodelError(f"{what}: entry {e!r} is not [start, end, k] integers")
        s, t, k = e
        if s <= 0 or t <= 0 or s > t or k < 0:
            raise SpecmodelError(f"{what}: entry {e!r} needs 1 <= start <= end, k >= 0")
        parsed.append((s, t, k))
    parsed.sort()
    prev = 0
    for s, t, _ in parsed:
        if s <= prev:
            raise SpecmodelError(f"{what}: ranges overlap")
        prev = t
    if parsed[0][0] != 1:
        raise SpecmodelError(f"{what}: the first range must start at batch 1")
    return parsed
