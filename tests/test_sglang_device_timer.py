"""SGLang 0.5.23's device timer (``sglang:forward_execution_seconds_total{category}`` beside
``sglang:cuda_graph_passes_total`` and ``sglang:fwd_occupancy``) read from pages rendered with the
real metric names (tests/sglang_timer_pages.py), into per-cycle costs on the ``engine_device_timer``
clock and into ``specmodel sglang --summarize``'s profile. Every expected figure is worked by hand
from the costs the pages were written with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specmodel.engines.sglang import devtimer as dt
from specmodel.engines.sglang.run import DEVICE_TIMER_ENV, metrics_url, with_device_timer
from specmodel.errors import SpecmodelError
from tests.conftest import run_cli
from tests.sglang_timer_pages import Server

OLD = Path(__file__).parent / "data" / "sglang_hook_v1"  # v1 logs: forwards only (README: decode 20 ms, ...)


def _spec_server() -> Server:
    s = Server(tp=2, skew=0.25, occupancy_pct=80.0, spec_steps=3)
    s.prefill(0.5)  # start-up prefill before the first page
    return s


def test_window_gives_per_cycle_costs_of_the_lowest_rank() -> None:
    s = _spec_server()
    s.cycles(100, 4, 1000, target_verify=0.010, eagle_draft=0.003, eagle_draft_extend=0.001)
    a = dt.read_page(s.page(), "a")
    s.cycles(200, 4, 1500, target_verify=0.012, eagle_draft=0.003, eagle_draft_extend=0.001)
    b = dt.read_page(s.page(), "b")
    w = dt.window(a, b)
    assert isinstance(w, dt.DeviceCosts)
    # rank 1's seconds are 25 % higher: rank 0 is read, so exactly the second run's costs
    assert w.cycles == 200 and w.speculative
    assert w.verify_s == pytest.approx(0.012) and w.draft_s == pytest.approx(0.004)
    assert w.decode_s is None and "drafter's eager steps" in w.unknown["decode"]
    # occupancy 80 %: the 16 ms of timed GPU per cycle fill 80 % of the wall, 4 ms is the rest
    assert w.host_s == pytest.approx(0.004)
    assert w.batch == 4 and w.context_tokens == 1500 and w.spec_steps == 3 and w.clock == "engine_device_timer"


def test_eager_draft_steps_sit_in_decode_and_count_as_draft_on_a_speculative_server() -> None:
    s = Server(occupancy_pct=50.0)
    a = dt.read_page((s.cycles(10, 64, 100, target_verify=0.03, decode=0.004, extend=0.0), s.page())[1], "a")
    s.cycles(10, 64, 100, target_verify=0.03, decode=0.004)  # batch above the draft graphs: eager draft steps
    w = dt.window(a, dt.read_page(s.page(), "b"))
    assert isinstance(w, dt.DeviceCosts)
    assert w.draft_s == pytest.approx(0.004) and w.verify_s == pytest.approx(0.03)
    assert w.host_s == pytest.approx(0.034)  # 34 ms timed at 50 % occupancy


def test_a_window_with_prefill_leaves_the_draft_unknown_never_guessed() -> None:
    s = _spec_server()
    a = dt.read_page(s.page(), "a")
    s.cycles(50, 2, 300, target_verify=0.010, eagle_draft=0.003)
    s.prefill(0.2)  # 'extend' holds prefill and any eager draft-extend: no split on the page
    w = dt.window(a, dt.read_page(s.page(), "b"))
    assert isinstance(w, dt.DeviceCosts)
    assert w.verify_s == pytest.approx(0.010)
    assert w.draft_s is None and "'extend' holds both" in w.unknown["draft"]
    # what the page did attribute to the drafter is a lower bound, said as one
    assert w.draft_min_s == pytest.approx(0.003) and w.unknown["draft"].endswith("(at least 3.00 ms per cycle)")


def test_a_window_across_an_adaptive_steps_change_prices_no_cycle() -> None:
    s = _spec_server()
    s.cycles(100, 4, 500, target_verify=0.010, eagle_draft=0.003)
    a = dt.read_page(s.page(), "a")
    s.spec_steps = 0  # SGLang's adaptive policy switched drafting off: one-token verifies, no draft
    s.cycles(100, 4, 500, target_verify=0.006, eagle_draft_extend=0.001)
    b = dt.read_page(s.page(), "b")
    w = dt.window(a, b)
    assert isinstance(w, dt.DeviceCosts)
    assert w.verify_s is None and w.draft_s is None and "spec_num_steps 3 -> 0" in w.unknown["verify"]
    s.cycles(100, 4, 500, target_verify=0.006, eagle_draft_extend=0.001)
    w = dt.window(b, dt.read_page(s.page(), "c"))
    assert isinstance(w, dt.DeviceCosts)
    assert w.verify_s is None and "drafting off" in w.unknown["draft"]


def test_a_server_without_speculation_gives_decode() -> None:
    s = Server(occupancy_pct=None)
    a = dt.read_page(s.page(), "a")
    s.cycles(40, 8, 2000, decode=0.021)
    w = dt.window(a, dt.read_page(s.page(), "b"))
    assert isinstance(w, dt.DeviceCosts)
    assert not w.speculative and w.decode_s == pytest.approx(0.021) and w.verify_s is None
    assert w.host_s is None and "fwd_occupancy" in w.unknown["host"]


def test_no_batch_and_restart_are_reasons() -> None:
    s = _spec_server()
    s.cycles(10, 1, 10, target_verify=0.01)
    a = dt.read_page(s.page(), "a")
    assert dt.window(a, a) == "no decode batch in the window"
    assert dt.window(a, dt.read_page(Server().page(), "b")) == "counters went backwards (server restarted)"


@pytest.mark.parametrize(("page", "message"), [
    ('sglang:num_running_reqs{tp_rank="0"} 1\n', "b: no sglang:forward_execution_seconds_total on the page (start the SGLang "
                                      ">= 0.5.23 server with SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 and --enable-metrics)"),
    ('sglang:forward_execution_seconds_total{tp_rank="0"} 1.0\n',
     "b: sglang:forward_execution_seconds_total without a category label"),
    ('sglang:fwd_occupancy{tp_rank="0"} 180\nsglang:forward_execution_seconds_total{category="decode"} 1\n',
     "b: sglang:fwd_occupancy = 180.0 is not a percentage"),
])
def test_bad_pages_are_one_line(page: str, message: str) -> None:
    with pytest.raises(SpecmodelError) as e:
        dt.read_page(page, "b")
    assert str(e.value) == message


def test_the_run_turns_the_timer_on_and_keeps_the_users_settings() -> None:
    cmd = ("python", "-m", "sglang.launch_server", "--model-path", "m", "--port", "31000", "--host", "0.0.0.0")
    new, env, said = with_device_timer(cmd, {})
    assert new == (*cmd, "--enable-metrics") and env == {DEVICE_TIMER_ENV: "1"} and len(said) == 2
    assert metrics_url(new) == "http://127.0.0.1:31000/metrics"
    new, env, said = with_device_timer((*cmd, "--enable-metrics"), {DEVICE_TIMER_ENV: "0"})
    assert new == (*cmd, "--enable-metrics") and env == {} and said == []  # the user's 0 stays off
    assert metrics_url(("python",)) == "http://127.0.0.1:30000/metrics"
    new, env, said = with_device_timer(("./serve.sh", "3"), {})  # a wrapper's arguments are not SGLang's
    assert new == ("./serve.sh", "3") and env == {DEVICE_TIMER_ENV: "1"}
    assert said[1].startswith("not --enable-metrics: the command does not name sglang")


def _run_dirs(tmp_path: Path, host_pct: float | None) -> tuple[Path, Path]:
    """The old recording (forwards only) with device-timer pages beside it, costs as its README says:
    decode 20 ms at batch 1; a cycle: verify 23 ms, 2 draft steps x 2 ms (one graph replay), draft-extend 3 ms."""
    base, spec = tmp_path / "base", tmp_path / "spec"
    shutil.copytree(OLD / "base", base)
    shutil.copytree(OLD / "spec", spec)
    b = Server(occupancy_pct=90.0)
    pages = [b.page()]
    b.cycles(20, 1, 100, decode=0.020)
    pages.append(b.page())
    s = Server(occupancy_pct=host_pct, spec_steps=3)
    s.prefill(0.05)
    sp = [s.page()]
    for _ in range(3):
        s.cycles(20, 1, 100, target_verify=0.023, eagle_draft=0.004, eagle_draft_extend=0.003)
        sp.append(s.page())
    for d, ps in ((base, pages), (spec, sp)):
        (d / "metrics").mkdir()
        for i, p in enumerate(ps):
            (d / "metrics" / f"{i:06d}.prom").write_text(p)
    return base, spec


def test_summarize_puts_the_device_timer_into_the_profile_and_prices_the_host_work(tmp_path: Path) -> None:
    # occupancy 30 / 36: the 30 ms of timed forwards per cycle leave 6 ms of wall time to the host
    base, spec = _run_dirs(tmp_path, host_pct=100.0 * 30.0 / 36.0)
    prof = tmp_path / "profiles" / "timed"
    res = run_cli("sglang", "--summarize", str(base), "--summarize", str(spec), "-o", str(prof))
    assert res.returncode == 0, res.stderr
    assert (f"note: {spec}: device timer (engine_device_timer) over 60 decode batches at batch 1: verify 23.00 ms "
            "per cycle, draft 7.00 ms per cycle, host work 6.00 ms per cycle; the hook's verify row at batch 1: "
            "23.00 ms (perf_counter, +0.0% apart)") in res.stdout
    doc = json.loads((prof / "profile.json").read_text()) if prof.is_dir() else json.loads(prof.read_text())
    timer = doc["source"]["engine_device_timer"]
    assert timer["clock"] == "engine_device_timer" and [r["pages"] for r in timer["runs"]] == [2, 4]
    assert timer["runs"][1]["whole"]["draft_s"] == pytest.approx(0.007)
    assert "eager" in timer["categories"]["decode"]["holds"]
    assert doc["overhead_s"] == pytest.approx(0.006)
    # the cycle is now 30 ms of forwards + 6 ms of host work: 3 x 20 / 36 = 1.67x, and no longer
    # qualified by an unmeasured host work
    res = run_cli("predict", "--profile", str(prof), "--accept-hist", "1:100,2:200,3:300,4:400", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["speedup"] == pytest.approx(60 / 36, rel=1e-3) and out["assumed"] == []


def test_summarize_without_occupancy_keeps_the_host_work_unknown(tmp_path: Path) -> None:
    base, spec = _run_dirs(tmp_path, host_pct=None)
    prof = tmp_path / "p.json"
    res = run_cli("sglang", "--summarize", str(base), "--summarize", str(spec), "-o", str(prof))
    assert res.returncode == 0, res.stderr
    assert "host work unknown per cycle" in res.stdout and "host unknown: no sglang:fwd_occupancy" in res.stdout
    assert json.loads(prof.read_text())["overhead_s"] == 0.0


def test_summarize_refuses_a_timer_page_without_its_counts(tmp_path: Path) -> None:
    base, spec = _run_dirs(tmp_path, host_pct=90.0)
    (spec / "metrics" / "000003.prom").write_text(Server().page(with_passes=False))
    res = run_cli("sglang", "--summarize", str(base), "--summarize", str(spec), "-o", str(tmp_path / "p"))
    assert res.returncode == 2
    assert res.stderr.strip() == (f"specmodel: error: {spec / 'metrics' / '000003.prom'}: sglang:forward_execution_"
                                  "seconds_total without sglang:cuda_graph_passes_total{mode=decode_*}: no count to "
                                  "divide the device timer's seconds by")


@pytest.mark.slow  # waits for two scrapes of a stand-in server (the keeper's period)
def test_the_run_turns_the_timer_on_and_keeps_every_page(tmp_path: Path) -> None:
    import socket
    import sys

    with socket.socket() as sock:  # a free port on 127.0.0.1 for the stand-in
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "run"
    server = Path(__file__).parent / "sglang_timer_server.py"  # its path names sglang: the flag is added
    res = run_cli("sglang", "--out", str(out), "--", sys.executable, str(server), "--port", str(port), "--pages", "2",
                  timeout=600)
    assert res.returncode == 0, res.stderr  # 3 would be the stand-in refusing a timer left off
    assert "SGLang's device timer on (SGLANG_ENABLE_METRICS_DEVICE_TIMER=1, --enable-metrics)" in res.stderr
    pages = sorted((out / "metrics").glob("*.prom"))
    assert [p.name for p in pages[:2]] == ["000000.prom", "000001.prom"]
    first, last = (dt.read_page(p.read_text(), str(p)) for p in (pages[0], pages[-1]))
    assert first.decode_passes == 10 and last.decode_passes == 10 * len(pages)
    assert (out / "metrics.prom").read_text() == pages[-1].read_text()
