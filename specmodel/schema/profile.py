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

This module owns the document: its version, what each version added, and the one reader / writer
pair (:func:`profile_from_dict` / :func:`profile_to_dict`, :func:`load_profile` / :func:`save_profile`).
The records it holds validate and serialise themselves beside it: the cost rows, all-reduce points and
fit, the speculative configuration, host-proposer and request costs in
:mod:`specmodel.schema.costrows`, the provenance in :mod:`specmodel.schema.source`; the box conditions
(:mod:`specmodel.schema.conditions`) and the field readers (:mod:`specmodel.schema.fields`) sit below.
A field added to any record bumps the document's version (:data:`specmodel.schema.formats.PROFILE`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.io import PREVIOUS, atomic_write_json, read_json, refuse_shipped, replace_dir
from specmodel.limits import (
    MAX_TP,
)
from specmodel.schema.conditions import CONDITIONS_VERSION, Conditions
from specmodel.schema.fields import at_record, read_dict, read_int, read_num
from specmodel.schema.formats import PROFILE
from specmodel.schema.phases import CYCLE_KINDS
from specmodel.schema.seams import MissingSeam

if TYPE_CHECKING:
    import pandas as pd

from specmodel.schema.costrows import (
    ALLREDUCE_SOURCE_VERSION,
    HOST_PROPOSER_VERSION,
    REQUESTS_VERSION,
    AllReduceFit,
    AllReducePoint,
    CostRow,
    HostProposer,
    RequestCosts,
    SpecConfig,
)
from specmodel.schema.source import (
    OWN_BOX_KINDS,
    Source,
    read_source_kind,
)

PROFILE_SCHEMA = PROFILE.name
PROFILE_SCHEMA_VERSION = PROFILE.version
#: Older versions this reader still accepts (v1 rows carry no ``context_tokens``; the profile's
#: recorded ``model.context_len`` becomes every row's context).
PROFILE_READABLE_VERSIONS = PROFILE.readable_versions

#: the profile version that added ``missing_seams`` (the engine seams the hook could not wrap)
MISSING_SEAMS_VERSION = 7


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
