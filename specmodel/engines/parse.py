"""The helpers every log plug-in's parser uses, one definition each so the engines cannot drift
apart: the number pattern and the reading of a printed number or count, a configuration repr's
values, ANSI colour, a log's lines, what a JSON file holds, and the check that an accept length
fits the draft depth."""

from __future__ import annotations

import re
from collections.abc import Sequence

from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.io import loads_json, read_text_lines_ended
from specmodel.limits import ROUND_SLACK

#: one way to match any digit string (``\d+\.?\d*`` splits n digits n ways: backtracking on a
#: failed suffix such as " tokens/s" was quadratic in the number's length)
NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: why a window a log printed is left out of the distribution and of validation (one rule, both use it)
PARTIAL_LAST_LINE = "partial last line (still being written)"


def strip_ansi(line: str) -> str:
    """ANSI colour removed: vLLM colours its prefix on a terminal (logging_utils/formatter.py)."""
    return _ANSI.sub("", line)


def read_log_lines(path: str) -> tuple[list[str], bool]:
    """Lines (:func:`strip_ansi`) and whether the last line lacks its newline (a server still writing it)."""
    lines, ended = read_text_lines_ended(path, "a text log")
    return [strip_ansi(line) for line in lines], not ended


#: what :func:`json_kind` tells apart
NOT_JSON, JSON_ROWS, SAVED_DOCUMENT, OTHER_DOCUMENT = "not json", "rows", "saved", "document"


def json_kind(path: str, lines: Sequence[str], first: str) -> str:
    """What a file starting with ``{`` holds: several documents (JSONL rows), one of specmodel's own
    saved documents (it carries ``schema``) or another single document; :data:`NOT_JSON` otherwise."""
    if not first.startswith("{"):
        return NOT_JSON
    try:
        doc = loads_json("\n".join(lines), path)
    except SpecmodelError:
        return JSON_ROWS
    return SAVED_DOCUMENT if isinstance(doc, dict) and "schema" in doc else OTHER_DOCUMENT


def count(text: str, where: str, key: str) -> int:
    """A count printed by the server; a number no server prints (beyond int64) is an error, not a hang."""
    if len(text) > 18:
        raise SpecmodelError(f"{where}: {key}: {len(text)}-digit number is not a plausible count")
    return int(text)


def num(text: str, where: str, key: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise SpecmodelError(f"{where}: {key}: not a number: {text!r}") from None
    return v


def too_long(where: str, mean: float, max_tokens: int) -> SpecmodelError:
    return FieldError(
        None, f"{verbatim(where)}: observed accept length {mean:.2f} tokens/step exceeds steps + 1 = {max_tokens} for "
              f"{{steps}} {max_tokens - 1}; pass the {{steps}} the server ran with (--speculative-num-steps / "
              "num_speculative_tokens)"
    )


def check_means(means: Sequence[tuple[float, str]], max_tokens: int) -> None:
    """A window mean above steps + 1 (beyond print rounding) means the wrong --steps: say which window."""
    for m, where in means:
        if m > max_tokens + ROUND_SLACK:
            raise too_long(where, m, max_tokens)


_VAL = r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[-+\w.]+)"


def cfg_value(text: str, key: str, dict_form: bool) -> str | None:
    """The raw value of ``key`` in a dataclass repr (``key=v``) or dict repr (``'key': v``)."""
    rx = (r"'" + re.escape(key) + r"': " if dict_form else r"(?:^|[(,{ ])" + re.escape(key) + "=") + _VAL
    m = re.search(rx, text)
    if m is None:
        return None
    v = m.group(1)
    if v in ("None", "null"):
        return None
    return v[1:-1] if v[:1] in "'\"" else v


def cfg_int(text: str, key: str, dict_form: bool, where: str) -> int | None:
    v = cfg_value(text, key, dict_form)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        raise SpecmodelError(f"{where}: {key}: expected an integer, got {v!r}") from None
