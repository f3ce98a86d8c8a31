"""Engine seams as a checked contract: every member an engine hook wraps, every log pattern and
metric name an engine reader relies on, each with the engine versions it was read in and the
figure that rests on it. One table per engine (:mod:`specmodel.engines.vllm.seams`,
:mod:`specmodel.engines.sglang.seams`); the types, the source checker and the qualification line
live here, once.

The checker reads an engine's source without importing it (``ast`` for members, a literal search
for log text and metric names): an installed package directory (``specmodel vllm --check``), an
unpacked wheel, or the wheel's zip itself (the tests read the cached wheels of every checked
version). A seam the table says is present in a version must be found in that version's source; a
seam it says is absent must not be.

Kept free of torch and of any engine import (the hooks import the tables in every worker).
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmodel.schema.seams import MissingSeam

#: what a seam is: a member the hook wraps, text a log reader matches, a Prometheus series name
KINDS = ("method", "log", "metric")


@dataclass(frozen=True, kw_only=True)
class Seam:
    """One seam of one engine.

    ``kind`` "method": ``module`` (dotted), ``cls``, ``method`` -- defined in the class body (what
    the hook's ``getattr(cls, method)`` finds first on that class). "log" / "metric": ``text``, a
    literal that must appear in the package's source under ``under`` (a package-relative folder).
    ``figure``: what a profile loses without it (``draft_s``, ``verify allreduce_s``, ...);
    ``present`` / ``absent``: the checked versions it was read in, found and not found;
    ``required``: ``--check`` fails when a required seam is missing from the installed engine."""

    engine: str
    kind: str
    figure: str
    present: tuple[str, ...]
    absent: tuple[str, ...] = ()
    module: str = ""
    cls: str = ""
    method: str = ""
    text: str = ""
    under: str = ""
    role: str = ""  # the hook's role for a wrapped member ("" for logs and metrics)
    runner: str = ""  # vLLM: the model runner the member belongs to ("v1" / "v2"; "" both)
    required: bool = False
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"seam kind {self.kind!r}: expected one of {KINDS}")
        if self.kind == "method" and not (self.module and self.cls and self.method):
            raise ValueError(f"method seam {self.name}: module, cls and method are all needed")
        if self.kind != "method" and not self.text:
            raise ValueError(f"{self.kind} seam: text is needed")
        if set(self.present) & set(self.absent):
            raise ValueError(f"seam {self.name}: a version both present and absent")
        if not self.figure:
            raise ValueError(f"seam {self.name}: figure (what rests on it) is needed")

    @property
    def name(self) -> str:
        """``Class.method`` for a member, the quoted text for a log line or a metric."""
        return f"{self.cls}.{self.method}" if self.kind == "method" else repr(self.text)

    @property
    def key(self) -> str:
        """Unique within an engine's table: ``module.Class.method`` or ``kind:text``."""
        return f"{self.module}.{self.cls}.{self.method}" if self.kind == "method" else f"{self.kind}:{self.text}"

    def status(self, version: str) -> bool | None:
        """True / False where ``version`` was checked, None where it was not."""
        if version in self.present:
            return True
        if version in self.absent:
            return False
        return None


@dataclass(frozen=True, kw_only=True)
class SeamTable:
    """An engine's seams and the versions the project checked them in (oldest first)."""

    engine: str
    package: str  # the top-level import name whose source is read
    versions: tuple[str, ...]
    seams: tuple[Seam, ...]

    def __post_init__(self) -> None:
        keys = [s.key for s in self.seams]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"{self.engine} seams listed twice: {dup}")
        for s in self.seams:
            if s.engine != self.engine:
                raise ValueError(f"seam {s.key}: engine {s.engine!r} in the {self.engine} table")
            stray = set(s.present + s.absent) - set(self.versions)
            if stray:
                raise ValueError(f"seam {s.key}: versions {sorted(stray)} are not checked versions of {self.engine}")

    def members(self, *, role: str | None = None) -> tuple[Seam, ...]:
        return tuple(s for s in self.seams if s.kind == "method" and (role is None or s.role == role))

    def find(self, module: str, cls: str, method: str) -> Seam | None:
        key = f"{module}.{cls}.{method}"
        return next((s for s in self.seams if s.key == key), None)


# --------------------------------------------------------------------------- reading a source


class Source:
    """An engine's source: ``root`` holds ``<package>/`` (a directory) or is a wheel (a zip)."""

    def __init__(self, root: str | Path, package: str) -> None:
        self.root = Path(root)
        self.package = package
        self._zip: zipfile.ZipFile | None = zipfile.ZipFile(self.root) if self.root.is_file() else None
        self._names: list[str] | None = None

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _all(self) -> list[str]:
        if self._names is None:
            if self._zip is not None:
                self._names = [n for n in self._zip.namelist() if n.startswith(self.package + "/")]
            else:
                base = self.root
                self._names = sorted(str(p.relative_to(base)).replace("\\", "/")
                                     for p in (base / self.package).rglob("*.py"))
        return self._names

    def read(self, rel: str) -> str | None:
        """The text of ``rel`` (``vllm/x/y.py``), None where the file is not there."""
        if self._zip is not None:
            try:
                return self._zip.read(rel).decode("utf-8")
            except KeyError:
                return None
        p = self.root / rel
        return p.read_text(encoding="utf-8") if p.is_file() else None

    def py_files(self, under: str = "") -> Iterator[str]:
        prefix = f"{self.package}/{under.strip('/')}/" if under else f"{self.package}/"
        return (n for n in self._all() if n.endswith(".py") and n.startswith(prefix))

    def module_text(self, module: str) -> str | None:
        """A dotted module's source: ``a/b.py``, else ``a/b/__init__.py``."""
        rel = module.replace(".", "/")
        text = self.read(rel + ".py")
        return text if text is not None else self.read(rel + "/__init__.py")


def class_methods(text: str, cls: str) -> set[str] | None:
    """Methods defined in the body of top-level class ``cls`` (None: no such class)."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return None


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One seam looked for in one source: found or not, and why not."""

    seam: Seam
    found: bool
    why: str = ""


def _contains(src: Source, text: str, under: str) -> bool:
    needle = text.encode()
    for rel in src.py_files(under):
        body = src.read(rel)
        if body is not None and needle in body.encode():
            return True
    return False


def check_source(table: SeamTable, src: Source) -> list[Finding]:
    """Each seam of ``table`` looked for in ``src`` (members by ``ast``, text by a literal search)."""
    out: list[Finding] = []
    parsed: dict[str, str | None] = {}
    for s in table.seams:
        if s.kind == "method":
            if s.module not in parsed:
                parsed[s.module] = src.module_text(s.module)
            text = parsed[s.module]
            if text is None:
                out.append(Finding(seam=s, found=False, why=f"module {s.module} not found"))
                continue
            methods = class_methods(text, s.cls)
            if methods is None:
                out.append(Finding(seam=s, found=False, why=f"class {s.cls} not in {s.module}"))
            elif s.method not in methods:
                out.append(Finding(seam=s, found=False, why=f"{s.cls} defines no {s.method}"))
            else:
                out.append(Finding(seam=s, found=True))
        else:
            ok = _contains(src, s.text, s.under)
            out.append(Finding(seam=s, found=ok, why="" if ok else f"{s.text!r} not in {table.package}/{s.under}"))
    return out


def mismatches(table: SeamTable, version: str, findings: list[Finding]) -> list[str]:
    """Where ``version``'s source contradicts the table: one line each (empty: the table holds)."""
    bad = []
    for f in findings:
        want = f.seam.status(version)
        if want is True and not f.found:
            bad.append(f"{table.engine} {version}: {f.seam.key} is listed present but {f.why}")
        elif want is False and f.found:
            bad.append(f"{table.engine} {version}: {f.seam.key} is listed absent but was found")
    return bad


# --------------------------------------------------------------------------- what a hook recorded


def check_seams_meta(rec: Mapping[str, Any], where: str) -> None:
    """A meta line's ``seams_found`` (names) and ``seams_missing`` (objects with ``seam`` and
    ``figure``), where present: a bad one is the file's error, not a traceback later."""
    from specmodel.errors import SpecmodelError

    found = rec.get("seams_found")
    if found is not None and (not isinstance(found, list) or not all(isinstance(x, str) for x in found)):
        raise SpecmodelError(f"{where}: seams_found: expected a list of strings, got {found!r}")
    miss = rec.get("seams_missing")
    if miss is None:
        return
    if not isinstance(miss, list):
        raise SpecmodelError(f"{where}: seams_missing: expected a list, got {miss!r}")
    for i, d in enumerate(miss):
        if not isinstance(d, Mapping) or not all(isinstance(d.get(k), str) and d.get(k) for k in ("seam", "figure")):
            raise SpecmodelError(f"{where}: seams_missing[{i}]: expected an object with seam and figure strings, "
                                 f"got {d!r}")


def seams_notes(missing: tuple[MissingSeam, ...]) -> list[str]:
    """The profile's notes for the seams its hook could not wrap (the cycle's costs name them too)."""
    return [f"{m.line()}: the rows that rest on it hold less than the engine spent; the verdict names it"
            for m in missing]


def missing_from_meta(metas: Sequence[Mapping[str, Any]], *, engine: str, version_key: str) -> tuple[MissingSeam, ...]:
    """The union of the ``seams_missing`` lists of the rank files' meta lines (deduplicated)."""
    seen: dict[tuple[str, str], MissingSeam] = {}
    for m in metas:
        for i, d in enumerate(m.get("seams_missing") or ()):
            if not isinstance(d, Mapping):
                continue
            ms = MissingSeam.from_dict({"engine": engine, "engine_version": str(m.get(version_key) or ""), **d},
                                       f"meta line: seams_missing[{i}]")
            seen.setdefault((ms.seam, ms.figure), ms)
    return tuple(seen.values())


@dataclass
class SeamLedger:
    """What one hooked process found: the members it wrapped and those it could not (kept in the
    hook's state, written into the rank file's meta line)."""

    found: list[str] = field(default_factory=list)
    missing: dict[str, dict[str, str]] = field(default_factory=dict)

    def wrapped(self, seam: str) -> None:
        if seam not in self.found:
            self.found.append(seam)
        self.missing.pop(seam, None)

    def miss(self, seam: str, figure: str, why: str = "not found") -> None:
        if seam not in self.found:
            self.missing.setdefault(seam, {"seam": seam, "figure": figure, "why": why})

    def meta(self) -> dict[str, Any]:
        return {"seams_found": list(self.found), "seams_missing": list(self.missing.values())}


# --------------------------------------------------------------------------- the docs' table


def markdown(tables: tuple[SeamTable, ...]) -> str:
    """The docs' table of checked versions × seams (docs/engines.md carries it verbatim)."""
    lines: list[str] = []
    for t in tables:
        lines.append(f"| {t.engine} seam | kind | figure | " + " | ".join(t.versions) + " |")
        lines.append("|---|---|---|" + "---|" * len(t.versions))
        for s in t.seams:
            where = f"`{s.module}`" if s.kind == "method" else f"`{t.package}/{s.under}`".replace("/`", "`")
            cells = ["yes" if s.status(v) else "no" if s.status(v) is False else "?" for v in t.versions]
            name = f"`{s.name}`" if s.kind == "method" else f"`{s.text.strip()}`"
            lines.append(f"| {name} ({where}) | {s.kind} | {s.figure} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
