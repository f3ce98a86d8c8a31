"""The records a profile holds: a cost row per measured forward (:class:`CostRow`), the all-reduce
points and their α-β fit, the speculative configuration (:class:`SpecConfig`), a host proposer's
costs (:class:`HostProposer`) and the request-level costs (:class:`RequestCosts`).

Each record validates itself in ``__post_init__`` and reads and writes its own dict; the document that
holds them, its version and its one reader/writer pair are :mod:`specmodel.schema.profile` (a field
added to a record bumps that document's version there, in :data:`specmodel.schema.formats.PROFILE`).
All quantities SI."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specmodel.errors import SpecmodelError
from specmodel.limits import (
    MAX_BATCH,
    MAX_CI95_REL,
    MAX_CONTEXT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_PROFILE_DURATION_S,
    MAX_ROW_SAMPLES,
    MAX_STEPS,
    MAX_TOPK,
    MIN_FORWARD_S,
    MIN_LINK_BYTES_PER_S,
)
from specmodel.schema.fields import at_record, read_int, read_num
from specmodel.schema.phases import FORWARD_KINDS, max_draft_tokens

if TYPE_CHECKING:
    pass


#: Forward kinds a cost row can describe (the phase vocabulary of :mod:`specmodel.schema.phases`).
KINDS = FORWARD_KINDS

#: |total - (allreduce + compute + other)| allowed, relative to total.
_SUM_TOLERANCE = 0.02


#: a row's ``allreduce_source`` (v6): "" not said, "wrapper" timed around each all-reduce, "capture" a profiler capture's share
ALLREDUCE_SOURCES = ("", "wrapper", "capture")
#: the profile version that added a row's ``allreduce_source``
ALLREDUCE_SOURCE_VERSION = 6


def _allreduce_source(d: Mapping[str, Any], where: str) -> str:
    v = d.get("allreduce_source", "")
    if not isinstance(v, str):
        raise SpecmodelError(f"{where}: allreduce_source: expected a string, got {type(v).__name__}")
    return v


@dataclass(frozen=True, kw_only=True)
class CostRow:
    """Cost of one forward pass of ``kind`` over ``tokens`` tokens for ``batch`` requests,
    each request attending over ``context_tokens`` tokens of KV cache (schema v2).

    ``total_s = allreduce_s + compute_s + other_s``; ``allreduce_s`` is the time ranks
    spend in all-reduce (transfer + waiting), ``skew_s`` the part of it that is waiting
    for the slowest rank. ``allreduce_msg_bytes`` is the size of one all-reduce message.
    """

    kind: str
    batch: int
    tokens: int
    total_s: float
    allreduce_s: float
    compute_s: float
    other_s: float = 0.0
    n_allreduce: int = 0
    allreduce_msg_bytes: int = 0
    spread_s: float = 0.0
    skew_s: float = 0.0
    samples: int = 1
    context_tokens: int = 0
    #: half-width of the 95 % interval of ``total_s`` (its median over repetitions) relative to it;
    #: None when unknown (a reference profile, too few repetitions). Optional in v2 files.
    ci95_rel: float | None = None
    #: where ``allreduce_s`` came from (v6): "wrapper" (the vLLM hook timed each all-reduce), "capture"
    #: (a torch.profiler capture's share of the phase × the row's forward time: the wrapper did not
    #: see it, e.g. a CUDA-graph replay), "" (not said: every other source, older profiles)
    allreduce_source: str = ""

    @property
    def key(self) -> tuple[str, int, int, int]:
        """What makes a row unique in a profile: (kind, batch, tokens, context_tokens)."""
        return (self.kind, self.batch, self.tokens, self.context_tokens)

    @property
    def where(self) -> str:
        ctx = f", context={self.context_tokens}" if self.context_tokens else ""
        return f"cost row {self.kind}(batch={self.batch}, tokens={self.tokens}{ctx})"

    def __post_init__(self) -> None:
        where = self.where
        if self.kind not in KINDS:
            raise SpecmodelError(f"cost row: kind: unknown {self.kind!r} (expected one of {', '.join(KINDS)})")
        if self.batch < 1:
            raise SpecmodelError(f"{where}: batch must be >= 1")
        if self.tokens < self.batch:
            raise SpecmodelError(f"{where}: tokens must be >= batch")
        if self.batch > MAX_BATCH or self.tokens > MAX_BATCH * MAX_DRAFT_TOKENS:
            raise SpecmodelError(f"{where}: batch must be <= {MAX_BATCH} and tokens <= {MAX_BATCH * MAX_DRAFT_TOKENS}")
        for name in ("total_s", "allreduce_s", "compute_s", "other_s", "spread_s", "skew_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or math.isnan(v) or math.isinf(v) or v < 0:
                raise SpecmodelError(f"{where}: {name} must be a finite number >= 0, got {v!r}")
            if v > MAX_PROFILE_DURATION_S:
                raise SpecmodelError(f"{where}: {name} must be <= {MAX_PROFILE_DURATION_S:g} s, got {v:g}")
        if self.total_s <= 0:
            raise SpecmodelError(f"{where}: total_s must be > 0")
        if not MIN_FORWARD_S <= self.total_s <= 1e3:  # 1 ns .. 1000 s: outside is a unit error, and NaN plots
            raise SpecmodelError(f"{where}: total_s must be within 1e-9..1e3 s (one forward pass), got {self.total_s:g}")
        parts = self.allreduce_s + self.compute_s + self.other_s
        if abs(parts - self.total_s) > _SUM_TOLERANCE * self.total_s + 1e-12:
            raise SpecmodelError(
                f"{where}: allreduce_s + compute_s + other_s = {parts:.6g} s does not add up to total_s = {self.total_s:.6g} s"
            )
        if self.skew_s > self.allreduce_s * (1 + _SUM_TOLERANCE) + 1e-12:
            raise SpecmodelError(f"{where}: skew_s must not exceed allreduce_s")
        if isinstance(self.context_tokens, bool) or not isinstance(self.context_tokens, int) or self.context_tokens < 0:
            raise SpecmodelError(f"{where}: context_tokens must be an integer >= 0, got {self.context_tokens!r}")
        if self.context_tokens > MAX_CONTEXT_TOKENS:
            raise SpecmodelError(f"{where}: context_tokens must be <= {MAX_CONTEXT_TOKENS}, got {self.context_tokens}")
        if self.n_allreduce < 0 or self.allreduce_msg_bytes < 0 or self.samples < 1:
            raise SpecmodelError(f"{where}: n_allreduce/allreduce_msg_bytes must be >= 0 and samples >= 1")
        if self.samples > MAX_ROW_SAMPLES:
            raise SpecmodelError(f"{where}: samples must be <= {MAX_ROW_SAMPLES}, got {self.samples}")
        if self.allreduce_source not in ALLREDUCE_SOURCES:
            raise SpecmodelError(f"{where}: allreduce_source: expected one of {', '.join(map(repr, ALLREDUCE_SOURCES))}, "
                                 f"got {self.allreduce_source!r}")
        if self.ci95_rel is not None and (isinstance(self.ci95_rel, bool) or not isinstance(self.ci95_rel, (int, float))
                                          or not math.isfinite(self.ci95_rel) or not 0 <= self.ci95_rel <= MAX_CI95_REL):
            raise SpecmodelError(f"{where}: ci95_rel must be a number in 0..{MAX_CI95_REL:g} or null, got {self.ci95_rel!r}")

    @property
    def allreduce_frac(self) -> float:
        return self.allreduce_s / self.total_s

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str, *, default_context_tokens: int | None = None) -> CostRow:
        """``default_context_tokens`` is given for v1 files (no ``context_tokens`` field)."""
        if not isinstance(d, Mapping):
            raise SpecmodelError(f"{where}: expected an object")
        kind = d.get("kind")
        if not isinstance(kind, str):
            raise SpecmodelError(f"{where}: kind: missing or not a string")
        try:
            return cls._build(d, kind, where, default_context_tokens)
        except SpecmodelError as exc:
            raise at_record(exc, where) from None

    @classmethod
    def _build(cls, d: Mapping[str, Any], kind: str, where: str, default_context_tokens: int | None) -> CostRow:
        if default_context_tokens is None:
            context = read_int(d, "context_tokens", where)
        else:
            context = read_int(d, "context_tokens", where, optional=True, default=default_context_tokens)
        return cls(
            kind=kind,
            batch=read_int(d, "batch", where, minimum=1),
            tokens=read_int(d, "tokens", where, minimum=1),
            total_s=read_num(d, "total_s", where, strict=True),
            allreduce_s=read_num(d, "allreduce_s", where),
            compute_s=read_num(d, "compute_s", where),
            other_s=read_num(d, "other_s", where, optional=True),
            n_allreduce=read_int(d, "n_allreduce", where, optional=True),
            allreduce_msg_bytes=read_int(d, "allreduce_msg_bytes", where, optional=True),
            spread_s=read_num(d, "spread_s", where, optional=True),
            skew_s=read_num(d, "skew_s", where, optional=True),
            samples=read_int(d, "samples", where, minimum=1, optional=True, default=1),
            context_tokens=context,
            ci95_rel=read_num(d, "ci95_rel", where) if d.get("ci95_rel") is not None else None,
            allreduce_source=_allreduce_source(d, where),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "batch": self.batch,
            "tokens": self.tokens,
            "context_tokens": self.context_tokens,
            "total_s": self.total_s,
            "allreduce_s": self.allreduce_s,
            "compute_s": self.compute_s,
            "other_s": self.other_s,
            "n_allreduce": self.n_allreduce,
            "allreduce_msg_bytes": self.allreduce_msg_bytes,
            "spread_s": self.spread_s,
            "skew_s": self.skew_s,
            "samples": self.samples,
            **({"ci95_rel": self.ci95_rel} if self.ci95_rel is not None else {}),
            **({"allreduce_source": self.allreduce_source} if self.allreduce_source else {}),
        }


@dataclass(frozen=True, kw_only=True)
class AllReducePoint:
    """One measured all-reduce: message size, TP degree, latency (median)."""

    msg_bytes: int
    tp: int
    latency_s: float
    spread_s: float = 0.0

    def __post_init__(self) -> None:
        if self.msg_bytes < 0 or self.tp < 1:
            raise SpecmodelError("allreduce point: msg_bytes must be >= 0 and tp >= 1")
        if not math.isfinite(self.latency_s) or not 0 < self.latency_s <= MAX_PROFILE_DURATION_S:
            raise SpecmodelError(f"allreduce point ({self.msg_bytes} B): latency_s must be finite, > 0 and "
                                 f"<= {MAX_PROFILE_DURATION_S:g} s, got {self.latency_s!r}")
        if not math.isfinite(self.spread_s) or not 0 <= self.spread_s <= MAX_PROFILE_DURATION_S:
            raise SpecmodelError(f"allreduce point ({self.msg_bytes} B): spread_s must be finite and in "
                                 f"0..{MAX_PROFILE_DURATION_S:g} s, got {self.spread_s!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str) -> AllReducePoint:
        if not isinstance(d, Mapping):
            raise SpecmodelError(f"{where}: expected an object")
        try:
            return cls(
                msg_bytes=read_int(d, "msg_bytes", where),
                tp=read_int(d, "tp", where, minimum=1),
                latency_s=read_num(d, "latency_s", where, strict=True),
                spread_s=read_num(d, "spread_s", where, optional=True),
            )
        except SpecmodelError as exc:
            raise at_record(exc, where) from None

    def to_dict(self) -> dict[str, Any]:
        return {"msg_bytes": self.msg_bytes, "tp": self.tp, "latency_s": self.latency_s, "spread_s": self.spread_s}


@dataclass(frozen=True, kw_only=True)
class AllReduceFit:
    """α-β all-reduce model fitted at TP degree ``tp`` (see :mod:`specmodel.model.allreduce`)."""

    alpha_s: float
    beta_bytes_per_s: float
    tp: int
    algorithm: str = "ring"

    def __post_init__(self) -> None:
        if not math.isfinite(self.alpha_s) or not 0 <= self.alpha_s <= MAX_PROFILE_DURATION_S:
            raise SpecmodelError(f"allreduce_fit: alpha_s must be finite and in 0..{MAX_PROFILE_DURATION_S:g} s, "
                                 f"got {self.alpha_s!r}")
        if not math.isfinite(self.beta_bytes_per_s) or self.beta_bytes_per_s < MIN_LINK_BYTES_PER_S:
            raise SpecmodelError(f"allreduce_fit: beta_bytes_per_s must be finite and >= {MIN_LINK_BYTES_PER_S:g}, "
                                 f"got {self.beta_bytes_per_s!r}")
        if self.tp < 1:
            raise SpecmodelError("allreduce_fit: tp must be >= 1")
        if self.algorithm not in ("ring", "oneshot", "twoshot"):
            raise SpecmodelError(f"allreduce_fit: algorithm: unknown {self.algorithm!r} (ring, oneshot, twoshot)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str) -> AllReduceFit:
        if not isinstance(d, Mapping):
            raise SpecmodelError(f"{where}: expected an object")
        algo = d.get("algorithm", "ring")
        if not isinstance(algo, str):
            raise SpecmodelError(f"{where}: algorithm: expected a string")
        try:
            return cls(
                alpha_s=read_num(d, "alpha_s", where),
                beta_bytes_per_s=read_num(d, "beta_bytes_per_s", where, strict=True),
                tp=read_int(d, "tp", where, minimum=1),
                algorithm=algo,
            )
        except SpecmodelError as exc:
            raise at_record(exc, where, "allreduce_fit: ") from None

    def to_dict(self) -> dict[str, Any]:
        return {"alpha_s": self.alpha_s, "beta_bytes_per_s": self.beta_bytes_per_s, "tp": self.tp,
                "algorithm": self.algorithm}


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    """Speculative-decoding shape (SGLang names).

    ``steps`` = ``--speculative-num-steps`` (draft depth), ``topk`` =
    ``--speculative-eagle-topk`` (branching), ``num_draft_tokens`` =
    ``--speculative-num-draft-tokens`` (tokens verified per request, root included).
    At most ``steps + 1`` tokens are emitted per verify step (bonus token included).
    """

    algorithm: str = "EAGLE3"
    steps: int = 3
    topk: int = 1
    num_draft_tokens: int = 4

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise SpecmodelError(f"spec.steps: must be >= 1, got {self.steps}")
        if self.topk < 1:
            raise SpecmodelError(f"spec.topk: must be >= 1, got {self.topk}")
        # bounded: the model allocates per step (a file's steps: 1e9 must not exhaust memory)
        for fld, v, hi in (("steps", self.steps, MAX_STEPS), ("topk", self.topk, MAX_TOPK),
                           ("num_draft_tokens", self.num_draft_tokens, MAX_DRAFT_TOKENS)):
            if v > hi:
                raise SpecmodelError(f"spec.{fld}: must be <= {hi}, got {v}")
        if self.num_draft_tokens < 2:
            raise SpecmodelError(f"spec.num_draft_tokens: must be >= 2, got {self.num_draft_tokens}")
        if self.topk == 1 and self.num_draft_tokens > self.steps + 1:
            raise SpecmodelError(
                f"spec.num_draft_tokens: with topk 1 at most steps + 1 = {self.steps + 1}, got {self.num_draft_tokens}"
            )
        hi = max_draft_tokens(self.steps, self.topk)
        if self.num_draft_tokens > hi:
            raise SpecmodelError(
                f"spec.num_draft_tokens: at most topk + (steps-1)*topk^2 + 1 = {hi} (the nodes SGLang drafts, "
                f"plus the root), got {self.num_draft_tokens}"
            )

    @property
    def max_accept_tokens(self) -> int:
        """Largest tokens/step a verify can emit: every draft accepted, plus the bonus."""
        return self.steps + 1

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str) -> SpecConfig:
        algo = d.get("algorithm", "EAGLE3")
        if not isinstance(algo, str):
            raise SpecmodelError(f"{where}: algorithm: expected a string")
        return cls(
            algorithm=algo,
            steps=read_int(d, "steps", where, minimum=1, optional=True, default=3),
            topk=read_int(d, "topk", where, minimum=1, optional=True, default=1),
            num_draft_tokens=read_int(d, "num_draft_tokens", where, minimum=2, optional=True, default=4),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "steps": self.steps, "topk": self.topk,
                "num_draft_tokens": self.num_draft_tokens}


#: The profile version that added :class:`HostProposer`; a profile without one is written as v2.
HOST_PROPOSER_VERSION = 3


def _check_rows(rows: Sequence[CostRow], kind: str, where: str) -> None:
    """A block's own cost rows: all of ``kind``, no two with one key."""
    seen: set[tuple[str, int, int, int]] = set()
    for row in rows:
        if row.kind != kind:
            raise SpecmodelError(f"{where}: {row.where}: only {kind} rows")
        if row.key in seen:
            raise SpecmodelError(f"{where}: duplicate {row.where}")
        seen.add(row.key)


@dataclass(frozen=True, kw_only=True)
class HostProposer:
    """What the speculative server of a host proposer (vLLM ``ngram`` / ``suffix``) measured beside
    its verify steps (profile v3, ``host_proposer``; written by ``specmodel vllm --summarize``).

    * ``proposal_rate`` = ``proposed_request_steps / request_steps``: request-steps whose proposal
      the engine verified over the request-steps that ran the lookup (vLLM's ``num_drafts`` over
      generated − accepted tokens);
    * ``lookup_s``: median lookup time over *every* step that ran it (a miss costs a lookup too);
    * ``decode``: the speculative server's own decode-shaped steps (no request proposed that step),
      priced like the baseline's decode rows (forward + the step's host work + scheduling gap; the
      lookup is ``lookup_s``, not in the row). They are kept out of ``costs``: the baseline decode
      rows come from the server without speculation only.
    """

    method: str
    proposal_rate: float
    request_steps: int
    proposed_request_steps: int
    lookup_s: float
    lookup_steps: int
    decode: tuple[CostRow, ...] = ()

    def __post_init__(self) -> None:
        w = "profile: host_proposer"
        if not isinstance(self.method, str) or not self.method:
            raise SpecmodelError(f"{w}: method: expected a non-empty string, got {self.method!r}")
        for name in ("request_steps", "proposed_request_steps", "lookup_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecmodelError(f"{w}: {name}: expected an integer >= 0, got {v!r}")
        if self.proposed_request_steps > self.request_steps:
            raise SpecmodelError(f"{w}: proposed_request_steps ({self.proposed_request_steps}) exceeds "
                                 f"request_steps ({self.request_steps})")
        r = self.proposal_rate
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or not 0.0 <= r <= 1.0:
            raise SpecmodelError(f"{w}: proposal_rate: expected a number in [0, 1], got {r!r}")
        if self.request_steps and abs(r - self.proposed_request_steps / self.request_steps) > 1e-6:
            raise SpecmodelError(f"{w}: proposal_rate {r:g} is not proposed_request_steps / request_steps = "
                                 f"{self.proposed_request_steps}/{self.request_steps}")
        v = self.lookup_s
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= 1e3:
            raise SpecmodelError(f"{w}: lookup_s: expected seconds in 0..1000, got {v!r}")
        _check_rows(self.decode, "decode", f"{w}: decode")

    @classmethod
    def from_dict(cls, d: Any, where: str) -> HostProposer:
        if not isinstance(d, Mapping):
            raise SpecmodelError(f"{where}: expected an object")
        rows = d.get("decode", [])
        if not isinstance(rows, list):
            raise SpecmodelError(f"{where}: decode: expected a list")
        method = d.get("method")
        if not isinstance(method, str):
            raise SpecmodelError(f"{where}: method: expected a string, got {method!r}")
        try:
            return cls(method=method, proposal_rate=read_num(d, "proposal_rate", where),
                       request_steps=read_int(d, "request_steps", where),
                       proposed_request_steps=read_int(d, "proposed_request_steps", where),
                       lookup_s=read_num(d, "lookup_s", where), lookup_steps=read_int(d, "lookup_steps", where),
                       decode=tuple(CostRow.from_dict(r, f"{where}: decode[{i}]") for i, r in enumerate(rows)))
        except SpecmodelError as exc:
            raise at_record(exc, where, "profile: host_proposer: ") from None

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "proposal_rate": self.proposal_rate, "request_steps": self.request_steps,
                "proposed_request_steps": self.proposed_request_steps, "lookup_s": self.lookup_s,
                "lookup_steps": self.lookup_steps, "decode": [r.to_dict() for r in self.decode]}


REQUESTS_VERSION = 4


def prompt_tokens_of(steps: Sequence[tuple[int, int, int]]) -> int:
    """The prompt length per request of prefill steps ``(batch, tokens, count)``: the median tokens of
    the single-request ones (a batch-1 prefill is one whole prompt), else the median tokens per
    request -- a batched prefill step also carries the other requests' decode tokens (4 requests,
    181 tokens: three 60-token prompts and one decode), so it reads low. Shared by ``--summarize``
    (steps) and predict (a profile's extend rows, weighted by their steps)."""
    ones = [(float(t), n) for b, t, n in steps if b == 1 and n > 0]
    pts = ones or [(t / b, n) for b, t, n in steps if b >= 1 and n > 0]
    if not pts:
        raise ValueError("prompt_tokens_of: no prefill step")
    pts.sort()
    half, acc = sum(n for _, n in pts) / 2.0, 0
    for v, n in pts:
        acc += n
        if acc >= half:
            return max(1, round(v))
    return max(1, round(pts[-1][0]))


@dataclass(frozen=True, kw_only=True)
class RequestCosts:
    """What a request costs beside its decode steps (profile v4, ``requests``; written by
    ``specmodel vllm --summarize``), so a prediction for a request of N output tokens can price the
    request end to end (:mod:`specmodel.model.request`):

    * ``prompt_tokens``: the median prompt length per request of the prefill steps recorded (the
      request shape profiled; a prediction at another prompt length scales the prefill rows);
    * the baseline server's prefill steps are its ``extend`` rows in ``costs``; ``spec_prefill``
      holds the speculative server's own (the target's prefill plus the drafter's over the prompt),
      empty when that server recorded none;
    * ``baseline_outside_s`` / ``spec_outside_s``: per request, the time the server spent outside
      the engine's steps -- its front end before the request reached the engine and after the last
      token left it -- from the server's own ``/metrics`` (end-to-end latency less queue and
      inference time, over ``*_requests`` finished requests); None when no ``/metrics`` was kept.
    """

    prompt_tokens: int
    spec_prefill: tuple[CostRow, ...] = ()
    baseline_outside_s: float | None = None
    spec_outside_s: float | None = None
    baseline_requests: int = 0
    spec_requests: int = 0

    def __post_init__(self) -> None:
        w = "profile: requests"
        for name in ("prompt_tokens", "baseline_requests", "spec_requests"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecmodelError(f"{w}: {name}: expected an integer >= 0, got {v!r}")
        if not 1 <= self.prompt_tokens <= MAX_CONTEXT_TOKENS:
            raise SpecmodelError(f"{w}: prompt_tokens: expected 1..{MAX_CONTEXT_TOKENS}, got {self.prompt_tokens}")
        for name, n in (("baseline_outside_s", "baseline_requests"), ("spec_outside_s", "spec_requests")):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= 1e3:
                raise SpecmodelError(f"{w}: {name}: expected seconds in 0..1000 or null, got {v!r}")
            if getattr(self, n) < 1:
                raise SpecmodelError(f"{w}: {name} is given but {n} is {getattr(self, n)}: a time per request "
                                     "needs at least one finished request")
        _check_rows(self.spec_prefill, "extend", f"{w}: spec_prefill")

    @classmethod
    def from_dict(cls, d: Any, where: str) -> RequestCosts:
        if not isinstance(d, Mapping):
            raise SpecmodelError(f"{where}: expected an object")
        rows = d.get("spec_prefill", [])
        if not isinstance(rows, list):
            raise SpecmodelError(f"{where}: spec_prefill: expected a list")

        def opt(key: str) -> float | None:
            return None if d.get(key) is None else read_num(d, key, where)

        try:
            return cls(prompt_tokens=read_int(d, "prompt_tokens", where, minimum=1),
                       spec_prefill=tuple(CostRow.from_dict(r, f"{where}: spec_prefill[{i}]")
                                          for i, r in enumerate(rows)),
                       baseline_outside_s=opt("baseline_outside_s"), spec_outside_s=opt("spec_outside_s"),
                       baseline_requests=read_int(d, "baseline_requests", where, optional=True),
                       spec_requests=read_int(d, "spec_requests", where, optional=True))
        except SpecmodelError as exc:
            raise at_record(exc, where, "profile: requests: ") from None

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "spec_prefill": [r.to_dict() for r in self.spec_prefill],
                "baseline_outside_s": self.baseline_outside_s, "spec_outside_s": self.spec_outside_s,
                "baseline_requests": self.baseline_requests, "spec_requests": self.spec_requests}
