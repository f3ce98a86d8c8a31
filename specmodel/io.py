"""Atomic file writes and validated JSON reads (no partial results on disk, ever)."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file in the same directory + ``os.replace``.

    A crash mid-write leaves the previous file (if any) untouched.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
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
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return p


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON (or gzipped JSON) file; any failure becomes one clear SpecmodelError."""
    p = Path(path)
    if not p.exists():
        raise SpecmodelError(f"{p}: file not found")
    if p.is_dir():
        raise SpecmodelError(f"{p}: is a directory, expected a JSON file")
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except (OSError, EOFError) as exc:
        raise SpecmodelError(f"{p}: cannot read ({exc})") from None
    except UnicodeDecodeError:
        raise SpecmodelError(f"{p}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SpecmodelError(f"{p}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def read_text_lines(path: str | os.PathLike[str], what: str) -> list[str]:
    """Lines of a text file (plain or gzipped), for parsers; ``what`` names the expected content."""
    p = Path(path)
    if not p.exists():
        raise SpecmodelError(f"{p}: file not found")
    if p.is_dir():
        raise SpecmodelError(f"{p}: is a directory, expected {what}")
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise SpecmodelError(f"{p}: cannot read ({exc})") from None
    if b"\x00" in raw[:65536]:
        raise SpecmodelError(f"{p}: binary file, expected {what}")
    return raw.decode("utf-8", errors="replace").splitlines()
