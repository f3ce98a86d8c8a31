"""Text inputs of an operating point, parsed: token counts (``32K``), number lists (``0.8,0.6``),
accept histograms (``1:10,2:30`` or a JSON/CSV file) and a calibration point. Errors name the field."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from specmodel.errors import FieldError, SpecmodelError
from specmodel.io import loads_json, read_bytes
from specmodel.limits import MAX_CONTEXT_TOKENS, MAX_STEPS
from specmodel.model.calibrate import Observation, parse_observation

_TOKEN_SUFFIX = {"k": 1024, "m": 1024 * 1024}


def parse_tokens(text: str | int, field: str, maximum: int = MAX_CONTEXT_TOKENS) -> int:
    """A token count: ``32768``, ``32K`` or ``1M`` (K = 1024, as context lengths are quoted), at most
    ``maximum``; errors name ``field``."""
    t = str(text).strip().lower().replace("_", "")
    mult = 1
    if t and t[-1] in _TOKEN_SUFFIX:
        mult, t = _TOKEN_SUFFIX[t[-1]], t[:-1]
    try:
        v = int(t) * mult
    except ValueError:
        raise FieldError(field, f"expected a token count like 32768 or 32K, got {text!r}") from None
    if v < 0:
        raise FieldError(field, f"must be >= 0 tokens, got {text!r}")
    if v > maximum:
        raise FieldError(field, f"must be <= {maximum}, got {str(text)[:40]!r}")
    return v


def parse_token_list(text: str, field: str, maximum: int = MAX_CONTEXT_TOKENS) -> list[int]:
    """``1,4,16`` / ``0,4K,32K`` → sorted unique token counts."""
    vals = sorted({parse_tokens(x, field, maximum) for x in text.split(",") if x.strip()})
    if not vals:
        raise FieldError(field, f"expected a comma-separated list, got {text!r}")
    return vals


def parse_float_list(text: str, field: str) -> list[float]:
    """``0.8,0.6`` (or ``[0.8, 0.6]``) → finite numbers, at least one."""
    try:
        vals = [float(x) for x in text.replace(" ", "").strip("[]").split(",") if x]
    except ValueError:
        raise FieldError(field, f"expected comma-separated numbers, got {text!r}") from None
    if not vals:
        raise FieldError(field, "expected at least one number")
    for v in vals:
        if not math.isfinite(v):
            raise FieldError(field, f"numbers must be finite, got {text!r}")
    return vals


def observation(point: Observation | str | tuple[float, ...] | None) -> Observation | None:
    """A calibration point as ``--calibrate`` takes it: ``"1,2.0,60"`` / ``(1, 2.0, 60)`` =
    (batch, accept tokens/step, total tok/s), or with a context: (batch, context, accept, tok/s)."""
    if point is None or isinstance(point, Observation):
        return point
    text = point if isinstance(point, str) else ",".join(str(v) for v in point)
    return parse_observation(text)


#: ``1:10,2:30`` (also JSON-ish ``{"1": 10}`` is a file): digits, ':', ',', '.', exponents, spaces only
_HIST_SPEC = re.compile(r"^[\s\d:.,eE+\-]*:[\s\d:.,eE+\-]*$")


def read_text(field: str, path: Path, what: str) -> str:
    """A small text input file given as ``field`` (bounded, not binary, not a directory)."""
    raw = read_bytes(path, what, max_bytes=64 << 20)
    if b"\x00" in raw[:65536]:
        raise FieldError(field, f"{path}: binary file, expected {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FieldError(field, f"{path}: not UTF-8 text, expected {what}") from None


def _hist_error(where: str, detail: str) -> SpecmodelError:
    """A histogram error names its file, or the field for an inline ``1:10,2:30`` spec."""
    return SpecmodelError(f"{where}: {detail}") if where else FieldError("accept_hist", detail)


def parse_histogram(text: str) -> dict[int, float]:
    """``1:10,2:30,3:40`` or a file: JSON ``{"1": 10, ...}``, or CSV with value,count rows."""
    # a histogram spec is never tried as a path: a long valid one would be 'File name too long'
    p = Path(text)
    if not _HIST_SPEC.match(text):
        raw = read_text("accept_hist", p, "a JSON/CSV histogram")
        where = str(p)
        try:
            obj = loads_json(raw, where) if raw.lstrip().startswith(("{", "[")) else None
        except SpecmodelError:
            obj = None
        if isinstance(obj, dict):
            items = list(obj.items())
        elif obj is not None:
            raise _hist_error(where, "a JSON histogram must be an object {value: count}")
        else:
            items = []
            for i, row in enumerate(csv.reader(raw.splitlines())):
                if not row or row[0].strip().startswith("#"):
                    continue
                if len(row) < 2:
                    raise _hist_error(where, f"line {i + 1}: expected value,count")
                if i == 0 and not row[0].strip().lstrip("-").isdigit():
                    continue  # header
                items.append((row[0].strip(), row[1].strip()))
    else:
        where = ""
        items = []
        for part in text.split(","):
            if not part.strip():
                continue
            if ":" not in part:
                raise FieldError("accept_hist", f"expected VALUE:COUNT pairs like 1:10,2:30 or a file, got {part!r}")
            k, v = part.split(":", 1)
            items.append((k.strip(), v.strip()))
    out: dict[int, float] = {}
    for k, v in items:
        try:
            ks = str(k).strip()
            if len(ks) > 6:  # a tokens/step value beyond MAX_STEPS + 1 either way
                raise ValueError(ks)
            key = int(ks)
            val = float(v) if not isinstance(v, (int, float)) or isinstance(v, bool) else float(v)
            if isinstance(v, bool):
                raise ValueError(v)
        except (ValueError, TypeError, OverflowError):
            raise _hist_error(where, f"bad histogram entry {str(k)[:40]!r}: {str(v)[:40]!r} (value must be an "
                                 "integer, count a number)") from None
        if not math.isfinite(val) or val < 0:
            raise _hist_error(where, f"histogram count for {key} must be a finite number >= 0, got {str(v)[:40]}")
        if not 0 <= key <= MAX_STEPS + 1:
            raise _hist_error(where, f"histogram value {key} outside 0..{MAX_STEPS + 1} (steps are at most {MAX_STEPS})")
        out[key] = out.get(key, 0.0) + val
    if not out:
        raise _hist_error(where, "empty histogram")
    if not math.isfinite(sum(out.values())):  # each count finite, their sum past the largest float
        raise _hist_error(where, "the counts add up past the largest float: not step counts")
    return out
