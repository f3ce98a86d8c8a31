"""Server-log parsing (SGLang / vLLM / bench_speculative) and the accept distributions built from them."""

# ruff: noqa: UP031  -- lines are built with the engines' own printf-style format strings
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmodel.commands.flags import flag_of
from specmodel.engines.logs import (
    accept_dist_from_logs,
    parse_log,
    summarize,
    throughput_series,
    window_skip_reason,
    write_accept_json,
)
from specmodel.engines.sglang.log import parse_line as parse_sglang_line
from specmodel.engines.vllm.log import parse_line as parse_vllm_line
from specmodel.errors import FieldError, SpecmodelError
from specmodel.model.accept import from_mean
from tests.conftest import DATA

SG055 = str(DATA / "logs_sglang_055" / "server.log")
SG055_NOARGS = str(DATA / "logs_sglang_055_noargs" / "server.log")  # the same log without its server_args line
SG0523 = str(DATA / "logs_sglang_0523" / "server.log")
HYBRID = str(DATA / "logs_sglang_hybrid" / "server.log")
VNEW = str(DATA / "logs_vllm_new" / "server.log")
VMID = str(DATA / "logs_vllm_mid" / "server.log")
VOLD = str(DATA / "logs_vllm_old" / "server.log")
VK5 = str(DATA / "logs_vllm_k5" / "server.log")
BENCH = str(DATA / "logs_bench_speculative" / "output.jsonl")
BAD = DATA / "logs_malformed"


def _decode_lines(path: str) -> list[str]:
    return [ln for ln in Path(path).read_text().splitlines() if "Decode batch" in ln]


def test_sglang_055_windows_match_the_lines():
    lf = parse_log(SG055)
    assert lf.engine == "sglang" and "trailing" in lf.fmt
    lines = _decode_lines(SG055)
    assert len(lf.windows) == len(lines) == 15
    for w, ln in zip(lf.windows, lines, strict=True):
        assert f"#running-req: {w.batch}," in ln
        assert f"accept len: {w.accept_len:.2f}," in ln
        assert f"gen throughput (token/s): {w.tokens_per_s:.2f}," in ln
    assert lf.windows[0].timestamp == "2025-11-30 04:32:01" and lf.windows[0].rank == "TP0"
    # prefill lines also carry #running-req but are not decode windows
    assert lf.lines_matched == 15


def test_sglang_mixture_keeps_the_weighted_mean_and_counts_samples():
    s = summarize([SG055], 4)
    ws = [w for w in parse_log(SG055).windows if w.accept_len is not None and w.tokens_per_s > 0]
    weighted = sum(w.batch * (w.accept_len or 0) for w in ws) / sum(w.batch for w in ws)
    assert s.dist.mean_tokens == pytest.approx(weighted, abs=1e-9)
    assert s.dist.samples == sum(w.batch for w in ws) * 40
    assert s.rates is None and len(s.dist.probs) == 4
    # the per-window means differ, so the mixture is wider than one geometric with that mean
    assert s.dist.std_tokens > from_mean(weighted, 4).std_tokens


def test_idle_window_is_left_out_of_the_distribution_as_validate_leaves_it_out():
    # line 22 of this log is an idle window (gen throughput 0.00, accept len 1.00 carried over);
    # counting it would pull the mean from 3.100 to 3.056
    lf = parse_log(SG055)
    idle = [w for w in lf.windows if w.tokens_per_s == 0]
    assert [w.line for w in idle] == [22] and idle[0].accept_len == 1.0
    s = summarize([SG055], 4)
    assert s.dist.mean_tokens == pytest.approx(3.0996, abs=5e-4)
    assert all(w.tokens_per_s > 0 for w in s.windows) and s.windows_used == len(lf.windows) - 1
    assert any("1 window(s) with throughput 0" in n for n in s.notes)
    # one rule: the window validate skips is the window accept leaves out
    assert window_skip_reason(idle[0]) == "throughput 0"


def test_sglang_0523_no_trailing_comma_and_cap_len_not_mistaken_for_accept_len():
    lf = parse_log(SG0523)
    assert "0.5.23" in lf.fmt and "cap" in lf.fmt
    capline = next(ln for ln in _decode_lines(SG0523) if "cap len" in ln)
    w = next(w for w in lf.windows if f"accept len: {w.accept_len:.2f}, accept rate" in capline
             and f"gen throughput (token/s): {w.tokens_per_s:.2f}" in capline)
    assert w.accept_len is not None and w.accept_len < 3.5  # not the cap len 3.98
    assert w.rank == "DP0 TP0 EP0" and w.timestamp.endswith(tuple("0123456789")) and "." in w.timestamp


def test_sglang_hybrid_full_token_pool():
    lf = parse_log(HYBRID)
    assert [w.batch for w in lf.windows] == [2, 2, 6]
    assert [w.accept_len for w in lf.windows] == [2.11, 2.25, 2.18]


def test_sglang_needs_steps_and_rejects_means_above_steps_plus_one():
    with pytest.raises(FieldError) as err:
        summarize([SG055_NOARGS], None)
    assert re.search("--steps", err.value.render(flag_of))  # (as the CLI spells it)
    with pytest.raises(FieldError) as err:
        accept_dist_from_logs([SG055_NOARGS], max_tokens=3)
    assert re.search(r"exceeds steps \+ 1 = 3.*--steps", err.value.render(flag_of))


def test_sglang_without_speculation_has_no_accept_length():
    lf = parse_log(str(DATA / "logs_sglang_nospec" / "server.log"))
    assert len(lf.windows) == 3 and all(w.accept_len is None for w in lf.windows)
    assert lf.windows[2].batch == 2 and lf.windows[2].tokens_per_s > 0
    with pytest.raises(SpecmodelError, match="ran without speculative decoding"):
        summarize([lf.path], 4)


def test_vllm_new_rates_weighted_by_drafts():
    s = summarize([VNEW], None)
    assert s.dist.max_tokens == 4  # inferred from 3 per-position rates
    lines = [ln for ln in Path(VNEW).read_text().splitlines() if "SpecDecoding metrics" in ln]
    acc = [int(re.search(r"Accepted: (\d+) tokens", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    drafted = [int(re.search(r"Drafted: (\d+) tokens", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    n_drafts = sum(drafted) / 3
    assert s.dist.samples == round(n_drafts)
    assert s.dist.mean_tokens == pytest.approx(1 + sum(acc) / n_drafts, abs=2e-3)  # rates carry 3 decimals
    assert s.rates is not None
    assert s.dist.per_position_rates() == pytest.approx(s.rates, abs=1e-9)
    assert all(a >= b for a, b in zip(s.rates, s.rates[1:], strict=False))
    # throughput lines pair with the SpecDecoding line printed by the same log() call
    assert [w.batch for w in s.windows] == [1, 4, 4, 8]
    means = [float(re.search(r"Mean acceptance length: ([\d.]+)", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    assert [w.accept_len for w in s.windows] == means


def test_vllm_mid_format_parses_by_key():
    lf = parse_log(VMID)
    assert lf.fmt == "mid format"
    assert [r.accepted for r in lf.vllm] == [575, 833]
    assert lf.vllm[0].per_position == (0.7, 0.45) and lf.vllm[0].mean_accept_len == 2.15


def test_vllm_old_format_needs_num_spec_tokens():
    with pytest.raises(FieldError) as err:
        accept_dist_from_logs([VOLD], max_tokens=5)
    assert re.search("--num-spec-tokens", err.value.render(flag_of))  # (as the CLI spells it)
    dist, rates = accept_dist_from_logs([VOLD], max_tokens=5, num_spec_tokens=4)
    assert rates is None
    assert dist.mean_tokens == pytest.approx(1 + (540 + 790) / ((1200 + 1680) / 4), abs=1e-6)


def test_vllm_more_positions_than_steps_is_a_clear_error():
    with pytest.raises(FieldError) as err:
        accept_dist_from_logs([VK5], max_tokens=4)
    assert re.search(r"5 speculative tokens.*--steps is 3.*pass --steps 5", err.value.render(flag_of))  # (as the CLI spells it)
    dist, rates = accept_dist_from_logs([VK5], max_tokens=7)  # deeper --steps: extra positions are 0
    assert rates is not None and len(rates) == 5 and dist.probs[-1] == 0.0


def test_bench_rows_filtered_by_steps():
    s = summarize([BENCH], 4)
    rows = [json.loads(ln) for ln in Path(BENCH).read_text().splitlines()]
    want = [r for r in rows if r["steps"] == 3]
    assert s.windows_used == len(want) == 3
    assert s.dist.mean_tokens == pytest.approx(sum(r["acc_length"] for r in want) / 3, abs=1e-9)
    assert [w.tokens_per_s for w in s.windows] == pytest.approx([r["speed"] * r["batch_size"] for r in want])
    with pytest.raises(SpecmodelError, match="steps 3, 5"):
        summarize([BENCH], None)
    with pytest.raises(SpecmodelError, match="no rows with steps = 2"):
        summarize([BENCH], 3)


def test_throughput_series_groups_by_batch_and_drops_idle_windows():
    lf = parse_log(SG055)
    series = throughput_series(lf.windows)
    assert [p.batch for p in series] == [1, 2, 4, 8]
    one = [w.tokens_per_s for w in lf.windows if w.batch == 1 and w.tokens_per_s > 0]
    assert series[0].windows == len(one) == 5
    assert series[0].tokens_per_s_min == min(one) and series[0].tokens_per_s_max == max(one)


@pytest.mark.parametrize("name,msg", [
    ("truncated.log", r"truncated\.log:3: SGLang decode line without 'gen throughput"),
    ("unrelated.log", r"unrelated\.log: no SGLang 'Decode batch' lines"),
    ("bad_bench.jsonl", r"bad_bench\.jsonl:2: bench_speculative row lacks acc_length"),
])
def test_malformed_files_name_file_and_problem(name, msg):
    with pytest.raises(SpecmodelError, match=msg):
        parse_log(BAD / name)


def test_unreadable_inputs(tmp_path):
    with pytest.raises(SpecmodelError, match="file not found"):
        parse_log(tmp_path / "nope.log")
    with pytest.raises(SpecmodelError, match="is a directory"):
        parse_log(tmp_path)
    (tmp_path / "bin.log").write_bytes(b"\x00\x01Decode batch\x00")
    with pytest.raises(SpecmodelError, match="binary file"):
        parse_log(tmp_path / "bin.log")
    (tmp_path / "empty.log").write_text("\n\n")
    with pytest.raises(SpecmodelError, match="empty file"):
        parse_log(tmp_path / "empty.log")
    both = tmp_path / "both.log"
    both.write_text(Path(SG055).read_text() + Path(VNEW).read_text())
    with pytest.raises(SpecmodelError, match="both SGLang and vLLM"):
        parse_log(both)
    (tmp_path / "zero.log").write_text(_decode_lines(SG055)[0].replace("accept len: 3.13", "accept len: 0.40") + "\n")
    with pytest.raises(SpecmodelError, match="zero.log:1: accept len 0.40"):
        parse_log(tmp_path / "zero.log")


def test_saved_distribution_round_trips(tmp_path):
    s = summarize([VNEW], 4)
    out = tmp_path / "accept.json"
    write_accept_json(s, out)
    doc = json.loads(out.read_text())
    assert doc["schema"] == "specmodel.accept" and doc["schema_version"] == 1
    dist, rates = accept_dist_from_logs([str(out)], max_tokens=4)
    assert dist.probs == pytest.approx(s.dist.probs) and dist.samples == s.dist.samples
    assert rates == pytest.approx(s.rates)
    # more steps than measured: docs/logs.md's rule, the last conditional rate carries on (not zeros)
    big = summarize([str(out)], 6)
    r = list(s.rates or ())
    c = r[-1] / r[-2]
    want = r + [r[-1] * c, r[-1] * c * c]
    assert big.rates == pytest.approx(want, rel=1e-9)
    assert big.dist.mean_tokens == pytest.approx(1 + sum(want), rel=1e-9)
    assert big.dist.mean_tokens > s.dist.mean_tokens and all(p > 0 for p in big.dist.probs[4:])
    assert any("extended to steps = 5 with the last observed conditional acceptance rate" in n for n in big.notes)
    with pytest.raises(FieldError) as err:
        accept_dist_from_logs([str(out)], max_tokens=3)
    assert re.search("--steps is 2", err.value.render(flag_of))  # (as the CLI spells it)
    doc["schema_version"] = 99
    out.write_text(json.dumps(doc))
    with pytest.raises(SpecmodelError, match="schema_version"):
        parse_log(out)
    doc["schema_version"] = 1
    doc["probs"] = [0.5, 0.6]
    out.write_text(json.dumps(doc))
    with pytest.raises(SpecmodelError, match="sum to"):
        parse_log(out)


def test_colored_vllm_log_parses(tmp_path):
    # vLLM's ColoredFormatter wraps the prefix in ANSI codes when stdout is a terminal
    grey, reset, cyan, plain = "\x1b[90m", "\x1b[0m", "\x1b[0;36m", "\x1b[0;0m"
    lines = []
    for ln in Path(VNEW).read_text().splitlines():
        m = re.match(r"^(\(APIServer pid=\d+\)) INFO (\S+ \S+) (\[[^\]]+\]) (.*)$", ln)
        lines.append(f"{cyan}{m.group(1)}{plain} INFO {grey}{m.group(2)}{reset} {grey}{m.group(3)}{reset} {m.group(4)}"
                     if m else ln)
    p = tmp_path / "color.log"
    p.write_text("\n".join(lines) + "\n")
    assert "\x1b[" in p.read_text()
    a, b = parse_log(p), parse_log(VNEW)
    assert [w.to_dict() | {"file": ""} for w in a.windows] == [w.to_dict() | {"file": ""} for w in b.windows]
    assert [r.per_position for r in a.vllm] == [r.per_position for r in b.vllm]
    assert a.windows[0].timestamp == "11-30 04:32:10"


# ---- hypothesis: a line written with the engine's format string parses back to what was written

_num2 = st.floats(min_value=0, max_value=1e5, allow_nan=False).map(lambda x: round(x, 2))


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(0, 4096), tokens=st.integers(0, 10**7), usage=st.floats(0, 1), acc=st.floats(1, 9),
       rate=st.floats(0, 1), tput=_num2, queue=st.integers(0, 999), new=st.booleans(), hybrid=st.booleans(),
       cap=st.one_of(st.none(), st.floats(1, 9)), graph=st.booleans(), prefix=st.sampled_from(["", " TP0", " DP1 TP3 EP3"]))
def test_generated_sglang_line_parses_back(batch, tokens, usage, acc, rate, tput, queue, new, hybrid, cap, graph, prefix):
    pool = (f"#full token: {tokens}, full token usage: {usage:.2f}, #swa token: 7, swa token usage: 0.00, " if hybrid
            else f"#token: {tokens}, token usage: {usage:.2f}, ")
    msg = f"Decode batch, #running-req: {batch}, {pool}accept len: {acc:.2f}, accept rate: {rate:.2f}, "
    if new and cap is not None:
        msg += f"cap len: {cap:.2f}, block accept len: {cap:.2f}, "
    msg += f"cuda graph: {graph}, gen throughput (token/s): {tput:.2f}, #queue-req: {queue}" + (", " if not new else "")
    d = parse_sglang_line(f"[2025-11-30 04:32:10{prefix}] " + msg)
    assert d is not None
    assert int(d["running_req"]) == batch and int(d["tokens"]) == tokens and int(d["queue_req"]) == queue
    assert d["accept_len"] == f"{acc:.2f}" and d["accept_rate"] == f"{rate:.2f}"
    assert float(d["gen_tokens_per_s"]) == pytest.approx(tput, abs=0.006)
    assert d["graph"] == str(graph) and d["trailing_comma"] is (not new)
    assert d["rank"] == prefix.strip()
    if new and cap is not None:
        assert d["cap_len"] == f"{cap:.2f}" and d["block_accept_len"] == f"{cap:.2f}"


@settings(max_examples=60, deadline=None)
@given(rates=st.lists(st.floats(0, 1), min_size=1, max_size=8), accepted=st.integers(0, 10**6),
       drafted=st.integers(1, 10**6), fmt=st.sampled_from(["new", "mid", "old"]))
def test_generated_vllm_line_parses_back(rates, accepted, drafted, fmt):
    rs = ", ".join(f"{r:.3f}" for r in rates)
    if fmt == "new":
        msg = ("SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, Drafted throughput: "
               "%.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s, Avg Draft "
               "acceptance rate: %.1f%%") % (1 + sum(rates), 3.5, 7.25, accepted, drafted, rs, 40.0)
    elif fmt == "mid":
        msg = ("SpecDecoding metrics: Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f, Accepted: %d tokens, "
               "Drafted: %d tokens, Per-position acceptance rate: %s") % (40.0, 1 + sum(rates), accepted, drafted, rs)
    else:
        msg = "SpecDecoding metrics: Draft acceptance rate: %.1f%%, Accepted: %d tokens, Drafted: %d tokens" % (
            40.0, accepted, drafted)
    d = parse_vllm_line("(APIServer pid=1) INFO 11-30 04:32:10 [metrics.py:120] " + msg)
    assert d is not None and int(d["accepted"]) == accepted and int(d["drafted"]) == drafted
    assert float(d["draft_accept_rate_pct"]) == 40.0
    if fmt == "old":
        assert "per_position" not in d and "mean_accept_len" not in d
    else:
        assert d["per_position"] == rs and d["mean_accept_len"] == f"{1 + sum(rates):.2f}"
        assert ("accepted_tokens_per_s" in d) is (fmt == "new")


@settings(max_examples=40, deadline=None)
@given(windows=st.lists(st.tuples(st.floats(1, 5), st.integers(1, 64)), min_size=1, max_size=12))
def test_mixture_mean_is_the_batch_weighted_window_mean(tmp_path_factory, windows):
    lines = [f"[2025-11-30 04:32:{i % 60:02d} TP0] Decode batch, #running-req: {b}, #token: 1, token usage: 0.00, "
             f"accept len: {a:.2f}, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0, "
             for i, (a, b) in enumerate(windows)]
    p = tmp_path_factory.mktemp("mix") / "s.log"
    p.write_text("\n".join(lines) + "\n")
    dist, _ = accept_dist_from_logs([str(p)], max_tokens=5)
    vals = [(float(f"{a:.2f}"), b) for a, b in windows]
    assert sum(dist.probs) == pytest.approx(1.0)
    assert dist.mean_tokens == pytest.approx(sum(a * b for a, b in vals) / sum(b for _, b in vals), abs=1e-6)
    assert dist.samples == 40 * sum(b for _, b in vals)


def test_partial_last_line_of_a_log_being_written_is_left_out_with_a_warning(tmp_path: Path):
    # the server is mid-write (no newline yet): keep the complete lines, warn
    for src, cut in ((SG055, "accept rate: 0.79, "), (VNEW, "Accepted: 7")):
        text = Path(src).read_text()
        assert text.endswith("\n")
        live = tmp_path / ("live_" + Path(src).parent.name + ".log")
        partial = "[2025-11-30 04:33:00 TP0] Decode batch, #running-req: 1, " + cut if src == SG055 else (
            "INFO 11-30 04:33:00 [metrics.py:1] SpecDecoding metrics: Mean acceptance length: 2.1, " + cut)
        live.write_text(text + partial)
        whole = summarize([src], 4)
        s = summarize([str(live)], 4)
        assert s.dist.probs == whole.dist.probs and s.windows_used == whole.windows_used
        assert any("partial last line left out" in n for n in s.notes)
        assert parse_log(live).skipped.get("partial last line (still being written)") == 1
        # the same line with its newline is a truncated copy, not a live log: still refused
        live.write_text(text + partial + "\n")
        with pytest.raises(SpecmodelError, match="without"):
            parse_log(live)
