"""Where a profile's costs came from: the typed, frozen :class:`Source` (tool, engine, hardware,
topology, versions, the origin of each cost), one constructor per origin, and the kinds of source.

Part of the profile document (:mod:`specmodel.schema.profile`, which reads and writes it whole)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from specmodel.errors import SpecmodelError
from specmodel.io import read_json
from specmodel.schema.formats import PROFILE

if TYPE_CHECKING:
    pass



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
