"""``specmodel report`` writes its PDF for every kind of profile the tool writes or reads.

The kinds: a vLLM hook summary at TP 1 and TP 2, an ingested CPU trace set at TP 1 (with its
``--baseline``), a ``--baseline-sweep`` CSV, and plain numbers without ``--allreduce-frac`` (the
measured gloo profile and the shipped reference are drawn by test_report_cli.py). At TP 1 no
forward carries a collective: the report says "none (TP 1)", never "unknown" and never a
measured 0. Reports are slow to draw (~8 s each on 2 cores): one per kind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pypdf
import pytest

from tests.conftest import baseline_standin, run_cli

DATA = Path(__file__).parent / "data" / "vllm_cpu_032"
pytestmark = pytest.mark.slow  # renders PDFs (one per test)


def _pdf_text(pdf: Path) -> str:
    return "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(str(pdf)).pages)


def _report(tmp: Path, name: str, *flags: str) -> tuple[str, dict]:
    pdf = tmp / f"{name}.pdf"
    r = run_cli("report", *flags, "-o", str(pdf), cwd=tmp)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert len(pypdf.PdfReader(str(pdf)).pages) >= 7
    return _pdf_text(pdf), json.loads((tmp / f"{name}.json").read_text())


def _make(tmp: Path, *args: str) -> None:
    r = run_cli(*args, cwd=tmp)
    assert r.returncode == 0, r.stderr


def test_hook_profile_tp2(tmp_path: Path) -> None:
    out = tmp_path / "hook2"
    base = baseline_standin(DATA / "tp2_ngram" / "hook", tmp_path / "base2")
    _make(tmp_path, "vllm", "--summarize", str(base), "--summarize", str(DATA / "tp2_draft_model" / "hook"),
          "-o", str(out))
    text, doc = _report(tmp_path, "hook2", "--profile", str(out), "--accept-len", "2.0")
    assert doc["prediction"]["tp"] == 2
    assert "all-reduce none (TP 1)" not in text


def test_ingested_tp1_trace_profile(tmp_path: Path) -> None:
    base, spec = tmp_path / "ing_none", tmp_path / "ing_ngram"
    _make(tmp_path, "ingest", str(DATA / "tp1_none" / "traces"), "-o", str(base))
    _make(tmp_path, "ingest", str(DATA / "tp1_ngram" / "traces"), "--baseline", str(base), "-o", str(spec))
    text, doc = _report(tmp_path, "ing", "--profile", str(spec), "--accept-len", "2.5")
    pred = doc["prediction"]
    assert pred["tp"] == 1 and pred["allreduce_known"] is True and pred["cycle_allreduce_s"] == 0.0
    assert "all-reduce none (TP 1)" in text and "all-reduce unknown" not in text


def test_baseline_sweep_profile(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("batch,tokens_per_s\n1,80\n2,150\n4,260\n8,420\n")
    text, doc = _report(tmp_path, "sweep", "--baseline-sweep", str(sweep), "--tp", "4", "--accept-len", "2.5",
                        "--draft-ms", "1")
    pred = doc["prediction"]
    # no all-reduce split in a throughput sweep: unknown, and the verify is the decode curve (assumed)
    assert pred["allreduce_known"] is False and pred["cycle_allreduce_s"] is None
    assert "all-reduce unknown" in text and [a["kind"] for a in pred["assumed"]] == ["verify"]
    assert pred["p_speedup_gt_1"] is None


@pytest.mark.parametrize("tp", [None, "1"])
def test_plain_numbers_without_allreduce_frac(tmp_path: Path, tp: str | None) -> None:
    flags = ["--baseline-tps", "50", "--verify-ms", "30", "--draft-ms", "2", "--accept-len", "2.5"]
    text, doc = _report(tmp_path, f"plain{tp}", *flags, *(["--tp", tp] if tp else []))
    pred = doc["prediction"]
    if tp is None:  # TP unknown: the all-reduce share is unknown, not zero
        assert pred["tp"] is None and pred["cycle_allreduce_s"] is None and "all-reduce unknown" in text
    else:
        assert pred["tp"] == 1 and pred["cycle_allreduce_s"] == 0.0 and "all-reduce none (TP 1)" in text


def test_hook_profile_of_a_proposer_that_proposes_nothing(tmp_path: Path) -> None:
    # rate 0: no accept length breaks even; the report says "none" where a number would be infinite
    out = tmp_path / "ngram1"
    base = baseline_standin(DATA / "tp1_ngram" / "hook", tmp_path / "base1")
    _make(tmp_path, "vllm", "--summarize", str(base), "--summarize", str(DATA / "tp1_ngram" / "hook"), "-o", str(out))
    text, doc = _report(tmp_path, "rate0", "--profile", str(out), "--accept-len", "2.9", "--proposal-rate", "0")
    pred = doc["prediction"]
    assert pred["proposal_rate"] == 0.0 and pred["break_even_accept_tokens"] is None and pred["verdict"] == "NO-GO"
    assert "none (no accept length breaks even)" in text and "inf" not in (tmp_path / "rate0.md").read_text()
    assert "no drafter forward: ngram proposes on the host" in text


def test_a_request_priced_end_to_end(tmp_path: Path) -> None:
    """--request-tokens: the verdict rests on the request's speedup; page 1 prints both speedups,
    the JSON beside the PDF carries the request, and nothing on the page overlaps."""
    from tests.pdf_layout import layout_problems

    run = Path(__file__).parent / "data" / "vllm_cli_1620_tp1"
    text, doc = _report(tmp_path, "req", "--profile", str(run / "profile_draft.json"), "--accept-log",
                        str(run / "draft_noisy.log"), "--request-tokens", "64")
    req = doc["prediction"]["request"]
    assert req["request_tokens"] == 64 and req["prompt_tokens"] == 60
    assert req["baseline_outside_s"] == pytest.approx(0.00838, abs=5e-5)  # the recording's /metrics
    assert req["spec_prefill_s"] > req["baseline_prefill_s"]  # the draft model's own prefill
    page1 = " ".join(text.split())
    assert f"{req['speedup']:.2f}x per request, {doc['prediction']['speedup']:.2f}x decode" in page1
    assert "per request (60 prompt + 64 output tokens" in page1
    assert doc["prediction"]["verdict_reason"].startswith("per request")
    assert layout_problems(tmp_path / "req.pdf") == []
