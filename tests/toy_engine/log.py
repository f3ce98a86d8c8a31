"""The toy server's log: ``TOYENGINE step batch=B accept=A tps=T`` lines, one decode window each."""

from __future__ import annotations

import re
from collections.abc import Sequence

from specmodel.engines.base import AcceptSummary, DecodeWindow, LogFile, LogFormat, SummaryInputs, window_skip_reason
from specmodel.model import accept as acc

NAME = "toy"
_STEP = re.compile(r"TOYENGINE step batch=(\d+) accept=([\d.]+) tps=([\d.]+)")


def line(batch: int, accept: float, tps: float) -> str:
    """One step line as the toy server writes it."""
    return f"TOYENGINE step batch={batch} accept={accept:.2f} tps={tps:.1f}\n"


def sniff(path: str, lines: Sequence[str], first: str) -> bool:
    return any("TOYENGINE " in ln for ln in lines)


def parse(path: str, lines: list[str], unterminated: bool) -> LogFile:
    ws = []
    for i, ln in enumerate(lines, start=1):
        m = _STEP.search(ln)
        if m:
            ws.append(DecodeWindow(file=path, line=i, engine=NAME, batch=int(m.group(1)),
                                   accept_len=float(m.group(2)), tokens_per_s=float(m.group(3))))
    return LogFile(path=path, engine=NAME, fmt="", lines_read=len(lines), lines_matched=len(ws), windows=tuple(ws))


def summarize(files: Sequence[LogFile], inp: SummaryInputs) -> AcceptSummary:
    use = [w for f in files for w in f.windows if window_skip_reason(w) is None]
    dist = acc.mixture_of_means(((w.accept_len or 1.0, float(w.batch)) for w in use), inp.max_tokens,
                                source="toy", samples=len(use))
    return AcceptSummary(dist=dist, rates=None, files=tuple(files), windows_used=len(use), windows=tuple(use))


FORMAT = LogFormat(name=NAME, description="Toy engine log", help_name="Toy engine log", text=True,
                   sniff=sniff, parse=parse, summarize=summarize, steps_of=lambda files, k: None)
