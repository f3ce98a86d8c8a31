"""Reading the per-rank JSONL the engine hooks write (SGLang: ``specmodel.sglang_forward``; vLLM:
``specmodel.vllm_step``): one JSON object per line, a format header on every line, a truncated
last line (the process died mid-write) ignored with a warning, anything else malformed refused
with one line naming the file and line. Shared by :mod:`specmodel.trace.sglang_forward` and
:mod:`specmodel.trace.vllm_forward`."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.schema.formats import Format

log = logging.getLogger("specmodel.hooklog")

#: the server's last ``/metrics`` page, kept by ``specmodel vllm`` beside the rank logs of ``--out``
METRICS_FILE = "metrics.prom"


def read_records(path: str | os.PathLike[str], fmt: Format, what: str) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """(``[(where, record), ...]``, truncated) of one rank file; records carry ``fmt``'s header, or
    the calibration probe's (:data:`~specmodel.schema.formats.PROBE`: both hooks write it in between)."""
    from specmodel.io import read_bytes
    from specmodel.schema.formats import PROBE

    p = Path(path)
    raw = read_bytes(p, what)
    lines = raw.split(b"\n")
    out: list[tuple[str, dict[str, Any]]] = []
    truncated = False
    for i, bline in enumerate(lines, start=1):
        if not bline.strip():
            continue
        where = f"{p}: line {i}"
        last_unterminated = i == len(lines) and not raw.endswith(b"\n")
        try:
            rec = json.loads(bline.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # (ValueError: JSON, or 4,300+ digit ints)
            if last_unterminated:
                log.warning("%s: truncated last line ignored (the process stopped mid-write)", where)
                truncated = True
                continue
            raise SpecmodelError(f"{where}: not valid JSON") from None
        (PROBE if PROBE.matches(rec) else fmt).check(rec, where)  # a JSON object of this format, a version this specmodel reads
        out.append((where, rec))
    return out, truncated


def log_files(dirs: Iterable[str | os.PathLike[str]], command: str) -> list[Path]:
    """``rank*.jsonl`` under each directory; one line naming the directory when there are none."""
    files: list[Path] = []
    for d in dirs:
        dp = Path(d)
        if not dp.is_dir():
            raise SpecmodelError(f"{dp}: not a directory (expected the --out directory of `{command}`)")
        found = sorted(dp.glob("rank*.jsonl"))
        if not found:
            raise SpecmodelError(f"{dp}: no rank*.jsonl files (was the server run under `{command}`?)")
        files.extend(found)
    return files


def one_value(what: str, seen: dict[Any, str], hint: str) -> None:
    """Refuse two different values of ``what`` in logs meant for one profile (``seen``: value -> the
    first file that had it): one line naming both files and both values, and ``hint``."""
    if len(seen) > 1:
        (a, fa), (b, fb) = list(seen.items())[:2]  # in the order the files were read
        raise SpecmodelError(f"{fa}: {what} {a} but {fb}: {what} {b}; {hint}")


def check_one_server_kind(*, tp: int | None, tp_sizes: dict[int, str], models: dict[Any, str],
                          versions: dict[Any, str], version_key: str, engine: str) -> None:
    """Logs summarized into one profile come from one TP degree, one model and one engine version,
    and a ``--tp`` given agrees with them (both hooks' ``--summarize``)."""
    one_value("tp_size", {str(k): v for k, v in tp_sizes.items()},
              "logs of different TP degrees make no one profile: summarize each TP alone")
    one_value("model_path", models, "logs of different models make no one profile")
    one_value(version_key, versions, f"logs of different {engine} versions make no one profile")
    if tp is not None and tp_sizes and tp not in tp_sizes:
        first = next(iter(tp_sizes))
        raise SpecmodelError(f"--tp {tp}: contradicts {tp_sizes[first]}: tp_size {first} (leave --tp out: the logs say)")
