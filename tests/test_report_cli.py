"""``specmodel report`` end to end: a real PDF (pages, text, metadata), JSON/MD beside it, PNGs, bad input.

Reports are slow to draw (matplotlib, ~8 s each on 2 cores), so each is generated once per
module and shared by the tests that read it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pypdf  # dev extra: PDF text extraction
import pytest

from specmodel.model.accept import chain_mean
from specmodel.model.allreduce import fit_alpha_beta
from specmodel.schema.costrows import AllReducePoint, CostRow, SpecConfig
from specmodel.schema.profile import Profile, save_profile
from tests.conftest import run_cli, run_python

PAGES = ["verdict", "throughput-vs-accept", "cycle-breakdown", "allreduce", "what-if", "recommendation", "context"]
N_PAGES = {"ref_report": 7, "measured_report": 8}
PAGE_NAMES = {"ref_report": PAGES, "measured_report": [*PAGES, "drafter-check"]}


def measured_like_profile() -> Profile:
    """A small profile shaped like what `specmodel profile --tp 2` writes on CPU/gloo (scaled model)."""
    hidden, width, layers = 256, 4, 4
    n_ar = 2 * layers + 1
    rows = []
    for b in (1, 2, 4, 8):
        for kind, toks, comp, ar_call in (("decode", b, 2.0e-3 + 0.25e-3 * b, 110e-6),
                                          ("verify", 4 * b, 2.0e-3 + 1.0e-3 * b, 125e-6),
                                          ("draft", b, 0.30e-3 + 0.05e-3 * b, 105e-6)):
            n = n_ar if kind != "draft" else 1
            ar = n * (ar_call + toks * hidden * width / 2e9)
            rows.append(CostRow(kind=kind, batch=b, tokens=toks, total_s=ar + comp + 0.1e-3, allreduce_s=ar,
                                compute_s=comp, other_s=0.1e-3, n_allreduce=n,
                                allreduce_msg_bytes=toks * hidden * width, skew_s=0.1 * ar, samples=20))
    sizes = [1024 * 4**i for i in range(7)]
    lat = [100e-6 + s / 1.5e9 for s in sizes]
    return Profile(name="cpu-test", tp=2, backend="gloo",
                   source={"kind": "measured", "description": "specmodel profile on CPU (gloo), scaled model",
                           "torch_version": "2.13.0+cpu"},
                   hardware={"device": "cpu", "cpu": "test"}, model={"name": "scaled-test", "hidden_size": hidden},
                   spec=SpecConfig(steps=3, topk=1, num_draft_tokens=4), costs=tuple(rows),
                   allreduce_points=tuple(AllReducePoint(msg_bytes=s, tp=2, latency_s=t) for s, t in zip(sizes, lat,
                                                                                                          strict=True)),
                   allreduce_fit=fit_alpha_beta(sizes, lat, 2))


def _predict_json(*flags: str, cwd: Path) -> dict:
    r = run_cli("predict", "--json", *flags, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _report(tmp: Path, name: str, *flags: str, extra: tuple[str, ...] = ()) -> dict:
    """Run `report` with the scenario ``flags`` (+ report-only ``extra``) and `predict --json` with the same flags."""
    pdf = tmp / f"{name}.pdf"
    r = run_cli("report", *flags, *extra, "-o", str(pdf), "--png-dir", str(tmp / "png"), cwd=tmp)
    return {"run": r, "pdf": pdf, "pred": _predict_json(*flags, cwd=tmp), "flags": flags}


@pytest.fixture(scope="module")
def ref_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("ref")
    return _report(tmp, "reference", "--accept-len", "2.0")


COVERAGE = 0.4  # share of target-token mass in the draft vocab: accept length <= chain_mean(0.4, steps)


def write_drafter_case(d: Path) -> tuple[Path, Path, Path]:
    """A well-formed scaled EAGLE-3 drafter + target and a token-frequency file giving ``COVERAGE``."""
    from tests.test_drafter_safetensors import SMALL, draft_targets, write_drafter, write_target

    write_drafter(d / "drafter")
    write_target(d / "target")
    inside = draft_targets(SMALL["vocab"], SMALL["draft_vocab"], 0)  # the builder's default draft vocab
    outside = np.setdiff1d(np.arange(SMALL["vocab"]), inside)
    freq = {int(i): 4.0 for i in inside[:100]} | {int(i): 6.0 for i in outside[:100]}
    (d / "freq.json").write_text(json.dumps(freq))
    return d / "drafter", d / "target", d / "freq.json"


@pytest.fixture(scope="module")
def measured_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The CPU-measured-like profile, per-position rates, and the drafter-check page (7 pages)."""
    tmp = tmp_path_factory.mktemp("measured")
    save_profile(measured_like_profile(), tmp / "profiles" / "cpu-test")
    drafter, target, freq = write_drafter_case(tmp / "models")
    return _report(tmp, "cpu-test", "--profile", str(tmp / "profiles" / "cpu-test"), "--per-position", "0.8,0.6,0.45",
                   extra=("--max-batch", "8", "--drafter", str(drafter), "--target", str(target),
                          "--token-freq", str(freq)))


def _text(pdf: Path) -> list[str]:
    return [p.extract_text() for p in pypdf.PdfReader(str(pdf)).pages]


@pytest.mark.slow  # renders PDFs
@pytest.mark.parametrize("which", ["ref_report", "measured_report"])
def test_report_writes_pdf_json_md_and_says_where(which: str, request: pytest.FixtureRequest) -> None:
    rep = request.getfixturevalue(which)
    r, pdf = rep["run"], rep["pdf"]
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("report") and str(pdf.resolve()) in last and f"({N_PAGES[which]} pages)" in last
    assert pdf.read_bytes().startswith(b"%PDF")
    reader = pypdf.PdfReader(str(pdf))
    assert len(reader.pages) == N_PAGES[which]
    assert reader.metadata.creator.startswith("specmodel ")
    assert rep["pred"]["profile_name"] in reader.metadata.title
    assert pdf.with_suffix(".json").is_file() and pdf.with_suffix(".md").is_file()
    assert not [p for p in pdf.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow  # renders PDFs
@pytest.mark.parametrize("which", ["ref_report", "measured_report"])
def test_page_one_shows_the_verdict_and_the_figures_predict_prints(which: str, request: pytest.FixtureRequest) -> None:
    rep = request.getfixturevalue(which)
    pred = rep["pred"]
    page1 = _text(rep["pdf"])[0]
    if which == "measured_report":
        # its drafter FAILs the vocabulary check: BLOCKED, with the reason and the
        # model's own verdict beside it, on page 1, in the CLI and the JSON; the prediction stays predict's
        flat = page1.replace("\n", " ")
        assert "BLOCKED" in page1 and "FAIL vocab.coverage" in flat and f"the model alone says {pred['verdict']}" in flat
        doc = json.loads(rep["pdf"].with_suffix(".json").read_text())
        assert doc["verdict"] == "BLOCKED" and doc["prediction"]["verdict"] == pred["verdict"]
        assert doc["blocked_by"] and doc["optimizer"]["recommendation"].startswith("none: the drafter check blocks")
        assert any(ln.startswith("verdict      BLOCKED: check-drafter: FAIL vocab.coverage")
                   for ln in rep["run"].stdout.splitlines())
    else:
        assert pred["verdict"] in page1 and "BLOCKED" not in page1
    for needle in (f"{pred['tokens_per_s']:.1f} tok/s", f"{pred['baseline_tokens_per_s']:.1f} tok/s",
                   f"{pred['speedup']:.2f}x", f"{pred['break_even_accept_tokens']:.2f} tokens/step",
                   f"{pred['accept_mean_tokens']:.2f} tokens/step", f"{pred['margin_tokens']:+.2f} tokens/step",
                   f"P(speedup > 1) {pred['p_speedup_gt_1']:.2f}", "Assumptions", "Provenance",
                   pred["profile_name"]):
        assert needle in page1, needle


@pytest.mark.slow  # renders PDFs
@pytest.mark.parametrize("which", ["ref_report", "measured_report"])
def test_json_beside_the_pdf_carries_predict_json_exactly(which: str, request: pytest.FixtureRequest) -> None:
    rep = request.getfixturevalue(which)
    data = json.loads(rep["pdf"].with_suffix(".json").read_text())
    pred = dict(rep["pred"])
    notes = pred.pop("notes")
    # predict --json's own header; inside the report the report's header covers it
    assert (pred.pop("schema"), pred.pop("schema_version")) == ("specmodel.prediction", 6)
    pred["profile_path"] = data["prediction"]["profile_path"] = ""  # same file, maybe a different cwd-relative spelling
    assert data["schema"] == "specmodel.report" and data["schema_version"] == 1
    assert data["prediction"] == pred
    assert data["notes"] == notes
    assert data["pages"] == PAGE_NAMES[which]
    # the report's verdict is predict's unless the drafter check blocks it (measured_report's drafter FAILs)
    assert data["verdict"] == ("BLOCKED" if which == "measured_report" else pred["verdict"])
    opt = data["optimizer"]
    assert opt["best"]["tokens_per_s"] >= opt["default"]["tokens_per_s"]
    # the recommendation is the best MEASURED configuration; extrapolated ones are only listed
    assert opt["best"]["measured"] and opt["recommended"] == opt["best"]
    assert opt["best"]["tokens_per_s"] >= max((c["tokens_per_s"] for c in opt["ranked"] if c["measured"]), default=0.0)
    assert opt["best_any"]["tokens_per_s"] >= max(c["tokens_per_s"] for c in opt["ranked"])
    # the context page: one row per swept context, the prediction's own context among them
    ctx = data["context"]
    assert ctx["context_tokens"] == pred["context_tokens"]
    assert pred["context_tokens"] in [r["context_tokens"] for r in ctx["rows"]]
    assert all(r["extrapolated"] for r in ctx["rows"] if r["context_tokens"] not in ctx["measured_contexts"])
    md = rep["pdf"].with_suffix(".md").read_text()
    assert f"## Verdict: **{data['verdict_label']}**" in md
    assert f"{pred['tokens_per_s']:.1f} tok/s" in md


@pytest.mark.slow  # renders a PDF
def test_chart_pages_show_what_they_claim(ref_report: dict) -> None:
    pages = _text(ref_report["pdf"])
    data = json.loads(ref_report["pdf"].with_suffix(".json").read_text())
    assert "tok/s vs accept length" in pages[1] and "break-even" in pages[1]
    assert "Where the cycle goes" in pages[2] and "verify all-reduce" in pages[2]
    assert "All-reduce cost vs message size" in pages[3] and "alpha 6.81 us" in pages[3]
    assert "What if" in pages[4]
    for w in data["whatifs"]:
        assert w["label"] in pages[4]
    assert {w["key"] for w in data["whatifs"]} == {"as_is", "allreduce_2x", "custom_allreduce", "tp4", "drafter_no_tp"}
    assert [b["batch"] for b in data["batch_sweep"]] == [1, 2, 4, 8, 16, 32, 64]
    assert "Recommended configuration" in pages[5]
    assert data["optimizer"]["best"]["sglang_flags"] in pages[5].replace("\n", " ")
    # the context page: its title, and a row per swept context (the reference measured context 0 only,
    # so every other context is drawn and tabulated as extrapolated)
    assert "vs context" in pages[6] and "Only one context was measured" in pages[6].replace("\n", " ")
    for row in data["context"]["rows"]:
        assert str(row["context_tokens"]) in pages[6]
    assert pages[6].count("(extrap.)") == sum(1 for r in data["context"]["rows"] if r["extrapolated"]) > 0


@pytest.mark.slow  # renders a PDF
def test_measured_profile_report_names_its_provenance(measured_report: dict) -> None:
    page1 = _text(measured_report["pdf"])[0]
    assert "cpu-test (measured)" in page1 and "gloo / TP 2" in page1 and "torch_version 2.13.0+cpu" in page1
    data = json.loads(measured_report["pdf"].with_suffix(".json").read_text())
    assert [b["batch"] for b in data["batch_sweep"]] == [1, 2, 4, 8]
    assert data["optimizer"]["accept_source"] == "per-position rates"
    assert len(data["allreduce"]["points"]) == 7
    assert {w["key"] for w in data["whatifs"]} == {"as_is", "allreduce_2x", "custom_allreduce", "tp4", "tp8",
                                                   "drafter_no_tp"}


@pytest.mark.slow  # renders PDFs
@pytest.mark.parametrize("which", ["ref_report", "measured_report"])
def test_every_page_is_also_a_non_blank_png(which: str, request: pytest.FixtureRequest) -> None:
    import matplotlib.image as mpimg

    rep = request.getfixturevalue(which)
    pngs = sorted((rep["pdf"].parent / "png").glob(f"{rep['pdf'].stem}-p*.png"))
    assert [p.name.split("-p", 1)[1].split("-", 1)[1][:-4] for p in pngs] == PAGE_NAMES[which]
    for p in pngs:
        img = mpimg.imread(p)
        assert img.shape[0] > 500 and img.shape[1] > 800
        ink = np.mean(img[..., :3], axis=2) < 0.9  # pixels that are not (near) white
        assert 0.01 < ink.mean() < 0.9, p.name


def test_report_command_does_not_import_matplotlib_for_predict() -> None:
    code = ("import sys, specmodel.commands.predict, specmodel.commands.report, specmodel.report.content; "
            "print('matplotlib' in sys.modules)")
    assert run_python(code).stdout.strip() == "False"


@pytest.mark.slow  # renders a PDF
def test_drafter_page_shows_findings_and_the_vocab_ceiling(measured_report: dict) -> None:
    r, pdf = measured_report["run"], measured_report["pdf"]
    pages = _text(pdf)
    data = json.loads(pdf.with_suffix(".json").read_text())
    d = data["drafter"]
    assert d["status"] == "FAIL"  # the coverage finding fails at 40%
    assert d["acceptance_ceiling"] == pytest.approx(COVERAGE)
    assert d["ceiling_tokens"] == pytest.approx(chain_mean(COVERAGE, 3))
    assert data["throughput_vs_accept"]["ceiling_tokens"] == pytest.approx(chain_mean(COVERAGE, 3))
    assert {f["name"] for f in d["findings"]} >= {"config.hidden_size", "d2t.well_formed", "vocab.coverage"}
    assert "Drafter check" in pages[7] and "vocab.coverage" in pages[7] and "FAIL" in pages[7]
    assert f"drafter vocab ceiling {chain_mean(COVERAGE, 3):.2f}" in pages[1]
    # 0.8,0.6,0.45 -> 2.85 tokens/step, above the 1.62 the vocabulary allows: say so on page 1 and the console
    assert d["warning"] and "exceeds the drafter's vocabulary ceiling" in d["warning"]
    assert "drafter check: FAIL" in pages[0]
    assert "exceeds the drafter's vocabulary ceiling" in r.stdout


@pytest.mark.slow
def test_main_job_real_cpu_profile_then_report_with_the_default_output(tmp_path: Path) -> None:
    """`specmodel profile --tp 2` for real (smallest sweep, ~10 s on CPU/gloo), then `report` finds it by itself."""
    prof = run_cli("profile", "--tp", "2", "--name", "ci-tp2", "--layers", "1", "--hidden", "64", "--batches", "1,2",
                   "--verify-tokens", "4", "--phases", "decode,verify,draft", "--warmup", "1", "--repeats", "2",
                   "--allreduce-sizes", "4K,64K", "--context-len", "16", cwd=tmp_path)
    assert prof.returncode == 0, prof.stderr[-2000:]
    r = run_cli("report", "--accept-len", "3.2", cwd=tmp_path)  # newest measured profile, reports/<name>.pdf
    assert r.returncode == 0, r.stderr
    pdf = (tmp_path / "reports" / "ci-tp2.pdf").resolve()
    assert r.stdout.strip().splitlines()[-1] == f"report       {pdf} (7 pages)"
    pred = _predict_json("--accept-len", "3.2", cwd=tmp_path)
    assert pred["profile_source_kind"] == "measured" and pred["tp"] == 2
    pages = _text(pdf)
    assert len(pages) == 7
    assert pred["verdict"] in pages[0] and f"{pred['tokens_per_s']:.1f} tok/s" in pages[0]
    assert "ci-tp2 (measured)" in pages[0] and "gloo / TP 2" in pages[0]
    data = json.loads(pdf.with_suffix(".json").read_text())
    assert data["prediction"]["tokens_per_s"] == pred["tokens_per_s"]
    assert len(data["allreduce"]["points"]) == 2
    assert data["optimizer"]["best"]["tokens_per_s"] >= data["optimizer"]["default"]["tokens_per_s"]


# --- bad input: one line, exit 2, nothing half-written, an existing report untouched -----------------------


def _assert_usage_error(r, fragment: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specmodel: error:") and fragment in err[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("flags,fragment", [
    (("--profile", "nope/profile.json", "--accept-len", "2"), "file not found"),
    (("--accept-len", "9"), "--accept-len"),
    (("--accept-len", "2", "--max-batch", "0"), "--max-batch"),
    (("--accept-len", "2", "--drafter", "."), "--target"),
    (("--accept-len", "2", "--target", "."), "--drafter"),
])
def test_bad_input_leaves_an_existing_report_untouched(tmp_path: Path, flags: tuple[str, ...], fragment: str) -> None:
    pdf = tmp_path / "reports" / "r.pdf"
    pdf.parent.mkdir()
    for p, body in ((pdf, b"%PDF old"), (pdf.with_suffix(".json"), b"{}"), (pdf.with_suffix(".md"), b"old")):
        p.write_bytes(body)
    r = run_cli("report", *flags, "-o", str(pdf), cwd=tmp_path)
    _assert_usage_error(r, fragment)
    assert pdf.read_bytes() == b"%PDF old" and pdf.with_suffix(".md").read_bytes() == b"old"
    assert sorted(p.name for p in pdf.parent.iterdir()) == ["r.json", "r.md", "r.pdf"]


def test_output_must_be_a_pdf_path(tmp_path: Path) -> None:
    _assert_usage_error(run_cli("report", "--accept-len", "2", "-o", str(tmp_path / "r.txt"), cwd=tmp_path), ".pdf")
    (tmp_path / "afile").write_text("x")
    _assert_usage_error(run_cli("report", "--accept-len", "2", "-o", str(tmp_path / "afile" / "r.pdf"), cwd=tmp_path),
                        "is a file")
    assert not (tmp_path / "reports").exists()


@pytest.mark.slow  # renders a PDF
def test_report_serve_plan_is_the_plan_command(measured_report: dict, tmp_path: Path) -> None:
    """The plan in the report JSON equals `specmodel plan --json` for the same flags and grid."""
    data = json.loads(measured_report["pdf"].with_suffix(".json").read_text())
    plan = data["serve_plan"]
    assert plan["batches"] == [1, 2, 4, 8] and plan["contexts"] == [0]
    r = run_cli("plan", "--json", *measured_report["flags"], "--batches", "1,2,4,8", "--contexts", "0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cmd = json.loads(r.stdout)
    for a, b in zip(plan["cells"], cmd["cells"], strict=True):
        assert (a["batch"], a["context_tokens"], a["action"]) == (b["batch"], b["context_tokens"], b["action"])
        assert a["recommended"] == b["recommended"]
        assert a["recommended"] is None or a["recommended"]["measured"]


@pytest.mark.slow  # renders PDFs (the report fixtures)
@pytest.mark.parametrize("which", ["ref_report", "measured_report"])
def test_cli_and_pdf_give_one_recommendation(which: str, request: pytest.FixtureRequest) -> None:
    # the CLI must not print the best measured configuration while page 1 says "turn speculation off"
    rep = request.getfixturevalue(which)
    data = json.loads(rep["pdf"].with_suffix(".json").read_text())
    rec = data["optimizer"]["recommendation"]
    line = next(ln for ln in rep["run"].stdout.splitlines() if ln.startswith("recommended"))
    assert line == f"recommended  {rec}"
    assert rec.split(":")[0][:40] in _text(rep["pdf"])[0].replace("\n", " ")
