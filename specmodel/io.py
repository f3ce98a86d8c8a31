"""Atomic file writes and bounded, validated reads (no partial results on disk, ever).

Every command reads its inputs through :func:`read_bytes` / :func:`read_json` /
:func:`read_text_lines` and writes through :func:`atomic_write_bytes` / :func:`commit_set`,
so every failure a file or the filesystem can cause is one :class:`SpecmodelError` naming
the path: missing, a directory, not a regular file, too large, corrupt gzip, not UTF-8,
invalid JSON, nesting or integers beyond :mod:`specmodel.limits`, a name too long,
permission denied. Limits bound the work a hostile file can cause (see docs/reliability.md).
One module on purpose: it is the one home of every file read and write, so a check added here
covers every command.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_INT_DIGITS, MAX_JSON_DEPTH, MAX_LINE_BYTES, MAX_TEXT_BYTES

_BOM = b"\xef\xbb\xbf"
#: longest file-name component Linux/macOS filesystems take (NAME_MAX)
NAME_MAX_BYTES = 255
#: temp/staging files of a process that is gone are removed after this long even if its pid was reused
_STALE_S = 3600.0


# ---------------------------------------------------------------------------------------------
# paths


def os_error(p: str | os.PathLike[str], exc: OSError, doing: str = "cannot read") -> SpecmodelError:
    """An OSError on ``p`` as one line naming the path (strerror, never a repr)."""
    why = exc.strerror or str(exc)
    if exc.errno == errno.ENAMETOOLONG:
        why = f"a path component is longer than {NAME_MAX_BYTES} bytes"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why = "permission denied"
    elif exc.errno == errno.EROFS:
        why = "read-only file system"
    return SpecmodelError(f"{os.fspath(p)}: {doing} ({why})")


def check_path_components(p: str | os.PathLike[str], what: str = "") -> Path:
    """Refuse a path with a component the OS cannot hold (before it becomes 'File name too long')."""
    path = Path(p)
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX_BYTES:
            label = f"{what}: " if what else ""
            raise SpecmodelError(f"{label}{_short(path)}: a path component is {len(os.fsencode(part))} bytes, "
                                 f"the limit is {NAME_MAX_BYTES}")
    return path


def _short(p: Path | str, n: int = 120) -> str:
    s = os.fspath(p)
    return s if len(s) <= n else s[: n // 2] + "..." + s[-n // 2:]


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


def confined_name(name: str, flag: str) -> str:
    """A profile/output name that stays inside its directory: one component of letters, digits,
    '.', '_', '+', '-', not starting with '.', at most 128 characters.

    ``--name ../../x`` or ``--name /etc`` would otherwise write outside ``profiles/``.
    """
    if not _NAME_RE.match(name):
        raise SpecmodelError(f"{flag}: {name[:80]!r}: use letters, digits, '.', '_', '+', '-' (no '/'; not "
                             "starting with '.'; at most 128 characters)")
    return name


def safe_name(text: str) -> str:
    """A name derived from something the user did not choose as a name (a directory): made confinable."""
    s = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).lstrip(".-_+")[:128]
    return s or "ingested"


def is_within(child: Path, parent: Path) -> bool:
    """``child`` (symlinks resolved) lies inside ``parent`` (resolved)."""
    try:
        child.resolve().relative_to(parent.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


#: the installed package: its code and the shipped reference profiles (``profiles/<reference>`` links here)
PACKAGE_DIR = Path(__file__).resolve().parent


def refuse_shipped(path: str | os.PathLike[str], flag: str = "") -> None:
    """The one guard every writer goes through: nothing inside the installed package is ever written.

    ``profiles/kimi-k2.5-int4-tp8-pcie`` is a link into ``specmodel/reference/``; following it, an
    in-place update would rewrite the reference every later ``predict`` compares against. Links are
    resolved, so a path reaching the package through any of them is refused too.
    """
    p = Path(path)
    if is_within(p, PACKAGE_DIR):
        label = f"{flag}: " if flag else ""
        raise SpecmodelError(f"{label}{_short(p)}: is inside the installed specmodel package (shipped files, "
                             "such as the reference profiles, are never written); choose a path outside it, "
                             "e.g. profiles/<new-name>")


# ---------------------------------------------------------------------------------------------
# reads


def stat_input(p: Path, what: str) -> os.stat_result:
    check_path_components(p)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise SpecmodelError(f"{p}: file not found") from None
    except NotADirectoryError:
        raise SpecmodelError(f"{p}: file not found (a parent is not a directory)") from None
    except OSError as exc:
        raise os_error(p, exc) from None
    except ValueError:  # an embedded NUL (a path read from a file; argv cannot hold one)
        raise SpecmodelError(f"{_short(p)!r}: not a valid path") from None
    if stat.S_ISDIR(st.st_mode):
        raise SpecmodelError(f"{p}: is a directory, expected {what}")
    if not stat.S_ISREG(st.st_mode):
        raise SpecmodelError(f"{p}: not a regular file (a device, pipe or socket), expected {what}")
    return st


def gunzip(raw: bytes, where: str, *, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """Decompress (possibly multi-member) gzip data, at most ``max_bytes`` out (a gzip bomb is an error)."""
    out: list[bytes] = []
    total = 0
    data = raw
    while data:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = d.decompress(data, max_bytes - total + 1)
        except zlib.error as exc:
            raise SpecmodelError(f"{where}: cannot read (corrupt gzip data: {exc})") from None
        total += len(chunk)
        out.append(chunk)
        if total > max_bytes:
            raise SpecmodelError(f"{where}: decompresses to more than {max_bytes} bytes (the limit)")
        if not d.eof:
            raise SpecmodelError(f"{where}: cannot read (truncated gzip file: the compressed stream ends early)")
        data = d.unused_data.lstrip(b"\x00")  # gzip pads members with zeros sometimes
        if data and data[:2] != b"\x1f\x8b":
            break  # trailing garbage after the last member: gzip(1) ignores it too
    return b"".join(out)


def gzip_bytes(data: bytes) -> bytes:
    """``data`` as one gzip member with no name and mtime 0 (the same trace, the same bytes).

    What the engines write too (SGLang's ``.trace.json.gz``, vLLM's ``.pt.trace.json.gz``): a
    Chrome trace is ~9x smaller, Perfetto and ``specmodel ingest`` open it as it is. ISA-L at
    level 2 (~0.7 GB/s, within 10 % of zlib -6's size), zlib -6 where ``isal`` is missing."""
    try:
        from isal import igzip
    except ImportError:  # pragma: no cover - isal is a dependency; zlib stays the fallback
        import gzip

        return gzip.compress(data, 6, mtime=0)
    return igzip.compress(data, 2, mtime=0)


def read_bytes(path: str | os.PathLike[str], what: str = "a file", *, max_bytes: int = MAX_TEXT_BYTES,
               decompress: bool = True) -> bytes:
    """The whole file (gunzipped when it starts with the gzip magic), at most ``max_bytes``."""
    p = Path(path)
    st = stat_input(p, what)
    if st.st_size > max_bytes:
        raise SpecmodelError(f"{p}: {st.st_size} bytes is more than the {max_bytes}-byte limit for {what}")
    try:
        with p.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise os_error(p, exc) from None
    if len(raw) > max_bytes:
        raise SpecmodelError(f"{p}: more than the {max_bytes}-byte limit for {what}")
    if decompress and raw[:2] == b"\x1f\x8b":
        raw = gunzip(raw, str(p), max_bytes=max_bytes)
    return raw


class _TooLong(ValueError):
    pass


def _parse_int(s: str) -> int:
    if len(s) - s.startswith("-") > MAX_INT_DIGITS:
        raise _TooLong(s.lstrip("-"))
    return int(s)


_DECODER = json.JSONDecoder(parse_int=_parse_int)


def _depth_ok(obj: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            if d > limit:
                return False
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            if d > limit:
                return False
            stack.extend((v, d + 1) for v in o)
    return True


def loads_json(text: str | bytes, where: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` with limits; every failure is one SpecmodelError naming ``where``.

    Integers are limited to :data:`MAX_INT_DIGITS` digits (a longer one is no count, size or
    timestamp, and would raise ValueError past Python's 4,300-digit limit or OverflowError as a
    float); nesting to ``max_depth`` (deeper documents raise RecursionError in the decoder).
    """
    try:
        s = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError:
        raise SpecmodelError(f"{where}: not UTF-8 text") from None
    s = s.removeprefix("\ufeff")  # a byte-order mark some Windows editors write
    try:
        obj = _DECODER.decode(s)
    except json.JSONDecodeError as exc:
        raise SpecmodelError(f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except _TooLong as exc:
        raise SpecmodelError(f"{where}: an integer with {len(str(exc))} digits (more than {MAX_INT_DIGITS}; "
                             "not a count, size or time)") from None
    except RecursionError:
        raise SpecmodelError(f"{where}: JSON nested too deeply (limit {max_depth} levels)") from None
    if not _depth_ok(obj, max_depth):
        raise SpecmodelError(f"{where}: JSON nested too deeply (limit {max_depth} levels)")
    return obj


def read_json(path: str | os.PathLike[str], *, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """Read a JSON (or gzipped JSON) file; any failure becomes one clear SpecmodelError."""
    p = Path(path)
    return loads_json(read_bytes(p, "a JSON file", max_bytes=max_bytes), str(p))


def read_text_lines(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_TEXT_BYTES,
                    max_line_bytes: int = MAX_LINE_BYTES) -> list[str]:
    """Lines of a text file (plain or gzipped), for parsers; ``what`` names the expected content."""
    return read_text_lines_ended(path, what, max_bytes=max_bytes, max_line_bytes=max_line_bytes)[0]


def read_text_lines_ended(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_TEXT_BYTES,
                          max_line_bytes: int = MAX_LINE_BYTES) -> tuple[list[str], bool]:
    """:func:`read_text_lines` plus whether the text ends with a newline (False: the writer may be
    mid-line, e.g. a server log being written)."""
    p = Path(path)
    raw = read_bytes(p, what, max_bytes=max_bytes)
    if b"\x00" in raw[:65536]:
        raise SpecmodelError(f"{p}: binary file, expected {what}")
    # a UTF-8 byte-order mark (Excel's "CSV UTF-8", Notepad) is no part of the first line;
    # CRLF line ends are split like LF by splitlines
    lines = raw.removeprefix(_BOM).decode("utf-8", errors="replace").splitlines()
    if len(raw) > max_line_bytes:
        for i, line in enumerate(lines, start=1):
            if len(line) > max_line_bytes:
                raise SpecmodelError(f"{p}: line {i} is longer than {max_line_bytes} characters (not {what}?)")
    return lines, raw.endswith((b"\n", b"\r")) or not raw


# ---------------------------------------------------------------------------------------------
# writes


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_TMP_PID = re.compile(r"\.p(\d+)\.[^.]*\.(?:tmp|staging)$")


def _temp_prefix(name: str) -> str:
    # the temp name must fit NAME_MAX too: keep the target's name short inside it
    return f".{name[:120]}.p{os.getpid()}."


def clean_stale(directory: str | os.PathLike[str], name: str | None = None) -> list[Path]:
    """Remove temp files/staging dirs a killed writer left in ``directory`` (its pid gone, or an hour old).

    SIGKILL cannot be caught, so a write interrupted by it leaves ``.NAME.pNNN.xxx.tmp``; the next
    write into the same directory removes it. Returns what was removed.
    """
    d = Path(directory)
    removed: list[Path] = []
    prefix = f".{name[:120]}." if name else "."
    try:
        entries = list(d.iterdir())
    except OSError:
        return removed
    now = time.time()
    for e in entries:
        m = _TMP_PID.search(e.name)
        if m is None or not e.name.startswith(prefix):
            continue  # only our own temp names (.NAME.pPID.xxx.tmp|staging): never a user's file
        pid = int(m.group(1))
        try:
            old = now - e.lstat().st_mtime > _STALE_S
        except OSError:
            continue
        if pid == os.getpid() or (_pid_alive(pid) and not old):
            continue  # a live writer's (a reused pid is given an hour)
        if e.is_dir() and not e.is_symlink():
            _recover_set(e)
            _recover_dir(e)
            shutil.rmtree(e, ignore_errors=True)
        else:
            e.unlink(missing_ok=True)
        removed.append(e)
    return removed


def check_output_dir(directory: str | os.PathLike[str], flag: str) -> Path:
    """Refuse, before any work, an output directory that cannot be written: a file at it or at a
    parent, a read-only directory, a name too long. A directory that does not exist yet is fine
    when its nearest existing parent is writable (it is created on write)."""
    d = check_path_components(directory, flag)
    if d.exists() and not d.is_dir():
        raise SpecmodelError(f"{flag}: {d}: is a file, expected a directory")
    probe = d
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise SpecmodelError(f"{flag}: {d}: {probe} is a file, not a directory")
    if probe.exists():
        # try it: os.access says yes to root on /proc or a read-only bind mount
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".specmodel-probe.", dir=probe))
        except OSError as exc:
            raise SpecmodelError(f"{flag}: {d}: cannot write in {probe} "
                                 f"({'permission denied' if exc.errno in (errno.EACCES, errno.EPERM) else exc.strerror})"
                                 ) from None
    return d


def _prepare_parent(p: Path, *, shipped_ok: bool = False) -> None:
    check_path_components(p)
    if not shipped_ok:
        refuse_shipped(p)
    if p.is_dir():
        raise SpecmodelError(f"{p}: is a directory, expected a file path to write")
    for parent in (p.parent, *p.parent.parents):
        if parent.exists() and not parent.is_dir():
            raise SpecmodelError(f"{p}: cannot write: {parent} is a file, not a directory")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error(p.parent, exc, "cannot create the directory") from None


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, shipped_ok: bool = False) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same directory + ``os.replace``.

    A crash mid-write leaves the previous file (if any) untouched; a temp file left by SIGKILL is
    removed by the next write into that directory. A path inside the package is refused
    (:func:`refuse_shipped`); ``shipped_ok`` is for the maintainer script that regenerates the
    reference in a source checkout, never for a command.
    """
    p = Path(path)
    _prepare_parent(p, shipped_ok=shipped_ok)
    clean_stale(p.parent, p.name)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(p.name), suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise os_error(p, exc, "cannot write") from None
    try:
        # mkstemp makes 0600 files; results are meant to be shared like any file the user writes
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise os_error(p, exc, "cannot write") from None
        raise
    return p


def atomic_write_text(path: str | os.PathLike[str], text: str, *, shipped_ok: bool = False) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), shipped_ok=shipped_ok)


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, shipped_ok: bool = False) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n",
                             shipped_ok=shipped_ok)


# ---------------------------------------------------------------------------------------------
# a set of files replaced together (report: PDF + JSON + Markdown)

_COMPLETE = ".complete"


def staging_dir(directory: str | os.PathLike[str], stem: str) -> Path:
    """A fresh staging directory inside ``directory`` (same filesystem: renames out of it are atomic)."""
    d = Path(directory)
    refuse_shipped(d / stem)
    clean_stale(d)
    try:
        return Path(tempfile.mkdtemp(prefix=_temp_prefix(stem), suffix=".staging", dir=d))
    except OSError as exc:
        raise os_error(d, exc, "cannot write") from None


def commit_set(staging: Path, names: Iterable[str]) -> list[Path]:
    """Move every staged file into the staging directory's parent, as one set.

    The staging directory is marked complete (fsynced) before the first rename; if the process
    dies between renames, the next :func:`clean_stale` in that directory finishes the set
    (roll forward), so a new JSON never stays beside an old PDF.
    """
    names = list(names)
    umask = os.umask(0)
    os.umask(umask)
    try:
        for n in names:
            f = staging / n
            os.chmod(f, 0o666 & ~umask)
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
        (staging / _COMPLETE).write_text("\n".join(names) + "\n")
        _fsync_dir(staging)
        out = _recover_set(staging)
    except OSError as exc:
        raise os_error(staging.parent, exc, "cannot write") from None
    shutil.rmtree(staging, ignore_errors=True)
    return out


def _recover_set(staging: Path) -> list[Path]:
    """Finish a complete staging directory's renames; an incomplete one is left to be removed."""
    marker = staging / _COMPLETE
    if not marker.is_file():
        return []
    out = []
    for n in marker.read_text().split():
        src = staging / n
        if src.exists():
            os.replace(src, staging.parent / n)
        out.append(staging.parent / n)
    _fsync_dir(staging.parent)
    return out


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# a whole directory replaced at once (profiles/<name>/), the previous one kept inside it

_REPLACES = ".replaces"
#: where :func:`replace_dir` keeps the directory it replaced (one generation: older ones are dropped)
PREVIOUS = "previous"


def replace_dir(dest: str | os.PathLike[str], fill: Callable[[Path], object], *, flag: str = "") -> Path:
    """Write directory ``dest`` as a whole: ``fill(stage)`` writes the new content into a staging
    directory beside it, then renames swap it in, so a reader sees the old directory or the new
    one, never a mix, and a failure (an exception, Ctrl-C) leaves the old one byte-identical.

    The directory it replaces is kept as ``dest/previous/`` (its own ``previous/`` is dropped):
    an update the user regrets, an in-place ``nccl-tests -o``, can be undone by hand. If the
    process dies between the two renames, the next write into the same parent finishes the swap
    (the staging directory is marked complete first; :func:`clean_stale`). Whether ``dest`` may be
    replaced at all is the caller's rule (schema/profile.py ``check_profile_destination``); the
    package is refused here (:func:`refuse_shipped`).
    """
    d = check_path_components(dest, flag)
    refuse_shipped(d, flag)
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise SpecmodelError(f"{flag + ': ' if flag else ''}{d}: exists and is not a directory")
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise os_error(d.parent, exc, "cannot create the directory") from None
    stage = staging_dir(d.parent, d.name)
    moved = False
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(stage, 0o777 & ~umask)  # mkdtemp makes it 0700; a profile directory is shared like any other
        fill(stage)
        if (stage / PREVIOUS).exists():
            raise SpecmodelError(f"{d}: internal error: {PREVIOUS}/ is reserved for the replaced directory")
        (stage / _REPLACES).write_text(d.name + "\n")
        _fsync_dir(stage)
        if d.exists() and not any(d.iterdir()):
            d.rmdir()  # an empty directory is nothing to keep
        if d.exists():
            os.rename(d, stage / PREVIOUS)
            moved = True
        os.rename(stage, d)
    except BaseException as exc:
        if moved and not d.exists():
            os.rename(stage / PREVIOUS, d)
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(exc, OSError):
            raise os_error(d, exc, "cannot write") from None
        raise
    (d / _REPLACES).unlink(missing_ok=True)
    shutil.rmtree(d / PREVIOUS / PREVIOUS, ignore_errors=True)
    _fsync_dir(d.parent)
    return d


def _recover_dir(staging: Path) -> None:
    """Finish a :func:`replace_dir` interrupted between its renames (the target is missing)."""
    marker = staging / _REPLACES
    if not marker.is_file():
        return
    name = marker.read_text().strip()
    target = staging.parent / name
    if name and "/" not in name and not target.exists():
        os.rename(staging, target)
        (target / _REPLACES).unlink(missing_ok=True)
        shutil.rmtree(target / PREVIOUS / PREVIOUS, ignore_errors=True)
        _fsync_dir(staging.parent)
