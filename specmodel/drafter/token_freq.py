"""Target-token frequency files: how often each target token id occurs in the user's traffic.

Formats (chosen by content, not extension):

* JSON object ``{"<token id>": count, ...}`` (optionally gzipped);
* CSV/TSV lines ``token_id,count`` (comma, tab or spaces); blank lines and ``#`` comments are
  skipped, and a first line that is not numeric is taken as a header.

Counts are non-negative numbers (floats allowed: weights); ids must be in the target vocab.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from specmodel.errors import FieldError, SpecmodelError
from specmodel.io import read_bytes, read_json

_SPLIT = re.compile(r"[,\t ]+")


def _count(p: Path, where: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise SpecmodelError(f"{p}: {where}: count must be a number, got {v!r}")
    try:
        c = float(v)
    except ValueError:
        raise SpecmodelError(f"{p}: {where}: count must be a number, got {v!r}") from None
    if math.isnan(c) or math.isinf(c) or c < 0:
        raise SpecmodelError(f"{p}: {where}: count must be a finite number >= 0, got {v!r}")
    return c


def _token_id(p: Path, where: str, v: str) -> int:
    try:
        return int(v.strip())
    except ValueError:
        raise SpecmodelError(f"{p}: {where}: token id must be an integer, got {v!r}") from None


def read_token_freq(path: str | Path, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids int64, counts float64), ids unique and in [0, vocab_size); raises SpecmodelError."""
    p = Path(path)
    if not p.exists():
        raise SpecmodelError(f"{p}: token-frequency file not found")
    if p.is_dir():
        raise FieldError(None, f"{p}: {{token_freq}} must be a file, got a directory")
    raw = read_bytes(p, "a token-frequency file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecmodelError(f"{p}: not UTF-8 text") from None

    pairs: list[tuple[int, float, str]] = []
    if text.lstrip().startswith(("{", "[")):
        doc = read_json(p)
        if not isinstance(doc, dict):
            raise SpecmodelError(f"{p}: expected a JSON object of token id -> count")
        for k, v in doc.items():
            pairs.append((_token_id(p, f"key {k!r}", k), _count(p, f"token {k}", v), f"key {k!r}"))
    else:
        first = True
        for lineno, line in enumerate(text.splitlines(), 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            parts = _SPLIT.split(s)
            if first and not parts[0].lstrip("-").isdigit():
                first = False  # header line
                continue
            first = False
            if len(parts) != 2:
                raise SpecmodelError(f"{p}: line {lineno}: expected 'token_id,count', got {s!r}")
            where = f"line {lineno}"
            pairs.append((_token_id(p, where, parts[0]), _count(p, where, parts[1]), where))

    if not pairs:
        raise SpecmodelError(f"{p}: no token counts")
    seen: dict[int, str] = {}
    for tid, _, where in pairs:
        if not 0 <= tid < vocab_size:
            raise SpecmodelError(f"{p}: {where}: token id {tid} outside the target vocab [0, {vocab_size})")
        if tid in seen:
            raise SpecmodelError(f"{p}: {where}: token id {tid} repeated (first at {seen[tid]})")
        seen[tid] = where
    ids = np.fromiter((t for t, _, _ in pairs), dtype=np.int64, count=len(pairs))
    counts = np.fromiter((c for _, c, _ in pairs), dtype=np.float64, count=len(pairs))
    if float(counts.sum()) <= 0:
        raise SpecmodelError(f"{p}: all counts are zero")
    return ids, counts
