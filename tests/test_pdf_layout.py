"""The PDF report prints: no text over text, no text off the page (read back from the rendered PDF)."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import pypdf
import pytest

from tests.conftest import REPO, run_cli, specmodel_exe
from tests.pdf_layout import layout_problems
from tests.test_report_cli import measured_like_profile, write_drafter_case


def _figure_pdf(path: Path, texts: list[tuple[float, float, str]]) -> Path:
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    from specmodel.report.pdf import PAGE_SIZE_IN, _mpl

    _mpl()
    fig = Figure(figsize=PAGE_SIZE_IN)
    for x, y, t in texts:
        fig.text(x, y, t, fontsize=10)
    with PdfPages(path) as pdf:
        pdf.savefig(fig)
    return path


@pytest.mark.slow  # renders PDFs
def test_the_checker_sees_overlap_and_text_off_the_page(tmp_path: Path) -> None:
    clean = _figure_pdf(tmp_path / "clean.pdf", [(0.1, 0.8, "warnings block"), (0.1, 0.7, "provenance: profile x")])
    assert layout_problems(clean) == []
    over = _figure_pdf(tmp_path / "over.pdf", [(0.1, 0.5, "warning: no draft cost"), (0.12, 0.505, "profile: kimi")])
    probs = layout_problems(over)
    assert len(probs) == 1 and "overlaps" in probs[0] and "page 1" in probs[0]
    off = _figure_pdf(tmp_path / "off.pdf", [(0.8, 0.5, "command: specmodel report --accept-len 3.2 -o reports/x.pdf")])
    assert any("outside the page" in p for p in layout_problems(off))


def _render(content: object, path: Path) -> Path:
    from specmodel.report.pdf import render_pdf_to_temp

    tmp, _ = render_pdf_to_temp(content, path)
    tmp.replace(path)
    return path


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specmodel.model.accept import from_per_position
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.predict import predict
    from specmodel.report.content import build_report
    from specmodel.report.view import DrafterView, FindingRow

    tmp = tmp_path_factory.mktemp("crowded")
    prof = measured_like_profile()
    dist = from_per_position([0.8, 0.6, 0.45], max_tokens=4)
    pred = predict(prof, dist, OperatingPoint(batch=1, spec=prof.spec))
    long_cmd = "specmodel report " + " ".join(f"--accept-log /very/long/path/to/server-{i}.log" for i in range(12))
    c = build_report(profile=prof, dist=dist, spec=prof.spec, prediction=pred, max_batch=64,
                     inputs=(("command", long_cmd),))
    warnings = tuple(f"warning {i}: the {i}th caveat about this prediction, long enough to wrap over two lines "
                     "of the right-hand column of page one" for i in range(14))
    c = dataclasses.replace(c, warnings=warnings)
    findings = tuple(FindingRow(name=f"check.number_{i}_with_a_long_name", status=("FAIL" if i == 29 else "PASS"),
                                message="a finding message " * (3 + 4 * (i % 5))) for i in range(30))
    c = dataclasses.replace(c, drafter=DrafterView(status="FAIL", findings=findings, acceptance_ceiling=None,
                                                   ceiling_tokens=None, warning=None, inputs=(("drafter", "/d"),),
                                                   raw={}))
    return _render(c, tmp / "crowded.pdf")


@pytest.mark.slow  # renders a PDF
def test_crowded_report_has_no_overlap_and_counts_what_it_left_out(crowded: Path) -> None:
    assert layout_problems(crowded) == []
    pages = [p.extract_text() for p in pypdf.PdfReader(str(crowded)).pages]
    assert re.search(r"\.\.\. \d+ more \(all in the JSON report\)", pages[0])
    # a long command keeps two lines and says where the rest is (not cut at the page edge)
    assert "specmodel report --accept-log /very/long/path/to/server-0.log" in pages[0]
    assert "... (in full in the JSON)" in pages[0]
    assert "FAIL" in pages[-1] and "check.number_29" in pages[-1].replace("\n", "")  # failures first
    assert re.search(r"\.\.\. \d+ more findings \(all 30 in the JSON report\)", pages[-1])


@pytest.mark.slow  # renders a PDF
def test_measured_report_with_drafter_page_is_printable(tmp_path: Path) -> None:
    from specmodel.schema.profile import save_profile

    save_profile(measured_like_profile(), tmp_path / "profiles" / "cpu-test")
    drafter, target, freq = write_drafter_case(tmp_path / "models")
    pdf = tmp_path / "m.pdf"
    r = run_cli("report", "--profile", str(tmp_path / "profiles" / "cpu-test"), "--per-position", "0.8,0.6,0.45",
                "--max-batch", "64", "--drafter", str(drafter), "--target", str(target), "--token-freq", str(freq),
                "-o", str(pdf), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert layout_problems(pdf) == []
    doc = json.loads(pdf.with_suffix(".json").read_text())
    # measured to batch 8: 16 is one doubling beyond (extrapolated); 32 and 64 are not priced
    assert [b["extrapolated"] for b in doc["batch_sweep"]] == [False] * 4 + [True]
    assert any(w.startswith("batch sweeps stop at batch 16") for w in doc["warnings"])
    pages = [p.extract_text().replace("\n", " ") for p in pypdf.PdfReader(str(pdf)).pages]
    # page 1 claims stop at the measured range; the extrapolated sweep is marked on its page
    assert re.search(r"pays (up to batch|at every measured batch \(up to) 8", pages[0]), pages[0]
    assert not re.search(r"pays up to batch (16|32|64)", pages[0])
    assert "extrapolated" in pages[4]


def _demo_commands(tp: int, name: str) -> list[list[str]]:
    """The `make demo` recipe, read from the Makefile, with its variables filled in."""
    text = (REPO / "Makefile").read_text()
    recipe = text.split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    cmds = []
    for line in recipe:
        line = line.strip().replace("$(TP)", str(tp)).replace("$(NAME)", name)
        assert line.startswith("$(SPECMODEL) "), line
        cmds.append(specmodel_exe() + shlex.split(line.removeprefix("$(SPECMODEL) ")))
    return cmds


@pytest.mark.slow  # starts TP ranks and renders a PDF
def test_make_demo_pdf_is_printable(tmp_path: Path) -> None:
    """`make demo`'s three commands as written in the Makefile (at TP 2 to keep CI short; `make demo` runs TP 8)."""
    import subprocess

    cmds = _demo_commands(2, "demo")
    assert [c[len(specmodel_exe())] for c in cmds] == ["profile", "predict", "report"]
    for c in cmds:
        r = subprocess.run(c, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (c, r.stderr[-2000:])
    pdf = tmp_path / "reports" / "demo.pdf"
    assert layout_problems(pdf) == []
    # the README's `plan` examples, on the profile `make demo` wrote, recommend something in every
    # cell (not a grid of only "unmeasured" rows)
    readme = (REPO / "README.md").read_text()
    plans = [ln.split("#")[0].split() for ln in readme.splitlines() if ln.startswith("specmodel plan ")]
    assert len(plans) >= 2
    for argv in plans:
        r = subprocess.run(specmodel_exe() + argv[1:], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        rows = [ln for ln in r.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s", ln)]
        assert rows and all(" measured " in ln and "unmeasured" not in ln for ln in rows), r.stdout
