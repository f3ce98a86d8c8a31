"""`specmodel watch` on an SGLang server whose page carries the engine's own device timer: the reading
is priced with the live verify / draft costs and host work over the window (deltas between scrapes),
so the verdict follows them as they drift, and says when they left the profile's interval. The
stand-in server (tests/metrics_server.py) serves pages rendered with SGLang 0.5.23's real metric
names (tests/sglang_timer_pages.py). Expected speedups are worked by hand: E[A] x T_base / T_cycle
(docs/verdicts.md), T_cycle = live draft + live verify + live host work."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import REFERENCE, specmodel_exe
from tests.metrics_server import PageServer
from tests.sglang_timer_pages import Server

MODEL = "moonshotai/Kimi-K2.5"  # the reference profile's model, as SGLang names it
# the reference profile at batch 4, context 0 (its rows): decode 12.5954 ms, verify over 16 tokens 28.6012 ms
BASE_S, VERIFY_S = 0.0125954208, 0.0286011955


def _pages(verify_s: float, draft_s: float, host_s: float, *, prefill_s: float = 0.0) -> list[str]:
    """Two scrapes 200 cycles apart at batch 4 (accept length 2.8), occupancy set so that the host
    work per cycle is ``host_s``."""
    gpu = verify_s + draft_s
    s = Server(model=MODEL, accept_len=2.8, spec_steps=3, occupancy_pct=100.0 * gpu / (gpu + host_s))
    s.prefill(1.0)
    s.cycles(50, 4, 0, target_verify=0.02, eagle_draft=0.002, eagle_draft_extend=0.0005)  # warm-up, before the window
    first = s.page()
    s.cycles(200, 4, 0, target_verify=verify_s, eagle_draft=draft_s * 0.75, eagle_draft_extend=draft_s * 0.25)
    if prefill_s:
        s.prefill(prefill_s)
    return [first, s.page()]


def _reading(pages: list[str]) -> dict:
    with PageServer(pages) as srv:
        r = subprocess.run(specmodel_exe() + ["watch", srv.url, "--profile", str(REFERENCE), "--once", "--interval",
                                              "0.1", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    docs = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    assert [(d["schema"], d["schema_version"]) for d in docs] == [("specmodel.watch", 2)]
    return docs[0]


def test_the_reading_follows_the_live_costs_and_says_when_they_left_the_profile() -> None:
    # quiet box: the live verify is the profile's (+1 %), draft 2.6 ms, host 2 ms per cycle
    quiet = _reading(_pages(VERIFY_S * 1.01, 0.0026, 0.002))
    live = quiet["live_costs"]
    assert live["clock"] == "engine_device_timer" and live["cycles"] == 200
    assert live["kinds"]["verify"]["live_s"] == pytest.approx(VERIFY_S * 1.01)
    assert live["kinds"]["verify"]["rel"] == pytest.approx(0.01, abs=1e-6) and not live["kinds"]["verify"]["outside"]
    assert live["host_used"] and quiet["live_outside"] == []
    assert quiet["speedup"] == pytest.approx(2.8 * BASE_S / (0.0026 + VERIFY_S * 1.01 + 0.002), rel=1e-3)
    # a co-tenant: the verify forward 60 % slower, the drafter 20 % slower, the host work alike
    busy = _reading(_pages(VERIFY_S * 1.6, 0.0026 * 1.2, 0.002))
    assert busy["speedup"] == pytest.approx(2.8 * BASE_S / (0.0026 * 1.2 + VERIFY_S * 1.6 + 0.002), rel=1e-3)
    assert busy["speedup"] < 1.0 < quiet["speedup"]  # the verdict followed the costs
    assert busy["verdict"] != quiet["verdict"]
    assert busy["live_outside"][0] == "verify +60.0%"
    assert busy["observed"]["live_costs"]["verify_s"] == pytest.approx(VERIFY_S * 1.6)


def test_a_window_with_prefill_prices_the_verify_and_keeps_the_profiles_draft() -> None:
    doc = _reading(_pages(VERIFY_S * 1.3, 0.0026, 0.002, prefill_s=0.5))
    kinds = doc["live_costs"]["kinds"]
    assert set(kinds) == {"verify"}  # the draft was not seen apart from the prefill: never guessed
    assert "'extend' holds both" in doc["live_costs"]["unknown"]["draft"]
    assert any(n.startswith("live draft cost unknown: the window had prefill") for n in doc["notes"])
    # the profile's draft at batch 4 (2.586 ms, its rows) + the live verify + the live host work
    # (the prefill's 0.5 s over 200 cycles is timed GPU work: it shrinks the host share, never the draft)
    host = doc["live_costs"]["host_s"]
    assert doc["speedup"] == pytest.approx(2.8 * BASE_S / (0.00258609504 + VERIFY_S * 1.3 + host), rel=1e-3)


def test_a_page_without_the_timer_is_priced_with_the_profile_and_says_why() -> None:
    s = Server(model=MODEL, accept_len=2.8, running=4.0)
    pages = [s.page(with_timer=False)]
    s.cycles(10, 4, 0)
    pages.append(s.page(with_timer=False))
    doc = _reading(pages)
    assert doc["live_costs"] is None and doc["live_outside"] == []
    assert doc["observed"]["live_costs_why"].startswith("no sglang:forward_execution_seconds_total on the page")
    # the profile's own cycle at batch 4 (plan/predict: 31.64 ms)
    assert doc["speedup"] == pytest.approx(2.8 * BASE_S / 0.03163729056, rel=1e-3)


def test_a_bad_device_timer_page_is_one_line_exit_2() -> None:
    s = Server(model=MODEL, accept_len=2.8, running=4.0, occupancy_pct=80.0)
    s.cycles(10, 4, 0, target_verify=0.02)
    page = s.page()
    assert page.count(" 80.0\n") == 1  # the occupancy gauge's value, made out of range below
    bad = page.replace(" 80.0\n", " 180.0\n")
    with PageServer([bad]) as srv:
        r = subprocess.run(specmodel_exe() + ["watch", srv.url, "--profile", str(REFERENCE), "--once", "--interval",
                                              "0.1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("specmodel: error: ") and "sglang:fwd_occupancy = 180.0 is not a percentage" in line
