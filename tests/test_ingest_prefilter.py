"""The ingest pre-filter: decoding only the events the attribution reads gives exactly
what decoding every event gives (the reference path, ``full_decode``) — on every trace in
tests/data, at any buffer size, and on generated event streams; the rules are the Collector's."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmodel.errors import SpecmodelError
from specmodel.trace import _jsonstream, attribution, collectives
from specmodel.trace._jsonstream import scan_trace
from specmodel.trace.attribution import ARGS_KEYS, Collector
from specmodel.trace.kineto import IngestOptions, _is_span_name, parse_rank_file
from tests.conftest import DATA

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, params=["compiled", "msgspec"])
def prefilter_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both pre-filters: the compiled one (specmodel/trace/_cscan.c) and,
    with it hidden, the msgspec one (what a box that cannot build it runs)."""
    if request.param == "msgspec":
        monkeypatch.setattr(attribution, "_cscan", None)
    return str(request.param)


def count_reference_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``[n]``: how many events the reference decoder (one event at a time) has read so far."""
    n = [0]
    real = _jsonstream._SCAN

    def counting(buf: str, pos: int) -> Any:
        n[0] += 1
        return real(buf, pos)

    monkeypatch.setattr(_jsonstream, "_SCAN", counting)
    return n


def _traces() -> list[Path]:
    """Every file under tests/data a user could hand to ingest (a .json / .json.gz)."""
    return sorted(p for p in DATA.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


def _parse(path: Path, full: bool) -> object:
    try:
        return parse_rank_file(str(path), IngestOptions(), True, full_decode=full)
    except SpecmodelError as exc:
        return f"error: {exc}"


def _state(col: Collector) -> dict[str, Any]:
    return {"n_events": col.n_events, "n_kernels": col.n_kernels, "kernels": col.kernels, "launches": col.launches,
            "cpu_spans": col.cpu_spans, "gpu_spans": col.gpu_spans, "cpu_colls": col.cpu_colls,
            "host_ops": {k: sorted(zip(v[0::2], v[1::2], strict=True)) for k, v in col.host_ops.items()}}


def test_the_fixture_set_has_traces_of_every_family() -> None:
    names = [str(p.relative_to(DATA)) for p in _traces()]
    assert any(n.startswith("kineto_gpu_tp2/") for n in names)
    assert any(n.startswith("kineto_cpu_gloo_tp2/") for n in names)
    assert any(n.startswith("vllm_cpu_032/") and ".pt.trace." in n for n in names)


@pytest.mark.parametrize("chunk", [1 << 20, 4096, 300])
def test_identical_rank_traces_on_every_file_in_tests_data(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # small buffers put a run's cut (and the full-decode fallback) at every kind of place
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", chunk // 2)
    compared = 0
    for path in _traces():
        fast, full = _parse(path, False), _parse(path, True)
        assert fast == full, path
        compared += not isinstance(full, str)
    assert compared >= 6  # (the gpu, gloo and vLLM rank traces at least were read, not refused)


def test_the_prefilter_really_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM's CPU trace is mostly host ops: they are read off their top-level fields, never built
    built: list[dict[str, Any]] = []
    path = next(p for p in _traces() if "vllm_cpu_032" in str(p) and "rank0" in p.name)
    col = Collector(path=str(path), span_name=_is_span_name)
    skipped: list[int] = []
    scan_trace(path, lambda e: (built.append(e), col.on_event(e)), keep=col, on_skipped=skipped.append)
    total = skipped[0] + col.n_events  # (on_event counted the ones it was given)
    assert col.n_events == len(built) and total > 10_000 and len(built) < total / 20
    assert sum(len(v) for v in col.host_ops.values()) // 2 > 10_000


def test_a_cut_inside_a_string_or_a_nested_array_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", 64)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", 32)
    events = [
        {"ph": "X", "cat": "kernel", "name": "k},{\"ph\": \"X\"", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
         "args": {"correlation": 1, "x": [{"a": 1}, {"b": 2}]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.5, "dur": 1.0,
         "args": {"nested": [{"Collective name": "allreduce"}, {}]}},
        {"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=1]", "pid": 1, "tid": 1, "ts": 0.0, "dur": 9.0},
    ] * 20
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    for keep in (True, False):
        col = Collector(path=str(p), span_name=_is_span_name)
        scan_trace(p, col.on_event, keep=col if keep else None, on_skipped=col.skipped)
        if keep:
            fast = _state(col)
        else:
            assert fast == _state(col)
    assert fast["n_kernels"] == 20 and len(fast["cpu_spans"]) == 20


def test_a_key_after_the_events_holding_objects_costs_only_the_last_stretch(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # specmodel profile's own traces end `], "otherData": {"specmodel": {...}, ...}}`: the last
    # run's cut lands past the array; halving it reads all but the last stretch fast (it read the
    # whole last MiB event by event, 8 % of a gloo trace, at ~10x the cost)
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": float(i), "dur": 0.5,
         "args": {"Input Dims": [[4, 4]], "Input type": ["float"]}} for i in range(4000)
    ] + [{"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=1]", "pid": 1, "tid": 1, "ts": 0.0,
          "dur": 5000.0}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events, "otherData": {"specmodel": {"rank": 0, "t": {"a": [1]}},
                                                                  "n": 2}}))
    slow = count_reference_reads(monkeypatch)
    states = []
    for keep in (True, False):
        slow[0] = 0
        col = Collector(path=str(p), span_name=_is_span_name)
        header = scan_trace(p, col.on_event, keep=col if keep else None, on_skipped=col.skipped)
        states.append(_state(col))
        assert header["otherData"]["n"] == 2
        if keep:
            assert slow[0] < 0.15 * len(events), slow[0]
        else:
            assert slow[0] == len(events)
    assert states[0] == states[1]


@pytest.mark.parametrize("odd", [None, {"ts": "7.5"}, {"dur": None}, {"tid": None}, {"ts": True}, {"dur": -0.0},
                                 {"dur": -1.0}, {"ts": 10**400}, {"pid": "p"}, "no dur", "no tid"])
def test_host_ops_read_off_structs_record_what_the_full_decode_records(tmp_path: Path, odd: Any) -> None:
    # a CPU trace's host ops (read off the decoded structs, no dict): two threads interleaved, and
    # one op made odd in each way host_ops_of must read as on_event does, or refuse
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1 + i % 2,
                                     "ts": float(i), "dur": 0.5} for i in range(300)]
    events.append({"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=1]", "pid": 1, "tid": 1,
                   "ts": 0.0, "dur": 400.0})
    if isinstance(odd, dict):
        events[150].update(odd)
    elif odd is not None:
        del events[150]["dur" if odd == "no dur" else "tid"]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    states = []
    for keep in (True, False):
        col = Collector(path=str(p), span_name=_is_span_name)
        try:
            scan_trace(p, col.on_event, keep=col if keep else None, on_skipped=col.skipped)
        except SpecmodelError as exc:
            states.append(("error", str(exc)))
            continue
        states.append(_state(col) | {"host": {k: list(v) for k, v in col.host_ops.items()}})
    assert states[0] == states[1]
    if odd is None:
        assert sorted(states[0]["host"]) == [(1, 1), (1, 2)] and len(states[0]["host"][(1, 1)]) == 300


# ---- generated streams: every rule of on_event against decide/host_ops_of

# (cat, names it is seen with, args keys it is seen with): events are drawn near these, then
# bent (a key missing, another cat's name) so that every branch of the rules is hit often
_FAMILIES = (
    ("cpu_op", ("aten::mm", "c10d::allreduce_", "record_param_comms", "_C::shm_allreduce", "_C::shm_all_gather",
                "gloo:all_reduce"), ("Collective name", "External id", "In msg nelems", "dtype")),
    ("cuda_runtime", ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize"), ("correlation", "cbid")),
    ("cuda_driver", ("cuLaunchKernel", "cuCtxSync"), ("correlation",)),
    ("kernel", ("gemm", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "vllm::cross_device_reduce_1stage<float, 2>"),
     ("correlation", "Collective name", "In msg nelems", "dtype", "Seq", "Process Group Name", "stream")),
    ("gpu_memcpy", ("Memcpy HtoD",), ("correlation",)),
    ("user_annotation", ("step[DECODE bs=1]", "specmodel.verify[bs=1,toks=4]", "execute_context_0(0)_generation_1(1)",
                         "gpu_model_runner: forward", "draft", "gloo:all_reduce", "other"), ("External id", "Collective name")),
    ("gpu_user_annotation", ("step[DECODE bs=1]", "gpu_model_runner: forward"), ("External id",)),
    ("ac2g", ("ac2g",), ()),
    ("python_function", ("k},{\"cat\": \"kernel\"", "é{["), ("Python id",)),
)
_SCALAR = st.one_of(st.integers(-5, 10**20), st.floats(0, 1e7, allow_nan=False), st.text(max_size=4),
                    st.none(), st.booleans())


@st.composite
def _event(draw: Any) -> dict[str, Any]:
    cat, names, keys = draw(st.sampled_from(_FAMILIES))
    other = draw(st.sampled_from(_FAMILIES))
    e: dict[str, Any] = {"ph": draw(st.sampled_from(["X"] * 8 + ["M", "i"])), "cat": cat,
                         "name": draw(st.sampled_from(names if draw(st.integers(0, 5)) else other[1])),
                         "pid": draw(st.sampled_from([0, 1, "p"])), "tid": draw(st.sampled_from([1, 2, 7])),
                         "ts": draw(st.floats(0, 1e6, allow_nan=False)), "dur": draw(st.floats(0, 1e3, allow_nan=False))}
    for key in list(e):
        if not draw(st.integers(0, 15)):  # now and then a key is missing
            del e[key]
    if draw(st.integers(0, 5)):
        pool = (*keys, *other[2], "grid") if keys else ("grid",)
        e["args"] = draw(st.dictionaries(st.sampled_from(pool), st.one_of(_SCALAR, st.lists(_SCALAR, max_size=3)),
                                         max_size=4))
        if "Collective name" in e["args"] and draw(st.booleans()):
            e["args"]["Collective name"] = draw(st.sampled_from(["allreduce", "_allgather_base", "send", "x"]))
    return e


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(events=st.lists(_event(), max_size=80), indent=st.sampled_from([None, 2]), chunk=st.sampled_from([48, 200, 1 << 16]),
       gz=st.booleans())
def test_generated_streams_collect_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[Any],
                                            indent: int | None, chunk: int, gz: bool) -> None:
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", chunk // 2)
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    text = json.dumps({"traceEvents": events}, indent=indent)
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    got = []
    for keep in (False, True):
        col = Collector(path=str(p), span_name=_is_span_name)
        try:
            scan_trace(p, col.on_event, keep=col if keep else None, on_skipped=col.skipped)
            got.append(_state(col))
        except SpecmodelError as exc:
            got.append({"error": str(exc)})
    assert got[0] == got[1]


@pytest.mark.parametrize("chunk", [256, 1 << 20])
@pytest.mark.parametrize("gpu", [True, False])
def test_every_rule_on_every_kind_of_event_before_and_after_the_first_kernel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, gpu: bool) -> None:
    # exhaustive over the families' cats x names x args variants, then a kernel, then again: the host
    # timeline (CPU trace until a kernel) and the GPU rules both run, over many runs
    monkeypatch.setattr(_jsonstream, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(_jsonstream, "_MIN_RUN_CHARS", chunk // 2)
    cats = sorted({f[0] for f in _FAMILIES}) + ["other"]
    names = sorted({n for f in _FAMILIES for n in f[1]})
    argses: list[Any] = [None, {}, {"Collective name": "allreduce"}, {"correlation": 5}, {"External id": 3},
                         {"Collective name": "allreduce", "correlation": 5, "In msg nelems": 8, "dtype": "Float"}]
    block = []
    for i, (cat, name, args, ph) in enumerate((c, n, a, ph) for c in cats for n in [*names, None] for a in argses
                                                for ph in ("X", "i")):
        e: dict[str, Any] = {"ph": ph, "cat": cat, "pid": 1, "tid": 1, "ts": float(i), "dur": 0.5}
        if name is not None:
            e["name"] = name
        if args is not None:
            e["args"] = args
        block.append(e)
    kernel = {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 0.0, "dur": 1.0,
              "args": {"correlation": 1}}
    p = tmp_path / "t.json"
    cpu_only = [e for e in block if e["cat"] not in attribution.GPU_BUSY_CATS]
    p.write_text(json.dumps({"traceEvents": [*block, kernel, *block] if gpu else cpu_only}, indent=1))
    got = []
    for keep in (False, True):
        col = Collector(path=str(p), span_name=_is_span_name)
        scan_trace(p, col.on_event, keep=col if keep else None, on_skipped=col.skipped)
        got.append(_state(col))
    assert got[0] == got[1]
    assert got[0]["launches"] and got[0]["cpu_colls"] and got[0]["cpu_spans"] and got[0]["gpu_spans"]
    assert bool(got[0]["host_ops"]) is not gpu


def test_args_keys_lists_every_args_key_the_attribution_reads() -> None:
    """One owner: a key read from ``args`` in the Collector or the classifier and missing from
    ARGS_KEYS would read as absent through the pre-filter."""
    read: set[str] = set()
    for mod in (attribution, collectives):
        tree = ast.parse(Path(mod.__file__).read_text())  # type: ignore[arg-type]
        for node in ast.walk(tree):
            # args.get("K"...) / args["K"] / "K" in args
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "args" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                read.add(node.args[0].value)
            elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "args"
                  and isinstance(node.slice, ast.Constant)):
                read.add(node.slice.value)
            elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)
                  and any(isinstance(c, ast.Name) and c.id == "args" for c in node.comparators)):
                read.add(node.left.value)
    assert read >= {"correlation", "Collective name", "In msg nelems"}  # (the walk finds them)
    assert read <= set(ARGS_KEYS), read - set(ARGS_KEYS)


def test_kernels_and_launches_are_taken_without_a_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    # on a GPU trace the kept events are mostly plain kernels and their launches: Collector.on_structs
    # takes them off the decoded structs (on_event, which needs a dict, sees only the others)
    path = next(p for p in _traces() if p.parts[-2] == "kineto_gpu_tp2")
    ref = Collector(path=str(path), span_name=_is_span_name)
    scan_trace(path, ref.on_event, keep=None)
    seen: list[Any] = []
    real = Collector.on_event
    monkeypatch.setattr(Collector, "on_event", lambda self, e: (seen.append(e), real(self, e))[1])
    col = Collector(path=str(path), span_name=_is_span_name)
    scan_trace(path, col.on_event, keep=col, on_skipped=col.skipped)
    assert _state(col) == _state(ref)
    assert col.n_kernels > 0 and col.launches
    assert len(seen) < (len(col.kernels) + len(col.launches)) / 2
