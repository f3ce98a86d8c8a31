"""The profile: the contract between every measuring front end and the model.

A profile is one JSON file (``profile.json``, usually in ``profiles/<name>/``) holding:

* provenance: ``source`` (a typed :class:`Source`), ``hardware``, ``model`` (free-form dicts);
* the speculative configuration it was measured for (``spec``);
* a cost table: one :class:`CostRow` per measured forward kind × batch × tokens, each
  split into all-reduce / compute / other seconds;
* optional all-reduce latency points (bytes → seconds) and a fitted α-β model;
* ``overhead_s``: per speculative cycle cost that lives in no forward (scheduler,
  tree building, sampling); calibration fills it.

All quantities are SI (seconds, bytes). Everything is validated on load; any
problem raises :class:`~specmodel.errors.SpecmodelError` naming the file and field.

The document and the records it holds stay in this one module: they are one versioned contract (a
field added to any record bumps the version here), read and written by one pair of functions. The
box conditions (:mod:`specmodel.schema.conditions`) and the field readers
(:mod:`specmodel.schema.fields`) sit below it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.io import PREVIOUS, atomic_write_json, read_json, refuse_shipped, replace_dir
from specmodel.limits import (
    MAX_BATCH,
    MAX_CI95_REL,
    MAX_CONTEXT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_PROFILE_DURATION_S,
    MAX_ROW_SAMPLES,
    MAX_STEPS,
    MAX_TOPK,
    MAX_TP,
    MIN_FORWARD_S,
    MIN_LINK_BYTES_PER_S,
)
from specmodel.schema.conditions import CONDITIONS_VERSION, Conditions
from specmodel.schema.fields import at_record, read_dict, read_int, read_num
from specmodel.schema.formats import PROFILE
from specmodel.schema.phases import CYCLE_KINDS, FORWARD_KINDS, max_draft_tokens
from specmodel.schema.seams import MissingSeam

if TYPE_CHECKING:
    import pandas as pd

PROFILE_SCHEMA = PROFILE.name
PROFILE_SCHEMA_VERSION = PROFILE.version
#: Older versions this reader still accepts (v1 rows carry no ``context_tokens``; the profile's
#: recorded ``model.context_len`` becomes every row's context).
PROFILE_READABLE_VERSIONS = PROFILE.readable_versions

#: Forward kinds a cost row can describe (the phase vocabulary of :mod:`specmodel.schema.phases`).
KINDS = FORWARD_KINDS

#: |total - (allreduce + compute + other)| allowed, relative to total.
_SUM_TOLERANCE = 0.02


#: a row's ``allreduce_source`` (v6): "" not said, "wrapper" timed around each all-reduce, "capture" a profiler capture's share
ALLREDUCE_SOURCES = ("", "wrapper", "capture")
#: the profile version that added a row's ``allreduce_source``
ALLREDUCE_SOURCE_VERSION = 6
#: the profile version that added ``missing_seams`` (the engine seams the hook could not wrap)
MISSING_SEAMS_VERSION = 7


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


#: Where a profile's costs came from (``source.kind``): measured by ``specmodel profile``, ingested
#: from traces or hook logs, derived (a profile re-costed with a measured all-reduce fit), the shipped
#: reference, a baseline sweep CSV, plain numbers on the command line.
SOURCE_KINDS = ("measured", "ingested", "derived", "reference", "sweep", "numbers")
#: The kinds measured on the user's own box: a bare command picks one up from ./profiles.
OWN_BOX_KINDS = ("measured", "ingested", "derived")
#: The costs a flag, a sweep or a fit can replace, each recorded in ``Source.cost_origin``.
COST_KEYS = ("decode", "verify", "draft", "overhead", "allreduce")

#: ``Source.tool`` of a profile summarized from an engine hook's logs (:meth:`Source.hook_summary`).
HOOK_TOOLS = ("specmodel sglang", "specmodel vllm")

_SOURCE_STR = ("tool", "description", "created_utc", "method", "engine", "engine_version", "allreduce_from")
_SOURCE_LIST = ("files", "derived_from")


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where a profile's costs came from (the profile's ``source`` object), typed and frozen.

    Build one with the constructor of its origin (:meth:`measured`, :meth:`hook_summary`,
    :meth:`ingested`, :meth:`sweep`, :meth:`reference`, :meth:`numbers`, :meth:`derived`);
    change one with :meth:`with_origins` / :meth:`with_description`. ``cost_origin`` names,
    per replaced cost (:data:`COST_KEYS`), who replaced it (a flag, a sweep); ``tp_known`` is
    False for plain numbers without ``--tp``. Keys a front end records for people (an ingest's
    per-phase table, a hook's clock) are kept in ``details`` and written back unchanged. On disk
    the same JSON object as before (format ``specmodel.profile`` v2, no new version needed):
    ``cost_origin`` is written only when set, ``tp_known`` only when False.
    """

    kind: str | None = None
    description: str = ""
    tool: str = ""
    created_utc: str = ""
    method: str = ""
    files: tuple[str, ...] = ()
    engine: str = ""
    engine_version: str = ""
    derived_from: tuple[str, ...] = ()
    allreduce_from: str = ""
    cost_origin: tuple[tuple[str, str], ...] = ()
    tp_known: bool = True
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in SOURCE_KINDS:
            raise SpecmodelError(f"profile: source: kind: unknown {self.kind!r} (expected one of {', '.join(SOURCE_KINDS)})")
        for key, _ in self.cost_origin:
            if key not in COST_KEYS:
                raise SpecmodelError(f"profile: source: cost_origin: unknown cost {key!r} (expected one of "
                                     f"{', '.join(COST_KEYS)})")
        clash = sorted(set(self.details) & {f.name for f in fields(Source)})
        if clash:
            raise SpecmodelError(f"profile: source: details: {clash[0]!r} is a typed field")
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))  # read-only, like the rest

    # ---- one constructor per origin
    @classmethod
    def measured(cls, *, tool: str, description: str, created_utc: str, method: str) -> Source:
        """``specmodel profile``: forwards timed on this box."""
        return cls(kind="measured", tool=tool, description=description, created_utc=created_utc, method=method)

    @classmethod
    def hook_summary(cls, *, engine: str, engine_version: str, files: tuple[str, ...], description: str,
                     clock: str, host_work_in_rows: bool = False) -> Source:
        """``specmodel sglang --summarize``: an engine hook's per-forward log (``clock``: what timed it;
        ``host_work_in_rows``: the rows carry the scheduler's measured host work, see :attr:`host_work_in_rows`)."""
        details: dict[str, Any] = {"clock": clock, **({"host_work": "in_rows"} if host_work_in_rows else {})}
        return cls(kind="ingested", tool=f"specmodel {engine}", engine=engine, engine_version=engine_version,
                   files=files, description=description, details=details)

    @classmethod
    def ingested(cls, *, description: str, files: tuple[str, ...], **details: Any) -> Source:
        """``specmodel ingest``: Kineto traces (``details``: mode, per-phase and per-rank tables)."""
        return cls(kind="ingested", tool="specmodel ingest", description=description, files=files, details=details)

    @classmethod
    def sweep(cls, *, path: str, description: str) -> Source:
        """``--baseline-sweep``: measured non-speculative throughput, decode only."""
        return cls(kind="sweep", description=description, details={"path": path})

    @classmethod
    def reference(cls, *, description: str, tool: str) -> Source:
        """The shipped reference (derived from a published write-up, not measured by this tool)."""
        return cls(kind="reference", description=description, tool=tool)

    @classmethod
    def numbers(cls, *, tp_known: bool) -> Source:
        """Plain numbers on the command line (``--baseline-tps``, ``--verify-ms`` ...)."""
        return cls(kind="numbers", description="plain numbers from the command line", tp_known=tp_known)

    @classmethod
    def derived(cls, *, base: Source, description: str, derived_from: tuple[str, ...], allreduce_from: str) -> Source:
        """A profile re-costed with a measured all-reduce fit (``nccl-tests --profile``)."""
        return replace(base, kind="derived", description=description, derived_from=derived_from,
                       allreduce_from=allreduce_from)

    # ---- changes (a new Source; profiles are frozen)
    def with_origins(self, origins: Mapping[str, str], *, tp_known: bool | None = None) -> Source:
        merged = dict(self.cost_origin)
        merged.update(origins)
        return replace(self, cost_origin=tuple(merged.items()),
                       tp_known=self.tp_known if tp_known is None else tp_known)

    def with_description(self, description: str) -> Source:
        return replace(self, description=description)

    def with_allreduce_from(self, allreduce_from: str) -> Source:
        return replace(self, allreduce_from=allreduce_from)

    @property
    def from_hook(self) -> bool:
        """Written by an engine hook's ``--summarize`` (:meth:`hook_summary`), not from traces."""
        return self.kind == "ingested" and self.tool in HOOK_TOOLS

    @property
    def host_work_in_rows(self) -> bool:
        """The vLLM hook's rows are whole engine steps: forward + the step's host work + the gap
        before it (``engines/vllm/hooklog.py``), so a per-cycle ``overhead_s`` of 0 is not a cost
        left out. The SGLang hook's rows carry it where the scheduler's steps were timed
        (``engines/sglang/hooklog.py``: ``source.host_work`` = "in_rows"); older SGLang profiles hold
        forwards only."""
        return self.from_hook and (self.tool == "specmodel vllm" or self.details.get("host_work") == "in_rows")

    @property
    def origins(self) -> dict[str, str]:
        """``cost_origin`` as a dict: cost -> who replaced it; a cost not in it came from the profile."""
        return dict(self.cost_origin)

    def versions(self) -> dict[str, str | int | float]:
        """Every version the source records (engine, tools; ``versions`` objects), for provenance tables."""
        out: dict[str, str | int | float] = {"engine_version": self.engine_version} if self.engine_version else {}
        out.update({k: v for k, v in self.details.items() if "version" in k and isinstance(v, (str, int, float))
                    and not isinstance(v, bool)})
        more = self.details.get("versions")
        if isinstance(more, Mapping):
            out.update({str(k): v for k, v in more.items() if isinstance(v, (str, int, float))})
        return out

    # ---- the JSON object
    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "source") -> Source:
        kw: dict[str, Any] = {}
        kind = d.get("kind")
        if kind is not None and not isinstance(kind, str):
            raise SpecmodelError(f"{where}: kind: expected a string, got {kind!r}")
        kw["kind"] = kind
        for key in _SOURCE_STR:
            v = d.get(key)
            if v is None:
                continue
            if not isinstance(v, str):
                raise SpecmodelError(f"{where}: {key}: expected a string, got {type(v).__name__}")
            kw[key] = v
        for key in _SOURCE_LIST:
            v = d.get(key)
            if v is None:
                continue
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise SpecmodelError(f"{where}: {key}: expected a list of strings")
            kw[key] = tuple(v)
        co = d.get("cost_origin")
        if co is not None:
            if not isinstance(co, Mapping) or not all(isinstance(v, str) for v in co.values()):
                raise SpecmodelError(f"{where}: cost_origin: expected an object of cost -> string")
            kw["cost_origin"] = tuple((str(k), v) for k, v in co.items())
        tpk = d.get("tp_known")
        if tpk is not None:
            if not isinstance(tpk, bool):
                raise SpecmodelError(f"{where}: tp_known: expected true or false, got {tpk!r}")
            kw["tp_known"] = tpk
        typed = {f.name for f in fields(cls)}
        kw["details"] = {k: v for k, v in d.items() if k not in typed}
        try:
            return cls(**kw)
        except SpecmodelError as exc:
            raise SpecmodelError(str(exc).replace("profile: source", where, 1)) from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.kind is None else {"kind": self.kind}
        for key in ("description", "tool", "created_utc", "method", "engine", "engine_version"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        for key in _SOURCE_LIST:
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        if self.allreduce_from:
            out["allreduce_from"] = self.allreduce_from
        if self.cost_origin:
            out["cost_origin"] = dict(self.cost_origin)
        if not self.tp_known:
            out["tp_known"] = False
        out.update(self.details)
        return out


def read_source_kind(path: str | Path) -> str | None:
    """``source.kind`` of a profile file, checked against :data:`SOURCE_KINDS`, without building the
    profile; None when the file is unreadable, not a profile or of an unknown kind (a caller that
    scans a folder skips it; loading it names the problem)."""
    try:
        d = read_json(path, max_bytes=64 << 20)
    except (SpecmodelError, OSError, RecursionError):  # (RecursionError: a deeply nested file)
        return None
    if not PROFILE.matches(d) or not isinstance(d.get("source"), Mapping):
        return None
    kind = d["source"].get("kind")
    return kind if kind in SOURCE_KINDS else None


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A validated profile. Construct via :func:`load_profile` / :func:`profile_from_dict`."""

    name: str
    #: a :class:`Source`; a mapping given here (a test's literal) is validated into one
    source: Source
    tp: int
    costs: tuple[CostRow, ...]
    spec: SpecConfig = field(default_factory=SpecConfig)
    hardware: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    backend: str = ""
    overhead_s: float = 0.0
    allreduce_points: tuple[AllReducePoint, ...] = ()
    allreduce_fit: AllReduceFit | None = None
    notes: tuple[str, ...] = ()
    #: a host proposer's measured proposal rate, lookup time and no-proposal steps (v3); None otherwise
    host_proposer: HostProposer | None = None
    #: what a request costs beside its decode steps (v4): the speculative server's prefill and the
    #: time both servers spent outside the engine's steps; None when not recorded
    requests: RequestCosts | None = None
    #: the box's condition while each server was recorded (v5); None when the logs held no probe
    conditions: Conditions | None = None
    #: the engine seams the hook could not wrap while recording (v7): each figure resting on one is
    #: qualified wherever the profile is used (:func:`specmodel.model.cyclecost.cycle_costs`)
    missing_seams: tuple[MissingSeam, ...] = ()
    path: str = ""  # where it was loaded from; not serialised

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecmodelError("profile: name: must not be empty")
        if self.tp < 1:
            raise SpecmodelError(f"profile: tp: must be >= 1, got {self.tp}")
        if self.tp > MAX_TP:
            raise SpecmodelError(f"profile: tp: must be <= {MAX_TP}, got {self.tp}")
        if not math.isfinite(self.overhead_s) or self.overhead_s < 0:
            raise SpecmodelError(f"profile: overhead_s: must be finite and >= 0, got {self.overhead_s}")
        if self.overhead_s > 1e3:
            raise SpecmodelError(f"profile: overhead_s: must be <= 1000 s per cycle, got {self.overhead_s:g}")
        if not any(r.kind == "decode" for r in self.costs):
            raise SpecmodelError("profile: costs: needs at least one 'decode' row (the baseline step)")
        seen: set[tuple[str, int, int, int]] = set()
        for r in self.costs:
            if r.key in seen:
                raise SpecmodelError(f"profile: costs: duplicate {r.where}")
            seen.add(r.key)
        if not isinstance(self.source, Source):
            if not isinstance(self.source, Mapping):
                raise SpecmodelError(f"profile: source: expected a Source, got {type(self.source).__name__}")
            object.__setattr__(self, "source", Source.from_dict(self.source, "profile: source"))

    @property
    def source_kind(self) -> str:
        return self.source.kind or "unknown"

    @property
    def label(self) -> str:
        """One line saying what this profile is and how far to trust it."""
        return self.source.description or f"{self.source_kind} profile"

    def rows(self, kind: str) -> tuple[CostRow, ...]:
        return tuple(r for r in self.costs if r.kind == kind)

    @property
    def has_allreduce_split(self) -> bool:
        """Whether the rows record all-reduce time wherever a cycle reads it. Without it (a throughput
        sweep, plain numbers, a hook that times whole forwards) the all-reduce share is *unknown*, not
        zero: printers say so and all-reduce what-ifs cannot apply. At TP > 1 every forward does
        all-reduces, so a cycle row (:data:`~specmodel.schema.phases.CYCLE_KINDS`) recording none was
        not seen (:attr:`allreduce_unseen`): one is enough to make the split unknown -- a what-if that
        scaled the rows that saw theirs would leave the unseen ones' hidden inside ``compute_s``."""
        return any(r.allreduce_s > 0 for r in self.costs) and not self.allreduce_unseen

    @property
    def allreduce_unseen(self) -> tuple[CostRow, ...]:
        """Cycle rows at TP > 1 that record no all-reduce: the hook's Python-level wrapper never ran
        (a CUDA-graph replay runs the collective without Python) -- unknown, not zero. Rows a flag
        replaced (``source.cost_origin``: ``--draft-ms`` without a split) carry what the user gave."""
        if self.tp <= 1:
            return ()
        given = {k for k, _ in self.source.cost_origin}
        return tuple(r for r in self.costs if r.kind in CYCLE_KINDS and r.allreduce_s <= 0 and r.kind not in given)

    @property
    def allreduce_captured(self) -> tuple[str, ...]:
        """Cycle kinds with a row whose all-reduce is a torch.profiler capture's share × its forward
        time (``allreduce_source`` "capture": the hook's wrapper did not see it), in cycle order."""
        kinds = {r.kind for r in self.costs if r.kind in CYCLE_KINDS and r.allreduce_source == "capture"}
        return tuple(k for k in CYCLE_KINDS if k in kinds)

    def has(self, kind: str) -> bool:
        return any(r.kind == kind for r in self.costs)

    def with_costs(self, costs: tuple[CostRow, ...] | list[CostRow]) -> Profile:
        """The profile re-costed (a what-if, a fit, a flag). A host proposer's measured no-proposal
        steps were measured beside the old costs, not the new: they are dropped (its rate and
        lookup are kept), so a re-costed profile prices such a step from its own decode rows; so are
        the speculative server's prefill rows (its prefill is then priced from the new extend rows),
        and the box's condition during the recordings (it vouches for costs no longer used)."""
        hp, rq = self.host_proposer, self.requests
        return replace(self, costs=tuple(costs), host_proposer=None if hp is None else replace(hp, decode=()),
                       requests=None if rq is None else replace(rq, spec_prefill=()), conditions=None)

    def costs_frame(self) -> pd.DataFrame:
        """The cost table as a pandas DataFrame: one row per :class:`CostRow` (its serialised
        fields, SI units) plus ``allreduce_frac``, sorted by kind, context, batch and tokens."""
        import pandas as pd  # only here: pandas stays off predict's cold path

        frame = pd.DataFrame([r.to_dict() for r in self.costs])  # never empty: a decode row is required
        frame["allreduce_frac"] = frame["allreduce_s"] / frame["total_s"]
        return frame.sort_values(["kind", "context_tokens", "batch", "tokens"], ignore_index=True)


def profile_to_dict(p: Profile) -> dict[str, Any]:
    extra: dict[str, Any] = {"host_proposer": p.host_proposer.to_dict()} if p.host_proposer is not None else {}
    if p.requests is not None:
        extra["requests"] = p.requests.to_dict()
    if p.conditions is not None:
        extra["conditions"] = p.conditions.to_dict()
    if p.missing_seams:
        extra["missing_seams"] = [m.as_dict() for m in p.missing_seams]
    d = PROFILE.stamp({
        "name": p.name,
        "source": p.source.to_dict(),
        "hardware": p.hardware,
        "model": p.model,
        "tp": p.tp,
        "backend": p.backend,
        "spec": p.spec.to_dict(),
        "overhead_s": p.overhead_s,
        "costs": [r.to_dict() for r in p.costs],
        "allreduce_points": [a.to_dict() for a in p.allreduce_points],
        "allreduce_fit": p.allreduce_fit.to_dict() if p.allreduce_fit else None,
        "notes": list(p.notes),
        **extra,
    })
    # written at the lowest version that holds it: a file every older reader still reads
    d["schema_version"] = max(2, HOST_PROPOSER_VERSION if p.host_proposer is not None else 0,
                              REQUESTS_VERSION if p.requests is not None else 0,
                              CONDITIONS_VERSION if p.conditions is not None else 0,
                              MISSING_SEAMS_VERSION if p.missing_seams else 0,
                              ALLREDUCE_SOURCE_VERSION if any(r.allreduce_source for r in _every_row(p)) else 0)
    return d


def _every_row(p: Profile) -> tuple[CostRow, ...]:
    """The profile's cost rows, its host proposer's decode rows and its requests' prefill rows."""
    hp = p.host_proposer.decode if p.host_proposer is not None else ()
    rq = p.requests.spec_prefill if p.requests is not None else ()
    return (*p.costs, *hp, *rq)


def _v1_context_tokens(d: Mapping[str, Any], where: str) -> int:
    """A v1 profile measured at one KV length, recorded as ``model.context_len`` (0 when absent)."""
    model = d.get("model")
    if not isinstance(model, Mapping):
        return 0
    return read_int(model, "context_len", f"{where}: model", optional=True, default=0)


def profile_from_dict(d: Any, where: str = "profile") -> Profile:
    """Validate a decoded JSON object and build a :class:`Profile`. ``where`` names the file."""
    ver = PROFILE.check(d, where)
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise SpecmodelError(f"{where}: name: missing or not a string")
    costs_raw = d.get("costs")
    if not isinstance(costs_raw, list) or not costs_raw:
        raise SpecmodelError(f"{where}: costs: missing or empty list")
    default_ctx = _v1_context_tokens(d, where) if ver == 1 else None
    costs = tuple(CostRow.from_dict(c, f"{where}: costs[{i}]", default_context_tokens=default_ctx)
                  for i, c in enumerate(costs_raw))
    pts_raw = d.get("allreduce_points") or []
    if not isinstance(pts_raw, list):
        raise SpecmodelError(f"{where}: allreduce_points: expected a list")
    pts = tuple(AllReducePoint.from_dict(x, f"{where}: allreduce_points[{i}]") for i, x in enumerate(pts_raw))
    fit_raw = d.get("allreduce_fit")
    fit = AllReduceFit.from_dict(fit_raw, f"{where}: allreduce_fit") if fit_raw else None
    spec_raw = d.get("spec") or {}
    if not isinstance(spec_raw, dict):
        raise SpecmodelError(f"{where}: spec: expected an object")
    notes = d.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise SpecmodelError(f"{where}: notes: expected a list of strings")
    hp_raw = d.get("host_proposer")
    if hp_raw is not None and ver < HOST_PROPOSER_VERSION:
        raise SpecmodelError(f"{where}: host_proposer: needs schema_version {HOST_PROPOSER_VERSION}, file has {ver}")
    host_proposer = HostProposer.from_dict(hp_raw, f"{where}: host_proposer") if hp_raw is not None else None
    rq_raw = d.get("requests")
    if rq_raw is not None and ver < REQUESTS_VERSION:
        raise SpecmodelError(f"{where}: requests: needs schema_version {REQUESTS_VERSION}, file has {ver}")
    requests = RequestCosts.from_dict(rq_raw, f"{where}: requests") if rq_raw is not None else None
    cd_raw = d.get("conditions")
    if cd_raw is not None and ver < CONDITIONS_VERSION:
        raise SpecmodelError(f"{where}: conditions: needs schema_version {CONDITIONS_VERSION}, file has {ver}")
    conditions = Conditions.from_dict(cd_raw, f"{where}: conditions") if cd_raw is not None else None
    ms_raw = d.get("missing_seams")
    if ms_raw is not None and ver < MISSING_SEAMS_VERSION:
        raise SpecmodelError(f"{where}: missing_seams: needs schema_version {MISSING_SEAMS_VERSION}, file has {ver}")
    if ms_raw is not None and not isinstance(ms_raw, list):
        raise SpecmodelError(f"{where}: missing_seams: expected a list")
    missing_seams = tuple(MissingSeam.from_dict(x, f"{where}: missing_seams[{i}]") for i, x in enumerate(ms_raw or ()))
    backend = d.get("backend", "")
    if not isinstance(backend, str):
        raise SpecmodelError(f"{where}: backend: expected a string")
    try:
        prof = Profile(
            name=name,
            source=Source.from_dict(read_dict(d, "source", where), f"{where}: source"),
            hardware=read_dict(d, "hardware", where),
            model=read_dict(d, "model", where),
            tp=read_int(d, "tp", where, minimum=1),
            backend=backend,
            spec=SpecConfig.from_dict(spec_raw, f"{where}: spec"),
            overhead_s=read_num(d, "overhead_s", where, optional=True),
            costs=costs,
            allreduce_points=pts,
            allreduce_fit=fit,
            notes=tuple(notes),
            host_proposer=host_proposer,
            requests=requests,
            conditions=conditions,
            missing_seams=missing_seams,
            path=where,
        )
    except SpecmodelError as exc:
        raise at_record(exc, where) from None
    if ver < ALLREDUCE_SOURCE_VERSION:
        for r in _every_row(prof):
            if r.allreduce_source:
                raise SpecmodelError(f"{where}: {r.where}: allreduce_source: needs schema_version "
                                     f"{ALLREDUCE_SOURCE_VERSION}, file has {ver}")
    return prof


def resolve_profile_path(path: str | Path) -> Path:
    """A profile argument may name ``profile.json`` or the directory holding it."""
    p = Path(path)
    if p.is_dir():
        if p.suffix == ".json" and not (p / "profile.json").exists():
            raise SpecmodelError(f"{p}: is a directory, expected a profile.json file")
        p = p / "profile.json"
    return p


def load_profile(path: str | Path) -> Profile:
    p = resolve_profile_path(path)
    return profile_from_dict(read_json(p), str(p))


def _input_ref(flag: str) -> str:
    """How a destination error names the input that gave the path: a field as a ``{field}``
    reference (the CLI spells it), a flag a caller passed as it is."""
    return flag if flag.startswith("-") else "{" + flag + "}"


def _naming(exc: SpecmodelError, ref: str) -> SpecmodelError:
    """An error of :mod:`specmodel.io` that starts with the input ``ref`` (``{field}: …``) as a
    :class:`FieldError` (the rest kept verbatim); any other error as it is."""
    msg = str(exc)
    if isinstance(exc, FieldError) or not msg.startswith(ref + ": "):
        return exc
    return FieldError(None, ref + ": " + verbatim(msg[len(ref) + 2:]))


def check_profile_destination(path: str | Path, flag: str = "output") -> Path:
    """The one rule for writing a profile where something may already be (``profile --name``,
    ``nccl-tests -o``, ``ingest -o``, ``sglang --summarize -o``): refuse, before any work, unless
    the place is new, an empty directory, or holds a profile this tool wrote on the user's box
    (:data:`OWN_BOX_KINDS`); the shipped package and reference profiles are never written.

    ``path`` names a profile directory, its ``profile.json``, or a standalone ``NAME.json``;
    returns the file that will be written. What is replaced is kept (:func:`save_profile`).
    ``flag`` names the input that gave ``path``: a field (``output``) or a flag as spelled.
    """
    p = Path(path)
    flag = _input_ref(flag)
    try:
        refuse_shipped(p, flag)
    except SpecmodelError as exc:
        raise _naming(exc, flag) from None
    target = p if p.suffix == ".json" else p / "profile.json"
    holder = target.parent if target.name == "profile.json" else target
    if holder.is_symlink():
        raise FieldError(None, f"{flag}: {verbatim(holder)}: is a symbolic link (a profile is never written through one); "
                               f"choose another {flag}")
    if holder is target:
        if holder.exists() and not holder.is_file():
            raise FieldError(None, f"{flag}: {verbatim(holder)}: exists and is not a file; choose another {flag}")
        exists = holder.exists()
    else:
        if holder.exists() and not holder.is_dir():
            raise FieldError(None, f"{flag}: {verbatim(holder)}: exists and is not a profile directory; choose another {flag}")
        exists = holder.is_dir() and any(holder.iterdir())
    if exists:
        kind = read_source_kind(target)
        if kind not in OWN_BOX_KINDS:
            what = ("the reference profile" if kind == "reference" else f"a {kind} profile" if kind
                    else "something that is not a profile written by specmodel")
            raise FieldError(None, f"{flag}: {verbatim(holder)}: holds {verbatim(what)}; only a profile specmodel measured, ingested or "
                                   f"derived on this box is replaced (the old one kept), so choose another {flag}")
    return target


def write_profile_json(profile: Profile, path: str | Path, *, shipped_ok: bool = False) -> Path:
    """Atomically write one ``profile.json`` after a validated round trip (never something we could
    not read back). No destination rule: for a fresh staging directory, or the maintainer script
    that regenerates the shipped reference (``shipped_ok``); commands call :func:`save_profile`."""
    p = Path(path)
    d = profile_to_dict(profile)
    profile_from_dict(d, str(p))
    return atomic_write_json(p, d, shipped_ok=shipped_ok)


def save_profile(profile: Profile, path: str | Path, *, flag: str = "output") -> Path:
    """Write ``profile`` to ``path`` (``path``/profile.json when ``path`` is a directory) under
    :func:`check_profile_destination`; returns the file written.

    A directory is replaced as a whole, the old one kept as ``previous/`` inside the new one
    (:func:`specmodel.io.replace_dir`); a standalone ``NAME.json`` replaced keeps the old one as
    ``NAME.previous.json``.
    """
    target = check_profile_destination(path, flag)
    if target.name != "profile.json":
        if target.exists():
            atomic_write_json(target.with_suffix(f".{PREVIOUS}.json"), read_json(target))
        return write_profile_json(profile, target)
    ref = _input_ref(flag)
    try:
        replace_dir(target.parent, lambda stage: write_profile_json(profile, stage / "profile.json"), flag=ref)
    except SpecmodelError as exc:
        raise _naming(exc, ref) from None
    return target
