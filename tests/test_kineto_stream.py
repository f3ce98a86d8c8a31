"""The streaming trace reader: same events as json.load, bounded buffer, clear errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from specmodel.errors import SpecmodelError
from specmodel.trace import _jsonstream
from specmodel.trace._jsonstream import scan_trace
from tests.conftest import DATA

GPU0 = DATA / "kineto_gpu_tp2" / "1764000000-TP-0.trace.json"
GPU1 = DATA / "kineto_gpu_tp2" / "1764000000-TP-1.trace.json.gz"


def _collect(path: Path) -> tuple[dict, list]:
    events: list = []
    header = scan_trace(path, events.append)
    return header, events


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_same_events_as_json_load_at_any_chunk_size(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # tiny chunks put every token (numbers included) across a chunk edge somewhere
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", chunk)
    for path in (GPU0, GPU1):
        want = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
        header, events = _collect(path)
        assert events == want["traceEvents"]
        assert header["baseTimeNanoseconds"] == want["baseTimeNanoseconds"] == 1764000000000000000  # after the array
        assert header["distributedInfo"] == want["distributedInfo"]


def test_header_only_stops_at_trace_events(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    # everything after "traceEvents": [ is garbage: a header read must not look at it
    p.write_text('{"distributedInfo": {"rank": 3}, "traceEvents": [ this is not json')
    header = scan_trace(p, None)
    assert header["distributedInfo"] == {"rank": 3} and "traceEvents" in header


@pytest.mark.parametrize(("text", "message"), [
    ('{"traceEvents": [{"ph": "X"}, {"ph": "X"', "truncated"),
    ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected ',' or ']' in traceEvents"),
    ('{"traceEvents": [{"ph": "X"}]', "truncated"),
    ('[1, 2, 3]', "a trace is a JSON object"),
    ('{"traceEvents": {"a": 1}}', "traceEvents must be an array"),
    ('{"traceEvents": [{"ph": nope}]}', "invalid JSON"),
    ('', "file ends"),
])
def test_invalid_json_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(SpecmodelError) as exc:
        _collect(p)
    msg = str(exc.value)
    assert str(p) in msg and message in msg and "\n" not in msg


@pytest.fixture(params=["isal", "zlib"])
def gzip_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each gzip reader: ISA-L's (the dependency) and the standard library's (the fallback)."""
    if request.param == "zlib":
        monkeypatch.setattr(_jsonstream, "igzip", None)
    else:
        assert _jsonstream.igzip is not None  # installed by the project's own dependencies
    return str(request.param)


def test_both_gzip_readers_give_the_same_events(gzip_reader: str, tmp_path: Path) -> None:
    header, events = _collect(GPU1)
    doc = json.loads(gzip.decompress(GPU1.read_bytes()))
    assert events == doc["traceEvents"] and header["traceEvents"] is None
    # two gzip members (a concatenated file) read as one stream
    two = tmp_path / "two.json.gz"
    text = json.dumps(doc)
    cut = text.index('"traceEvents"')
    two.write_bytes(gzip.compress(text[:cut].encode()) + gzip.compress(text[cut:].encode()))
    assert _collect(two)[1] == events


def test_gzip_errors(tmp_path: Path, gzip_reader: str) -> None:
    raw = GPU1.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(SpecmodelError, match="truncated gzip"):
        _collect(cut)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(raw[:10] + b"\x00" * 50 + raw[60:])
    with pytest.raises(SpecmodelError, match=str(bad)):
        _collect(bad)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"traceEvents": ["\xff\xfe"]}')
    with pytest.raises(SpecmodelError, match="not UTF-8"):
        _collect(binary)


def test_invalid_json_deep_in_a_big_file_does_not_buffer_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", 1024)
    monkeypatch.setattr(_jsonstream, "_SLACK_CHARS", 4096)
    good = ",".join(f'{{"ph": "X", "name": "k{i}"}}' for i in range(2000))
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + good + ', {"ph": bad}, ' + good + "]}")
    seen: list = []
    sizes: list[int] = []
    fill = _jsonstream._Scanner._fill

    def spy(self: _jsonstream._Scanner) -> None:
        fill(self)
        sizes.append(len(self.buf))

    monkeypatch.setattr(_jsonstream._Scanner, "_fill", spy)
    with pytest.raises(SpecmodelError, match="invalid JSON"):
        scan_trace(p, seen.append)
    assert len(seen) == 2000  # every event before the broken one was delivered, none after
    assert max(sizes) <= 4096 + 2 * 1024  # the buffer stayed bounded: the rest of the file was never held
    assert p.stat().st_size > 20 * max(sizes)


def test_the_cyclic_collector_is_paused_while_a_trace_streams_and_restored_after(tmp_path: Path) -> None:
    import gc

    seen: list[bool] = []
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X"}, {"ph": ')
    assert gc.isenabled()
    try:
        scan_trace(GPU0, lambda e: seen.append(gc.isenabled()))
        assert seen and not any(seen)  # off while events stream
        assert gc.isenabled()  # back on after
        with pytest.raises(SpecmodelError):
            scan_trace(bad, lambda e: None)
        assert gc.isenabled()  # and after an error
        gc.disable()
        scan_trace(GPU0, lambda e: None)
        assert not gc.isenabled()  # a caller's own choice is left as it was
    finally:
        gc.enable()


@pytest.mark.parametrize("chunk", [64, 1 << 20])
@pytest.mark.parametrize("keep", [False, True])
def test_an_error_names_the_character_offset_in_the_file_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, keep: bool) -> None:
    # no newline translation (CRLF counts two characters), and a non-ASCII character one, on the
    # reference path and wherever the compiled scan hands over
    from specmodel.trace.attribution import Collector
    from specmodel.trace.kineto import _is_span_name

    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", chunk // 2)
    ev = '{"ph": "X", "cat": "kernel", "name": "g\u00e9mm", "pid": 0, "tid": 7, "ts": %d, "dur": 1}'
    text = '{"traceEvents": [' + ",\r\n".join(ev % i for i in range(40)) + ",,\r\n" + ev % 41 + "]}"
    p = tmp_path / "t.json"
    p.write_bytes(text.encode())
    col = Collector(path=str(p), span_name=_is_span_name)
    with pytest.raises(SpecmodelError) as err:
        scan_trace(p, col.on_event, keep=col if keep else None)
    at = text.index(",,") + 1
    assert str(err.value).endswith(f"at character {at}"), str(err.value)
