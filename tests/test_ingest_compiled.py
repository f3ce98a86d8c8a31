"""The compiled pre-filter (specmodel/trace/_cscan.c): it reads the JSON text itself, so
every way JSON can be written -- escapes, duplicated keys, non-ASCII, exponents, odd types, invalid
bytes -- must give what the standard library's decoder and Collector.on_event give (the reference,
``keep=None``): the same collected state, or the same one-line error."""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmodel.errors import SpecmodelError
from specmodel.trace import _jsonstream, attribution
from specmodel.trace._jsonstream import scan_trace
from specmodel.trace.attribution import Collector
from specmodel.trace.kineto import _is_span_name
from tests.conftest import DATA
from tests.fuzz import mutate
from tests.test_ingest_prefilter import _state, count_reference_reads


def test_the_compiled_prefilter_is_built() -> None:
    # setup.py builds it on every install from the project's files (gcc is on every box of this
    # kind); without it ingest still runs, on the msgspec path, at about half the speed
    assert attribution._cscan is not None
    assert Collector(path="x").compiled() is not None


def test_the_statuses_are_one_protocol() -> None:
    from specmodel.trace import _cscan

    assert _cscan is not None
    assert (_cscan.MORE, _cscan.END, _cscan.SLOW, _cscan.WIDE) == (_jsonstream.C_MORE, _jsonstream.C_END,
                                                                    _jsonstream.C_SLOW, _jsonstream.C_WIDE)


def _collect(p: Path, mode: str) -> Any:
    """The state one path collects from ``p``: "full" (the reference), "compiled", "msgspec"."""
    col = Collector(path=str(p), span_name=_is_span_name)
    saved = attribution._cscan
    if mode == "msgspec":
        attribution._cscan = None
    try:
        scan_trace(p, col.on_event, keep=None if mode == "full" else col, on_skipped=col.skipped)
        return _state(col)
    except SpecmodelError as exc:
        return {"error": str(exc)}
    finally:
        attribution._cscan = saved


def _same_everywhere(p: Path) -> Any:
    ref = _collect(p, "full")
    assert _collect(p, "compiled") == ref, p.read_bytes()[:400]
    assert _collect(p, "msgspec") == ref
    return ref


# Event texts written as no json.dumps would: each is read the reference's way, whether the
# compiled scan reads it itself or hands it to the reference (escapes, non-ASCII, big numbers...)
_K = '"cat": "kernel", "name": "gemm", "pid": 0, "tid": 7'
_ODD_EVENTS = [
    '{"ph": "X", ' + _K + ', "ts": 1.5, "dur": 2, "args": {"correlation": 1}}',
    '{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_bf16_RING_LL","pid":0,"tid":7,"ts":3,"dur":4,'
    '"args":{"correlation":2,"Collective name":"allreduce","In msg nelems":7168,"dtype":"BFloat16",'
    '"Seq":5,"Process Group Name":"0"}}',
    '{\n\t"ph" :\r "X" , ' + _K + ' ,"ts": 2E1, "dur": 0.5e+1, "args": {"correlation": -0}}',
    '{"ph": "\\u0058", ' + _K + ', "ts": 5, "dur": 1}',  # ph "X" spelt with an escape
    '{"p\\u0068": "X", ' + _K + ', "ts": 6, "dur": 1}',  # the key spelt with an escape
    '{"ph": "X", "cat": "kernel", "name": "g\\"emm\\\\", "pid": 0, "tid": 7, "ts": 7, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "g\u00e9mm", "pid": 0, "tid": 7, "ts": 8, "dur": 1}',  # latin-1
    '{"ph": "X", "cat": "kernel", "name": "\u540d", "pid": 0, "tid": 7, "ts": 9, "dur": 1}',  # beyond U+00FF
    '{"ph": "X", "ph": "i", ' + _K + ', "ts": 10, "dur": 1}',  # json.loads keeps the last
    '{"ph": "i", "ph": "X", ' + _K + ', "ts": 11, "dur": 1}',
    '{"ph": "X", ' + _K + ', "ts": 12, "dur": 1, "args": {"correlation": 1, "correlation": 9}}',
    '{"ph": "X", ' + _K + ', "ts": 12345678901234567890123, "dur": 1}',
    '{"ph": "X", ' + _K + ', "ts": 1e400, "dur": 1}',
    '{"ph": "X", ' + _K + ', "ts": NaN, "dur": 1}',
    '{"ph": "X", ' + _K + ', "ts": 13, "dur": -Infinity}',
    '{"ph": "X", ' + _K + ', "ts": "14", "dur": 1}',
    '{"ph": "X", ' + _K + ', "ts": 15, "dur": 1, "args": [1, 2]}',
    '{"ph": "X", ' + _K + ', "ts": 16, "dur": 1, "args": null}',
    '{"ph": "X", ' + _K + ', "ts": 17, "dur": 1, "args": {"correlation": [1]}}',
    '{"ph": "X", ' + _K + ', "ts": 18, "dur": 1, "args": {"correlation": "c18", "x": {"y": [[[{}]]]}}}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": [0], "tid": 7, "ts": 19, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": "p", "tid": 7.5, "ts": 20, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": 5, "pid": 0, "tid": 7, "ts": 21, "dur": 1}',
    '{"ph": "X", "cat": ["kernel"], "name": "gemm", "pid": 0, "tid": 7, "ts": 22, "dur": 1}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 1, "dur": 1, '
    '"args": {"correlation": 1, "cbid": 211}}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": 2, "dur": -1, '
    '"args": {"correlation": 2}}',
    '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 9, "tid": 9, "ts": 2.5, "dur": 1, '
    '"args": {"Collective name": "allreduce", "In msg nelems": 7168, "dtype": "BFloat16", "Seq": 5}}',
    '{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 9, "tid": 9, "ts": 2.6, "dur": 1, '
    '"args": {"Input Dims": [[4, 7168], []], "Input type": ["c10::BFloat16", ""]}}',
    '{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 9, "tid": 10, "ts": 2.7, "dur": 0.5, '
    '"args": {"Input Dims": [[4, 7168]], "Input type": ["float"]}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 9, "tid": 9, "ts": 0.5, "dur": 0.25}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 9, "tid": 9, "ts": 0.75}',
    '{"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=1]", "pid": 9, "tid": 9, "ts": 0, "dur": 40, '
    '"args": {"External id": 3}}',
    '{"ph": "X", "cat": "gpu_user_annotation", "name": "step[DECODE bs=1]", "pid": 0, "tid": 7, "ts": 0, "dur": 40}',
    '{"ph": "X", "cat": "user_annotation", "pid": 9, "tid": 9, "ts": 0, "dur": 1}',  # no name
    '{"ph": "s", "id": 1, "pid": 9, "tid": 9, "ts": 1, "cat": "ac2g", "name": "ac2g"}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 23, "dur": 1, "extra": "\\ud800"}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 24, "dur": 1, "extra": "\\x"}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 25, "dur": 01}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 26, "dur": 1.}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 27, "dur": 1, "x": [1,]}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 28, "dur": 1, "x": "a\tb"}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 29, "dur": 1, "x": tru}',
    '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 30, "dur": 1,}',
    '{}',
    '5',
    '[]',
    '"x"',
    # a CPU trace's collectives, each way on_event reads one (the compiled scan records them itself)
    '{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 9, "tid": 10, "ts": 3.5, "dur": 0.5, '
    '"args": {"Collective name": "allgather"}}',
    '{"ph": "X", "cat": "user_annotation", "name": "custom:comm", "pid": 9, "tid": 9, "ts": 3.6, "dur": 0.5, '
    '"args": {"Collective name": "allreduce", "In msg nelems": 4, "dtype": "Float"}}',
    '{"ph": "X", "cat": "user_annotation", "name": "custom:comm", "pid": 9, "tid": 9, "ts": 3.61, "dur": 0.5, '
    '"args": {"Collective name": ""}}',
    '{"ph": "X", "cat": "cpu_op", "name": "my::comm", "pid": 9, "tid": 9, "ts": 3.7, "dur": 0.5, '
    '"args": {"Collective name": "broadcast"}}',
    '{"ph": "X", "cat": "user_annotation", "name": "c10d::allreduce_", "pid": 9, "tid": 9, "ts": 3.8, "dur": 1}',
    '{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 9, "tid": 10, "ts": "3.9", "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 9, "tid": 9, "ts": 4.0, "dur": -1}',
    '{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 9, "tid": [9], "ts": 4.1, "dur": 1}',
    '{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 9, "ts": 4.2, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "gloo\\u003aall_reduce", "pid": 9, "tid": 9, "ts": 4.3, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 9, "tid": 9, "ts": 4.4, "dur": 1, '
    '"args": {"Input Dims": [[2, 99999999999999999999]], "Input type": ["float"]}}',
    '{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 9, "tid": 10, "ts": 4.5, "dur": 1, '
    '"args": null}',
]

def _loads(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


@pytest.mark.parametrize("chunk", [64, 1 << 20])
@pytest.mark.parametrize("i", range(len(_ODD_EVENTS)))
def test_each_odd_event_reads_as_the_reference_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        i: int, chunk: int) -> None:
    # the odd one between ordinary events (a kernel first: the GPU rules are in force) and at the end
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", chunk // 2)
    plain = _ODD_EVENTS[:2] + _ODD_EVENTS[24:26] + _ODD_EVENTS[31:33]
    for events in ([*plain, _ODD_EVENTS[i], *plain], [*plain, _ODD_EVENTS[i]], [_ODD_EVENTS[i], *plain]):
        p = tmp_path / "t.json"
        p.write_text('{"traceEvents": [' + ", ".join(events) + '], "x": 1}', encoding="utf-8")
        ref = _same_everywhere(p)
        if "error" not in ref and _loads(_ODD_EVENTS[i]) and _ODD_EVENTS[i].startswith("{"):
            assert ref["n_events"] == len(events)


_CPU_PLAIN = [
    '{"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=1]", "pid": 9, "tid": 9, "ts": 0, "dur": 40}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 9, "tid": 9, "ts": 1, "dur": 0.5}',
    '{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 9, "tid": 9, "ts": 2, "dur": 0.25, '
    '"args": {"Input Dims": [[], []], "Input type": ["", ""]}}',
    '{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 9, "tid": 10, "ts": 2, "dur": 1, '
    '"args": {"Input Dims": [[1, 512]], "Input type": ["float"]}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 9, "tid": 9, "ts": 3.5, "dur": 0.5}',
]


@pytest.mark.parametrize("chunk", [64, 1 << 20])
@pytest.mark.parametrize("i", [*range(24, 34), *range(len(_ODD_EVENTS) - 12, len(_ODD_EVENTS))])
def test_each_odd_event_on_a_cpu_trace_reads_as_the_reference_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, i: int, chunk: int) -> None:
    # no kernel: host ops and CPU collectives are kept, in the reference's order
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", chunk // 2)
    for events in ([*_CPU_PLAIN, _ODD_EVENTS[i], *_CPU_PLAIN], [_ODD_EVENTS[i], *_CPU_PLAIN, _ODD_EVENTS[i]]):
        p = tmp_path / "t.json"
        p.write_text('{"traceEvents": [' + ", ".join(events) + '], "x": 1}', encoding="utf-8")
        ref = _same_everywhere(p)
        if "error" not in ref:
            assert ref["n_kernels"] == 0 and ref["host_ops"] and len(ref["cpu_colls"]) >= 2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(picks=st.lists(st.integers(0, len(_ODD_EVENTS) - 1), max_size=30),
       sep=st.sampled_from([", ", ",", ",\n  ", " ,\t"]), chunk=st.sampled_from([40, 97, 1 << 16]),
       tail=st.sampled_from(["]}", "] }", "],\"a\": {\"b\": [1]}}", "]", ",]}", "]}junk"]), gz=st.booleans())
def test_generated_mixtures_of_odd_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, picks: list[int],
                                          sep: str, chunk: int, tail: str, gz: bool) -> None:
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", chunk // 2)
    text = '{"traceEvents": [' + sep.join(_ODD_EVENTS[i] for i in picks) + tail
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    _same_everywhere(p)


def test_an_event_longer_than_the_bound_is_read_by_the_reference(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", 1024)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", 512)
    monkeypatch.setattr(_jsonstream, "MAX_COMPILED_EVENT_CHARS", 4096)
    calls = count_reference_reads(monkeypatch)
    big = '{"ph": "X", ' + _K + ', "ts": 1, "dur": 1, "args": {"correlation": 1, "blob": "' + "x" * 20000 + '"}}'
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + ", ".join([_ODD_EVENTS[0], big, _ODD_EVENTS[0]]) + "]}")
    ref = _same_everywhere(p)
    assert ref["n_kernels"] == 3 and calls[0] >= 1


def test_the_first_kernel_changes_the_rules_mid_buffer(tmp_path: Path) -> None:
    # host ops are kept until the first kernel, a collective's caller after it: one buffer holds both
    host = '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 9, "tid": 9, "ts": %d, "dur": 0.5}'
    caller = ('{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 9, "tid": 9, "ts": %d, "dur": 1,'
              ' "args": {"Collective name": "allreduce", "In msg nelems": 8, "dtype": "Float"}}')
    events = [host % i for i in range(50)] + [caller % 50] + [_ODD_EVENTS[0]] + [caller % (60 + i) for i in range(5)]
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    ref = _same_everywhere(p)
    assert ref["n_kernels"] == 1 and not ref["host_ops"] and len(ref["cpu_colls"]) == 6


def _seeds() -> list[Path]:
    return [next((DATA / "kineto_gpu_tp2").glob("*.json*")), next((DATA / "kineto_cpu_gloo_tp2").glob("*.json*")),
            next((DATA / "vllm_cpu_032").rglob("rank0*.pt.trace.json.gz"))]


def test_mutated_traces_read_the_same_on_every_path(tmp_path: Path) -> None:
    """A differential fuzz: byte flips, cuts, duplicated spans, 5,000-digit numbers, NaN, nesting,
    gzip damage (tests/fuzz.py) of real traces; the compiled scan must agree with the reference on
    every one. ``SPECMODEL_FUZZ_SECONDS`` lengthens it (`make fuzz`)."""
    budget = float(os.environ.get("SPECMODEL_FUZZ_SECONDS", "20")) / 2
    rng = random.Random(20)
    seeds = []
    for s in _seeds():  # each a real trace's header and its first events, one line each
        raw = s.read_bytes()
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        events = doc.pop("traceEvents")
        seeds.append((json.dumps(doc)[:-1] + ', "traceEvents": [\n'
                      + ",\n".join(json.dumps(e) for e in events[:150]) + "]}").encode())
    t_end = time.monotonic() + budget
    n = errors = 0
    while time.monotonic() < t_end or n < 60:
        data = mutate(seeds[n % len(seeds)], rng)
        p = tmp_path / f"m{n % 7}.json"
        p.write_bytes(data)
        ref = _collect(p, "full")
        got = _collect(p, "compiled")
        assert got == ref, f"mutation {n}: {data[:300]!r}"
        errors += "error" in ref
        n += 1
    assert n >= 60 and 0 < errors < n  # (both valid and broken inputs were compared)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(0, 1e13, allow_nan=False).map(lambda x: f"{x:.3f}"),
    st.floats(0, 1e17, allow_nan=False).map(lambda x: f"{x:.17g}"),
    st.integers(0, 10**22).map(str),
    st.tuples(st.integers(0, 10**20), st.integers(0, 12), st.integers(-30, 30)).map(
        lambda t: f"{str(t[0])[:-t[1] or None] or '0'}.{str(t[0])[-t[1]:] if t[1] else '0'}e{t[2]}"),
    st.sampled_from(["-0.0", "0", "-0", "1e-400", "9007199254740993", "9007199254740993.0", "0.1", "1e22", "1e23",
                     "5159190823781.404", "4.35e-07", "123456789012345678901234567890.5"])), min_size=1, max_size=20))
def test_numbers_convert_as_float_does(tmp_path: Path, values: list[str]) -> None:
    # the scan converts ts/dur itself (an exact fast case, else CPython's own strtod): bit for bit float()'s
    import struct

    events = ['{"ph": "X", "cat": "gpu_memcpy", "name": "m", "pid": 0, "tid": 7, "ts": ' + v + ', "dur": 0}'
              for v in values]
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    col = Collector(path=str(p), span_name=_is_span_name)
    try:
        scan_trace(p, col.on_event, keep=col, on_skipped=col.skipped)
    except SpecmodelError:
        assert any(not math.isfinite(float(v)) for v in values)  # (1e400: the reference refuses it)
        return
    got = [struct.pack("<d", k[0]) for k in col.kernels]
    assert got == [struct.pack("<d", float(v)) for v in values]



@pytest.mark.parametrize("special", ['\\"', "\\\\", "\\u00e9", "\t", "\u00e9", "\u007f", "\u0001", "\u540d", " "])
def test_a_special_character_anywhere_in_a_string_reads_as_the_reference_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, special: str) -> None:
    # the string scan jumps 16 and 8 bytes at a time: a quote, escape, control or non-ASCII
    # character at every offset of names from 0 to 40 characters, and numbers of 1 to 24 digits
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", 4096)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", 2048)
    events = [_ODD_EVENTS[0]]
    for length in range(41):
        for at in range(length + 1):
            text = "k" * at + special + "m" * (length - at)  # (a value the kernel tuple keeps)
            events.append(f'{{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_{text}", "pid": 0, '
                          f'"tid": 7, "ts": {length * 50 + at}, "dur": 1, "args": {{"correlation": {at}, '
                          f'"Process Group Name": "{text}", "Seq": 1}}}}')
    for digits in range(1, 25):
        events.append('{"ph": "X", ' + _K + f', "ts": {"7" * digits}, "dur": 0.{"3" * digits}, '
                      '"args": {"correlation": 1}}')
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + ", ".join(events) + "]}", encoding="utf-8")
    ref = _same_everywhere(p)
    assert "error" in ref or ref["n_kernels"] >= 800
