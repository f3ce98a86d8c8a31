"""The box-condition guard right both ways: a loaded box caught where no probe recorded it (the steps
both servers ran witness it), a clean pair left alone where the probe's time carries the server's
own load (the others' share of the CPU decides), and the line that fires says its figures and the
command that settles it.

Recordings: tests/data/vllm_cpu_032_condition/ (README there). "Old format": the same logs with every
probe record left out, as a hook before the probe wrote them."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.hook import calibration
from specmodel.model.boxcheck import check_condition, check_shared_steps
from specmodel.schema.conditions import Conditions, ServerCondition
from specmodel.schema.costrows import CostRow, HostProposer
from specmodel.schema.profile import Profile
from specmodel.schema.source import Source
from tests.conftest import DATA, run_cli
from tests.test_box_condition import _STEP_S

REC = DATA / "vllm_cpu_032_condition"
BASE, NGRAM = REC / "base" / "hook", REC / "ngram" / "hook"


def _rewrite(src: Path, dst: Path, *, factor: float = 1.0, probes: bool = True, extra: list[dict[str, Any]] = ()) -> Path:
    """The recording with every step duration times ``factor``, its probe records kept or left out,
    and ``extra`` probe records appended."""
    dst.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.name != "rank0.jsonl":
            (dst / f.name).write_bytes(f.read_bytes())
            continue
        out = []
        for ln in f.read_text().splitlines():
            rec = json.loads(ln)
            if rec.get("type") == "probe" and not probes:
                continue
            if rec.get("type") == "step":
                for k in _STEP_S:
                    if rec.get(k) is not None:
                        rec[k] = rec[k] * factor
            out.append(json.dumps(rec))
        out += [json.dumps(r) for r in extra]
        (dst / f.name).write_text("\n".join(out) + "\n")
    return dst


def _predict(tmp_path: Path, base: Path, spec: Path, name: str) -> tuple[int, dict[str, Any] | str]:
    out = tmp_path / "profiles" / name
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(out))
    assert r.returncode == 0, r.stderr
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.5", "--json")
    if r.returncode != 0:
        return r.returncode, r.stderr
    d = json.loads(r.stdout)
    return 0, d.get("prediction", d)


# --------------------------------------------------------------------------- old recordings: the shared steps


def test_an_old_format_baseline_recorded_30_percent_slower_is_qualified_with_its_witness(tmp_path: Path) -> None:
    """A baseline recorded on a box 30 % slower, in recordings without the probe: before the shared-step
    witness this predicted GO with P(speedup>1) = 1.00."""
    loaded = _rewrite(BASE, tmp_path / "base", factor=1.3, probes=False)
    spec = _rewrite(NGRAM, tmp_path / "ngram", probes=False)
    rc, d = _predict(tmp_path, loaded, spec, "old_loaded")
    assert rc == 0 and isinstance(d, dict)
    box = [i for i in d["inconsistencies"] if i["check"] == "box_condition"]
    assert len(box) == 1 and box[0]["severity"] == "qualify", d["inconsistencies"]
    assert d["p_speedup_gt_1"] is None and "shared steps: baseline +" in d["p_withheld"]
    msg = box[0]["message"]
    # which witness saw what: both shared steps, with their steps and spreads
    assert "not recorded for either server" in msg
    assert "prefill forward at batch 1, 60 tokens" in msg and "(IQR " in msg and "7 steps)" in msg
    assert "decode forward at batch 1, 1 token, context 82" in msg and "289 steps" in msg and "44 steps" in msg
    assert "standard error" in msg
    # and the one command that settles it: the baseline re-recorded under the hook, then both summarized
    assert box[0]["to_measure"].startswith("re-record the baseline server")
    assert "`specmodel vllm --out BASE_DIR -- python -m vllm.entrypoints.openai.api_server" in box[0]["to_measure"]
    assert "`specmodel vllm --summarize BASE_DIR --summarize SPEC_DIR --output profiles/old_loaded`" in box[0]["to_measure"]


def test_the_same_old_format_logs_unscaled_are_not_flagged(tmp_path: Path) -> None:
    rc, d = _predict(tmp_path, _rewrite(BASE, tmp_path / "base", probes=False),
                     _rewrite(NGRAM, tmp_path / "ngram", probes=False), "old_clean")
    assert rc == 0 and isinstance(d, dict)
    assert not [i for i in d["inconsistencies"] if i["check"] == "box_condition"]
    assert d["p_speedup_gt_1"] is not None


def _row(kind: str, fwd_s: float, *, tokens: int = 1, iqr_s: float = 0.1349e-3, n: int = 25) -> CostRow:
    return CostRow(kind=kind, batch=1, tokens=tokens, total_s=fwd_s, allreduce_s=0.0, compute_s=fwd_s, other_s=0.0,
                   spread_s=iqr_s, samples=n)


def _hook_profile(base_fwd_s: float | None, spec_fwd_s: float = 1.0e-3) -> Profile:
    """Two servers summarized by ``specmodel vllm``, no probe; a shared decode step when ``base_fwd_s``."""
    hp = None if base_fwd_s is None else HostProposer(
        method="ngram", proposal_rate=0.5, request_steps=10, proposed_request_steps=5, lookup_s=1e-4, lookup_steps=10,
        decode=(_row("decode", spec_fwd_s),))
    costs = (_row("decode", base_fwd_s or 1.0e-3), _row("verify", 1.5e-3, tokens=4))
    return Profile(name="p", source=Source(kind="ingested", tool="specmodel vllm"), tp=1, costs=costs,
                   host_proposer=hp)


# One witness, both rows IQR 0.1349 ms over 25 steps: SE of a median = 1.253 x 0.1 ms / 5 = 0.02506 ms.
# Baseline 1.20 ms against 1.00 ms: log ratio 0.1823, its SE hypot(0.02506/1.2, 0.02506/1.0) = 0.03262;
# 0.1823 - 2 x 0.03262 = 0.1171 > ln 1.1 = 0.0953: refuse. 1.15 ms: 0.1398, SE 0.03341, 0.0730 < 0.0953
# but 0.1398 > 0.0334 + ln 1.05 = 0.0822: qualify. 1.07 ms: 0.0677 < 0.0342 + 0.0488 = 0.0830: no flag (two
# recordings on one box differ by that much); 1.02 ms: none; a dearer speculative side: none.
@pytest.mark.parametrize(("base_ms", "want"), [(1.20, "refuse"), (1.15, "qualify"), (1.07, None), (1.02, None),
                                               (0.80, None)])
def test_the_shared_step_witness_refuses_beyond_its_noise_and_qualifies_within_it(base_ms: float,
                                                                                  want: str | None) -> None:
    got = check_shared_steps(_hook_profile(base_ms * 1e-3), "either server")
    assert [i.severity for i in got] == ([want] if want else [])
    if want:
        assert f"{math.exp(math.log(base_ms)) - 1:+.0%}" in got[0].message


def test_without_a_probe_or_a_shared_step_the_verdict_says_the_box_was_not_recorded() -> None:
    got = check_shared_steps(_hook_profile(None), "either server")
    assert [(i.check, i.severity) for i in got] == [("box_condition", "qualify")]
    assert "not recorded for either server" in got[0].message and got[0].guard == "box condition not recorded"
    assert "record both servers in turns on the same box (baseline, speculative, speculative, baseline)" \
        in got[0].to_measure
    # a profile not made of two hook recordings (plain numbers, a reference) asks nothing of the box
    plain = Profile(name="p", source=Source(kind="numbers"), tp=1, costs=_hook_profile(None).costs)
    assert check_shared_steps(plain, "either server") == ()


# --------------------------------------------------------------------------- the probe: the box's load, not the server's


def _cond(probe_ms: float, iqr_ms: float, *, others: float | None, others_iqr: float = 0.02, intervals: int = 7,
          device: str = "cpu") -> ServerCondition:
    return ServerCondition(probe=f"matmul_f32 128x128 x16 on {device} (perf_counter)", probe_s=probe_ms * 1e-3,
                           probe_iqr_s=iqr_ms * 1e-3, samples=40, probes=8, others_share=others,
                           others_iqr=others_iqr if others is not None else 0.0,
                           intervals=intervals if others is not None else 0)


def _with(base: ServerCondition, spec: ServerCondition) -> Profile:
    return Profile(name="p", source=Source(kind="ingested", tool="specmodel vllm"), tp=1,
                   costs=_hook_profile(None).costs, conditions=Conditions(baseline=base, spec=spec))


def test_a_clean_pair_whose_probe_carries_the_servers_own_load_is_not_flagged() -> None:
    """A clean interleaved pair (A B B A, idle box) as recorded live: probe 0.690 ms (IQR 0.150) on the baseline server against
    0.997 ms (IQR 0.479) on the ngram server, 40 samples each, "44 % slower"; no other work on the box."""
    clean = _with(_cond(0.690, 0.150, others=0.02), _cond(0.997, 0.479, others=0.03))
    assert check_condition(clean) == ()
    # without the others' share (a recording of one probe) the probe decides, as before
    assert [i.severity for i in check_condition(_with(_cond(0.690, 0.150, others=None),
                                                      _cond(0.997, 0.479, others=None)))] == ["qualify"]


# both demands' SE (runnable threads per core): 1.253 x (0.02 / 1.349) / sqrt(7) = 0.00702; two SEs of the
# difference 0.01986; + 0.05: a gap beyond 0.0699 is another condition. 0.45 against 0.03 (a busy loop beside the baseline): refuse;
# 0.03 against 0.45: qualify; 0.09 against 0.02 (0.07 > 0.0699): qualify; 0.08 against 0.02: the same box.
@pytest.mark.parametrize(("base", "spec", "want"), [(0.45, 0.03, "refuse"), (0.03, 0.45, "qualify"),
                                                    (0.02, 0.09, "qualify"), (0.02, 0.08, None)])
def test_other_work_on_the_box_decides_beyond_the_shares_noise(base: float, spec: float, want: str | None) -> None:
    got = check_condition(_with(_cond(0.8, 0.1, others=base), _cond(0.8, 0.1, others=spec)))
    assert [i.severity for i in got] == ([want] if want else [])
    if want:
        m = got[0].message
        assert f"{base:.2f} (IQR 0.02, 7 windows of steps)" in m and f"against {spec:.2f}" in m
        assert "standard errors" in m
        who = "baseline" if want == "refuse" else "speculative"
        assert got[0].to_measure.startswith(f"re-record the {who} server")


def test_one_window_of_steps_has_no_noise_figure_so_a_gap_qualifies_and_never_refuses() -> None:
    """Seen in CI: a live pair recorded beside the suite's other worker, one window of steps a side
    (IQR 0 from one value): 3.68 against 1.94 threads per core read as 1.7e9 standard errors and refused.
    One window has no spread, so its noise is unknown: the gap is said and qualifies; with two windows a
    side the noise is measured and the same gap refuses."""
    one = check_condition(_with(_cond(0.8, 0.1, others=3.68, others_iqr=0.0, intervals=1),
                                _cond(0.8, 0.1, others=1.94, others_iqr=0.0, intervals=1)))
    assert [i.severity for i in one] == ["qualify"]
    assert "noise unknown" in one[0].guard and "3.68" in one[0].message and "1.94" in one[0].message
    assert one[0].to_measure.startswith("record both servers in turns")
    two = check_condition(_with(_cond(0.8, 0.1, others=3.68, others_iqr=0.1, intervals=2),
                                _cond(0.8, 0.1, others=1.94, others_iqr=0.1, intervals=2)))
    assert [i.severity for i in two] == ["refuse"]


def test_on_a_gpu_the_probe_times_the_device_and_still_decides() -> None:
    # the GPU's probe is not the server's host: its others' share (a CPU figure) does not stand in for it
    got = check_condition(_with(_cond(1.0, 0.01, others=0.02, device="cuda"), _cond(1.4, 0.01, others=0.02,
                                                                                    device="cuda")))
    assert [i.severity for i in got] == ["qualify"]


def test_a_clean_pair_recorded_with_serving_inflated_probes_keeps_its_verdict_end_to_end(tmp_path: Path) -> None:
    """Probe records as a live server writes them: the ngram server's probe 45 % slower while it serves
    (its own API process competing), the others' share of the CPU alike on both sides."""
    def probes(ms: float, others: list[float]) -> list[dict[str, Any]]:
        return [{"schema": "specmodel.probe", "schema_version": 1, "type": "probe", "kernel": "matmul_f32", "n": 128,
                 "reps": 16, "device": "cpu", "clock": "perf_counter", "wait_share": None, "others_share": o,
                 "load_1m": 1.0, "cpu_freq_hz": None, "sm_clock_hz": None, "throttle_reasons": None,
                 "t_unix_s": 1.0, "samples_s": [ms * 1e-3 * (1 + 0.01 * j) for j in range(5)]} for o in others]

    base = _rewrite(BASE, tmp_path / "base", probes=False, extra=probes(0.69, [0.02, 0.03, 0.01, 0.02, 0.04]))
    spec = _rewrite(NGRAM, tmp_path / "ngram", probes=False, extra=probes(1.00, [0.03, 0.02, 0.02, 0.04, 0.01]))
    rc, d = _predict(tmp_path, base, spec, "clean")
    assert rc == 0 and isinstance(d, dict)
    assert not [i for i in d["inconsistencies"] if i["check"] == "box_condition"], d["inconsistencies"]
    # the same records with a busy box beside the baseline only: refused, the shares named
    busy = _rewrite(BASE, tmp_path / "busy", probes=False, extra=probes(0.69, [0.40, 0.45, 0.50, 0.42, 0.47]))
    rc, err = _predict(tmp_path, busy, spec, "busy")
    assert rc == 2 and isinstance(err, str)
    assert "other work asked for 0.45 (IQR" in err and "re-record the baseline server" in err


# --------------------------------------------------------------------------- the hook's side


def test_the_others_share_is_other_threads_demand_for_the_cpus_per_core() -> None:
    # 1 s on 2 cores: thread 7 ran 0.3 s and waited 0.2 s, thread 8 (a busy loop) was runnable all 1 s,
    # thread 9 started in between (0.1 s, counted whole), thread 6 exited (lost)
    before = (10_000_000_000, {6: 5_000_000, 7: 1_000_000_000, 8: 2_000_000_000})
    after = (11_000_000_000, {7: 1_500_000_000, 8: 3_000_000_000, 9: 100_000_000})
    assert calibration.others_share(before, after, cpus=2) == pytest.approx((0.5 + 1.0 + 0.1) / 2)
    assert calibration.others_share(before, before, cpus=2) is None


def test_the_demand_reading_leaves_out_the_servers_own_tree(tmp_path: Path) -> None:
    """A real reading: a stand-in server (a process and its child) left out, every other thread read."""
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']);"
            " print(c.pid, flush=True); time.sleep(300)")
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = 0
    try:
        assert server.stdout is not None
        child = int(server.stdout.readline())
        a = calibration.box_ticks(server.pid)
        assert a is not None
        assert server.pid not in a[1] and child not in a[1]  # the server's tree: not other work
        assert os.getpid() in a[1]  # this test's process is outside it
        assert calibration.box_ticks(2**22 + 7) is None  # a root that is no process: unreadable, no guess
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
        server.kill()
        server.wait(timeout=300)


def test_the_servers_root_is_the_topmost_ancestor_started_with_the_hooks_variable(tmp_path: Path) -> None:
    """A process tree as `specmodel vllm` starts it: the server command (the variable set) and a worker
    below it; the process above (here: pytest) does not carry it."""
    code = ("import subprocess, sys; "
            "sys.exit(subprocess.run([sys.executable, '-c', 'import os; from specmodel.engines.hook.calibration "
            "import server_root; print(server_root(), os.getppid())']).returncode)")
    env = {**os.environ, "SPECMODEL_VLLM_DIR": str(tmp_path)}
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=300)
    root, parent = (int(x) for x in out.split())
    assert root == parent == p.pid
    # without the variable the process is its own root
    assert calibration.server_root() == os.getpid() or "SPECMODEL_VLLM_DIR" in os.environ


def test_the_window_is_read_over_steps_before_the_probe_and_restarted_when_the_server_idles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    readings: list[Any] = [(0, {1: 0}), (1, {1: 150}), (401, {1: 410}), (999, {1: 999})]
    monkeypatch.setattr(calibration, "box_ticks", lambda root: readings.pop(0) if len(readings) > 1 else readings[0])
    cal = calibration.Calibrator("cpu")
    clock = [100.0]
    monkeypatch.setattr(calibration.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(calibration, "server_root", lambda: 1)
    assert cal.due(100.0)  # the first probe: at once, no window before it
    assert cal.run().rec["others_share"] is None
    assert cal.next_at == 105.0 and calibration.WINDOW_S == 0.25 and calibration.GAP_S == 0.5
    # steps 0.1 s apart; nothing until a quarter of a second (WINDOW_S) before the probe is due
    assert not any(cal.due(t) for t in (104.0, 104.5, 104.7))
    assert not cal.due(104.75)  # the window opens here
    assert not cal.due(104.85) and not cal.due(104.95)
    assert not cal.due(105.5)  # 0.55 s without a boundary: the server idled; a new window opens on (1, {1: 150})
    assert not cal.due(105.6) and not cal.due(105.7)
    assert cal.due(105.8)  # a quarter of a second of steps: closed on (401, {1: 410}), the probe runs with it
    clock[0] = 105.8
    # over the window's 400 ns another thread asked for 260 ns, on the box's cores
    assert cal.run().rec["others_share"] == pytest.approx(260 / (400 * (os.cpu_count() or 1)))
    # a server that never steps a quarter of a second at a stretch: the probe runs a period overdue, without it
    assert not cal.due(110.6)
    assert not cal.due(111.5) and not cal.due(112.5)
    assert cal.due(115.9)
    clock[0] = 115.9
    assert cal.run().rec["others_share"] is None
