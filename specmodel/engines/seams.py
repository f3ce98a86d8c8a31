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

from specmodel.limits import MAX_SEAM_BASE_DEPTH
from specmodel.schema.seams import MissingSeam

#: what a seam is: a member the hook wraps, a field the hook reads (a class-level annotation or a
#: ``self.<name> =`` in one of the class's methods), text a log reader matches, a Prometheus series name
KINDS = ("method", "field", "log", "metric")
MEMBER_KINDS = ("method", "field")


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
        if self.kind in MEMBER_KINDS and not (self.module and self.cls and self.method):
            raise ValueError(f"method seam {self.name}: module, cls and method are all needed")
        if self.kind not in MEMBER_KINDS and not self.text:
            raise ValueError(f"{self.kind} seam: text is needed")
        if set(self.present) & set(self.absent):
            raise ValueError(f"seam {self.name}: a version both present and absent")
        if not self.figure:
            raise ValueError(f"seam {self.name}: figure (what rests on it) is needed")

    @property
    def name(self) -> str:
        """``Class.method`` for a member, the quoted text for a log line or a metric."""
        return f"{self.cls}.{self.method}" if self.kind in MEMBER_KINDS else repr(self.text)

    @property
    def key(self) -> str:
        """Unique within an engine's table: ``module.Class.method`` or ``kind:text``."""
        return f"{self.module}.{self.cls}.{self.method}" if self.kind in MEMBER_KINDS else f"{self.kind}:{self.text}"

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
    dists: tuple[str, ...] = ()  # the distributions that install it (their metadata gives the version)
    label: str = ""  # as the engine spells itself (vLLM, SGLang)

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

    def fields(self) -> tuple[Seam, ...]:
        return tuple(s for s in self.seams if s.kind == "field")

    def since(self, seam: Seam) -> str | None:
        """The first checked version that has ``seam``, where an earlier checked one lacks it (None:
        every checked version up to its first has it)."""
        first = next((v for v in self.versions if seam.status(v)), None)
        before = self.versions[:self.versions.index(first)] if first is not None else ()
        return first if any(seam.status(v) is False for v in before) else None

    def until(self, seam: Seam) -> str | None:
        """The first checked version that no longer has ``seam`` (None: the newest still has it)."""
        seen = False
        for v in self.versions:
            seen = seen or bool(seam.status(v))
            if seen and seam.status(v) is False:
                return v
        return None

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
    node = _class(text, cls)
    return None if node is None else {n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def class_fields(text: str, cls: str) -> set[str] | None:
    """Fields of top-level class ``cls``: names annotated or assigned in its body (a dataclass's
    fields) and every ``self.<name> = …`` in its methods (None: no such class)."""
    node = _class(text, cls)
    if node is None:
        return None
    out: set[str] = set()
    for n in node.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
        elif isinstance(n, ast.Assign):
            out.update(t.id for t in n.targets if isinstance(t, ast.Name))
    for w in ast.walk(node):
        targets = w.targets if isinstance(w, ast.Assign) else [w.target] if isinstance(w, ast.AnnAssign) else []
        out.update(t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                   and t.value.id == "self")
    return out


def _class(text: str, cls: str) -> ast.ClassDef | None:
    return next((n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == cls), None)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One seam looked for in one source: found or not, and why not."""

    seam: Seam
    found: bool
    why: str = ""


def _module(src: Source, parsed: dict[str, str | None], module: str) -> str | None:
    if module not in parsed:
        parsed[module] = src.module_text(module)
    return parsed[module]


def _member(src: Source, parsed: dict[str, str | None], module: str, cls: str, member: str, kind: str,
            *, depth: int) -> bool:
    """Whether ``module.cls`` has ``member``: in its own body, else in a base class named in its
    ``class`` line and defined in the same module or imported into it with ``from X import Name``
    (what ``getattr(cls, member)`` finds there, as the hook's lookup does)."""
    text = _module(src, parsed, module)
    node = None if text is None else _class(text, cls)
    if text is None or node is None:
        return False
    own = class_methods(text, cls) if kind == "method" else class_fields(text, cls)
    if own is not None and member in own:
        return True
    if depth >= MAX_SEAM_BASE_DEPTH:
        return False
    tree = ast.parse(text)
    imported = {a.asname or a.name: (n.module, a.name) for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and not n.level for a in n.names}
    for base in node.bases:
        if not isinstance(base, ast.Name):
            continue
        where, name = imported.get(base.id, (module, base.id))
        if _member(src, parsed, where, name, member, kind, depth=depth + 1):
            return True
    return False


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
        if s.kind in MEMBER_KINDS:
            text = _module(src, parsed, s.module)
            if text is None:
                out.append(Finding(seam=s, found=False, why=f"module {s.module} not found"))
                continue
            if _class(text, s.cls) is None:
                out.append(Finding(seam=s, found=False, why=f"class {s.cls} not in {s.module}"))
            elif _member(src, parsed, s.module, s.cls, s.method, s.kind, depth=0):
                out.append(Finding(seam=s, found=True))
            else:
                out.append(Finding(seam=s, found=False, why=f"{s.cls} defines no {s.kind} {s.method}"))
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


# --------------------------------------------------------------------------- an installed engine

_LOCATE = """import importlib.util, importlib.metadata as md, json, sys
pkg, dists = sys.argv[1], [d for d in sys.argv[2].split(",") if d]
spec = importlib.util.find_spec(pkg)
loc = list(spec.submodule_search_locations or []) if spec is not None else []
ver = None
for d in dists:
    try:
        ver = md.version(d)
        break
    except md.PackageNotFoundError:
        pass
print(json.dumps({"path": loc[0] if loc else None, "version": ver, "python": sys.executable}))
"""


def locate(table: SeamTable, python: str, env: Mapping[str, str] | None = None) -> tuple[Path, str | None]:
    """Where ``python`` would import ``table.package`` from (its folder's parent: the source root)
    and the installed version (its distribution's metadata; None where none says). Runs ``python``
    with ``importlib.util.find_spec`` of the top-level package: nothing of the engine is imported.
    ``env``: the environment the engine will run under (its ``PYTHONPATH`` decides what it finds)."""
    import json
    import subprocess

    from specmodel.errors import SpecmodelError

    try:
        r = subprocess.run([python, "-c", _LOCATE, table.package, ",".join(table.dists)], capture_output=True,
                           text=True, timeout=120, env=None if env is None else dict(env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SpecmodelError(f"engine python {python}: cannot run it ({exc})") from None
    last = (r.stderr.strip().splitlines() or [""])[-1]
    if r.returncode != 0:
        raise SpecmodelError(f"engine python {python}: exited {r.returncode} ({last})")
    try:
        d = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise SpecmodelError(f"engine python {python}: unexpected output {r.stdout[-200:]!r}") from None
    if not d.get("path"):
        raise SpecmodelError(f"engine python {python}: no {table.package} package installed")
    ver = d.get("version")
    return Path(d["path"]).parent, (str(ver).split("+")[0] if ver else None)


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    """An installed engine read against its table: what it has, whether its version was checked."""

    table: SeamTable
    version: str | None
    root: Path
    findings: tuple[Finding, ...]

    @property
    def checked(self) -> bool:
        return self.version in self.table.versions

    @property
    def missing_required(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.seam.required and not f.found)

    def lines(self) -> list[str]:
        t = self.table
        name = t.label or t.engine
        ver = self.version or "unknown version"
        out = [f"{name} {ver} at {self.root / t.package}"]
        if self.checked:
            out.append(f"version {ver}: checked (the seam table was read against {name} {', '.join(t.versions)})")
        else:
            out.append(f"version {ver}: NOT checked (the seam table was read against {name} "
                       f"{', '.join(t.versions)}); the seams below are this installation's own source")
        latest = t.versions[-1]
        for f in self.findings:
            if f.seam.kind not in MEMBER_KINDS:
                continue
            # a seam the table has absent from this version (or, past the checked ones, from the
            # newest checked) is a known removal or addition, not a loss
            known = f.seam.status(str(self.version)) is False or (not self.checked and f.seam.status(latest) is False)
            state = "found  " if f.found else "absent " if known else "MISSING"
            req = ", required" if f.seam.required else ""
            why = "" if f.found else f" -- {f.why}"
            name = f"[{f.seam.runner}] {f.seam.name}" if f.seam.runner else f.seam.name
            out.append(f"  {state} {name:<62} {f.seam.figure}{req}{why}")
        texts = [f for f in self.findings if f.seam.kind not in MEMBER_KINDS]
        lost = [f for f in texts if not f.found]
        out.append(f"  log lines and metric names: {len(texts) - len(lost)} of {len(texts)} found"
                   + (": missing " + ", ".join(f"{f.seam.kind} {f.seam.text.strip()!r} ({f.seam.figure})"
                                               for f in lost) if lost else ""))
        if self.checked:
            bad = mismatches(t, str(self.version), list(self.findings))
            out.extend(f"  differs from the checked table: {b}" for b in bad)
        if self.missing_required:
            out.append(f"missing required seam(s): {', '.join(f.seam.name for f in self.missing_required)}: "
                       f"figures resting on them would not be recorded")
        return out


def check_installed(table: SeamTable, python: str) -> CheckReport:
    """Read the engine ``python`` would import against ``table`` (seconds; no server, no GPU)."""
    root, version = locate(table, python)
    with Source(root, table.package) as src:
        findings = check_source(table, src)
    return CheckReport(table=table, version=version, root=root, findings=tuple(findings))


# --------------------------------------------------------------------------- the docs' table


def markdown(tables: tuple[SeamTable, ...]) -> str:
    """The docs' table of checked versions × seams (docs/engines.md carries it verbatim)."""
    lines: list[str] = []
    for t in tables:
        lines.append(f"| {t.label or t.engine} seam | kind | hook role | figure | " + " | ".join(t.versions) + " |")
        lines.append("|---|---|---|---|" + "---|" * len(t.versions))
        for s in t.seams:
            where = f"`{s.module}`" if s.kind in MEMBER_KINDS else f"`{t.package}/{s.under}`".replace("/`", "`")
            cells = ["yes" if s.status(v) else "no" if s.status(v) is False else "?" for v in t.versions]
            name = f"`{s.name}`" if s.kind in MEMBER_KINDS else f"`{s.text.strip()}`"
            role = ("read" if s.kind == "field" else "-" if s.kind != "method"
                    else f"{s.role}" + (f" ({s.runner})" if s.runner else "") if s.role else "not wrapped")
            lines.append(f"| {name} ({where}) | {s.kind} | {role} | {s.figure} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
