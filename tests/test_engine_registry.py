"""The engine registry (specmodel.engines): one tuple, and a new engine is one module plus
one line there — parsed, summarised and listed in the commands' help without other edits."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from specmodel import engines
from specmodel.engines.base import (
    AcceptSummary,
    DecodeWindow,
    LogFile,
    LogFormat,
    SummaryInputs,
    window_skip_reason,
)
from specmodel.engines.logs import parse_log, summarize
from specmodel.errors import SpecmodelError
from specmodel.model import accept as acc
from tests.conftest import DATA

_TOY = re.compile(r"TOYENGINE step batch=(\d+) accept=([\d.]+) tps=([\d.]+)")


def _toy_sniff(path: str, lines: Sequence[str], first: str) -> bool:
    return any("TOYENGINE " in ln for ln in lines)


def _toy_parse(path: str, lines: list[str], unterminated: bool) -> LogFile:
    ws = []
    for i, ln in enumerate(lines, start=1):
        m = _TOY.search(ln)
        if m:
            ws.append(DecodeWindow(file=path, line=i, engine="toy", batch=int(m.group(1)),
                                   accept_len=float(m.group(2)), tokens_per_s=float(m.group(3))))
    return LogFile(path=path, engine="toy", fmt="", lines_read=len(lines), lines_matched=len(ws), windows=tuple(ws))


def _toy_summarize(files: Sequence[LogFile], inp: SummaryInputs) -> AcceptSummary:
    use = [w for f in files for w in f.windows if window_skip_reason(w) is None]
    dist = acc.mixture_of_means(((w.accept_len or 1.0, float(w.batch)) for w in use), inp.max_tokens,
                                source="toy", samples=len(use))
    return AcceptSummary(dist=dist, rates=None, files=tuple(files), windows_used=len(use), windows=tuple(use))


TOY = LogFormat(name="toy", description="Toy engine log", help_name="Toy engine log", text=True,
                sniff=_toy_sniff, parse=_toy_parse, summarize=_toy_summarize, steps_of=lambda files, k: None)


def test_one_tuple_holds_every_log_format_with_unique_names():
    names = [e.name for e in engines.ENGINES]
    assert len(names) == len(set(names))
    assert {"sglang", "vllm", "bench_speculative", "specmodel.accept"} <= set(names)
    for e in engines.log_formats():
        assert engines.log_format(e.name) is e
    with pytest.raises(SpecmodelError, match="unknown log format"):
        engines.log_format("nope")


def test_a_new_engine_is_one_module_and_one_registry_line(monkeypatch, tmp_path: Path):
    log = tmp_path / "toy.log"
    log.write_text("booting\nTOYENGINE step batch=2 accept=2.50 tps=100.0\nTOYENGINE step batch=2 accept=3.50 tps=0\n"
                   "TOYENGINE step batch=1 accept=2.00 tps=80.0\n")
    with pytest.raises(SpecmodelError, match="no SGLang 'Decode batch' lines"):
        parse_log(log)
    monkeypatch.setattr(engines, "ENGINES", (*engines.ENGINES, TOY))
    s = summarize([str(log)], 4)
    # the idle window (tps 0) is left out by the shared rule; weights 2 and 1
    assert s.windows_used == 2 and s.dist.mean_tokens == pytest.approx((2 * 2.5 + 2.0) / 3, abs=1e-9)
    assert parse_log(log).description == "Toy engine log"
    assert "Toy engine log" in engines.log_help()


def test_two_text_formats_in_one_file_are_refused(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(engines, "ENGINES", (*engines.ENGINES, TOY))
    log = tmp_path / "both.log"
    log.write_text((DATA / "logs_sglang_055" / "server.log").read_text() + "TOYENGINE step batch=1 accept=2 tps=1\n")
    with pytest.raises(SpecmodelError, match="both SGLang and Toy"):
        parse_log(log)


def test_command_help_lists_what_the_registry_holds():
    # a format registered at run time shows in accept's, validate's and predict's help: the
    # strings are generated from the registry, not written in the commands
    code = (
        "import sys\n"
        "from specmodel import engines\n"
        "from tests.test_engine_registry import TOY\n"
        "engines.ENGINES = (*engines.ENGINES, TOY)\n"
        "from specmodel.cli import cli\n"
        "sys.argv = ['specmodel', sys.argv[1], '--help']\n"
        "cli()\n"
    )
    root = Path(__file__).resolve().parents[1]
    for cmd in ("predict", "accept", "validate"):
        r = subprocess.run([sys.executable, "-c", code, cmd], capture_output=True, text=True, timeout=60, cwd=root)
        assert r.returncode == 0, r.stderr
        flat = " ".join(r.stdout.split())
        assert "Toy engine log" in flat and "vLLM server log" in flat and "SGLang server log" in flat, (cmd, flat)
