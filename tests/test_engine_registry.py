"""The engine registry (specmodel.engines): one tuple of formats built from the engine packages; a
format added to it is parsed, summarised and listed in the help without other edits (the whole toy
engine, added by its one line: tests/test_toy_engine.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmodel import engines
from specmodel.engines.logs import parse_log, summarize
from specmodel.errors import SpecmodelError
from tests.conftest import DATA
from tests.toy_engine import log as toy_log

TOY = toy_log.FORMAT


def test_one_tuple_holds_every_log_format_with_unique_names():
    names = [e.name for e in engines.ENGINES]
    assert len(names) == len(set(names))
    assert {"sglang", "vllm", "bench_speculative", "specmodel.accept"} <= set(names)
    for e in engines.log_formats():
        assert engines.log_format(e.name) is e
    with pytest.raises(SpecmodelError, match="unknown log format"):
        engines.log_format("nope")


def test_a_format_added_to_the_tuple_is_read_and_listed(monkeypatch, tmp_path: Path):
    log = tmp_path / "toy.log"
    log.write_text("booting\n" + toy_log.line(2, 2.5, 100.0) + toy_log.line(2, 3.5, 0.0) + toy_log.line(1, 2.0, 80.0))
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
    log.write_text((DATA / "logs_sglang_055" / "server.log").read_text() + "" + toy_log.line(1, 2.0, 1.0))
    with pytest.raises(SpecmodelError, match="both SGLang and Toy"):
        parse_log(log)
