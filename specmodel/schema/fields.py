"""Reading one field of a JSON object that the user gave (a profile, a record in it): the value
checked for its type and bounds, a problem named as ``where: field``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specmodel.errors import SpecmodelError


def at_record(exc: SpecmodelError, where: str, inner: str = "") -> SpecmodelError:
    """``exc``, raised while reading the record at ``where``, as one error that names ``where``
    once (``inner``: the prefix a nested record's own reader put first, dropped)."""
    msg = str(exc)
    return SpecmodelError(msg if msg.startswith(where) else f"{where}: {msg.replace(inner, '') if inner else msg}")


def field_name(where: str, fld: str) -> str:
    """``where: field`` (just ``field`` when ``where`` is empty): how a message names a field."""
    return f"{where}: {fld}" if where else fld


def read_num(d: Mapping[str, Any], key: str, where: str, *, minimum: float = 0.0,
             optional: bool = False, default: float | None = None, strict: bool = False) -> float:
    """``d[key]`` as a finite number >= ``minimum`` (> with ``strict``); missing: ``default`` when ``optional``."""
    if key not in d or d[key] is None:
        if optional:
            return default if default is not None else 0.0
        raise SpecmodelError(f"{field_name(where, key)}: missing")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecmodelError(f"{field_name(where, key)}: expected a number, got {v!r}")
    fv = float(v)
    if math.isnan(fv) or math.isinf(fv):
        raise SpecmodelError(f"{field_name(where, key)}: must be finite, got {v!r}")
    if strict and fv <= minimum:
        raise SpecmodelError(f"{field_name(where, key)}: must be > {minimum:g}, got {fv:g}")
    if fv < minimum:
        raise SpecmodelError(f"{field_name(where, key)}: must be >= {minimum:g}, got {fv:g}")
    return fv


def read_int(d: Mapping[str, Any], key: str, where: str, *, minimum: int = 0,
             optional: bool = False, default: int = 0) -> int:
    """``d[key]`` as an integer >= ``minimum`` (an integral float is taken); missing: ``default`` when ``optional``."""
    if key not in d or d[key] is None:
        if optional:
            return default
        raise SpecmodelError(f"{field_name(where, key)}: missing")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise SpecmodelError(f"{field_name(where, key)}: expected an integer, got {v!r}")
    if v < minimum:
        raise SpecmodelError(f"{field_name(where, key)}: must be >= {minimum}, got {v}")
    return int(v)


def read_dict(d: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """``d[key]`` as a dict (missing or null: empty)."""
    v = d.get(key, {})
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise SpecmodelError(f"{field_name(where, key)}: expected an object, got {type(v).__name__}")
    return dict(v)
