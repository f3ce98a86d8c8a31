"""The README is a manual: short, its links resolve, and its accuracy figures are the recorded runs'.

The figures are checked against the results files they name (benchmarks/results/), so a README
that quotes an older run than the newest one recorded, or a figure the run did not produce, fails.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
RESULTS = REPO / "benchmarks" / "results"
PAGES = [README, REPO / "CHANGELOG.md", REPO / "benchmarks" / "README.md", RESULTS / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip("# ").strip().lower()).replace(" ", "-")


def test_the_readme_stays_a_manual() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    # the two set-up commands come first, and CI runs exactly those, in that order (the newcomer's path:
    # the suite runs beside what the demo wrote)
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [ln.split()[:2] for ln in first_block.splitlines()] == [["make", "demo"], ["make", "test"]]
    ci = [ln.split() for ln in (REPO / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.lstrip().startswith("#") and ln.split()[0] not in ("set", "cd")]
    assert ci == [["make", "demo"], ["make", "test"]], ci


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            if anchor not in {_anchor(h) for h in dest.read_text().splitlines() if h.startswith("#")}:
                broken.append(target)
    assert broken == [], f"{page.relative_to(REPO)}: {broken}"


def test_every_results_file_the_readme_names_exists() -> None:
    names = set(re.findall(r"`([a-z_]+_20\d\d-\d\d-\d\d[^`]*)`", README.read_text()))
    assert names, "the README names no results file"
    missing = []
    for name in names:
        stems = [name]
        if "{" in name:  # `a_{x,y}_b.json`: each alternative
            head, alts, tail = _groups(r"(.*)\{(.*)\}(.*)", name)
            stems = [head + a + tail for a in alts.split(",")]
        missing += [s for s in stems if not list(RESULTS.glob(s + "*"))]
    assert missing == []


def _groups(pattern: str, text: str) -> tuple[str, ...]:
    m = re.search(pattern, text)
    assert m, (pattern, text)
    return m.groups()


def _newest(pattern: str) -> Path:
    return sorted(p for p in RESULTS.glob(pattern) if "rescored" not in p.name)[-1]


def _vllm_cli_rows() -> dict[str, list[tuple[str, float, tuple[int, int], tuple[int, int]]]]:
    """README table rows per results file: (TP, median %, go/no-go, marginal)."""
    rows: dict[str, list[tuple[str, float, tuple[int, int], tuple[int, int]]]] = {}
    current = ""
    for ln in README.read_text().splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if not ln.startswith("| ") or len(cells) != 5:
            continue
        m = re.match(r"`(vllm_cli_[^`]+)`", cells[0])
        if m:
            current = m.group(1)
        if not current or cells[1] not in {"1", "2", "both"}:
            continue
        pct = float(_groups(r"([\d.]+) %", cells[2])[0])
        g_right, g_all = (int(x) for x in _groups(r"^(\d+)/(\d+)$", cells[3]))
        m_ok, m_all = (int(x) for x in _groups(r"^(\d+)/(\d+)$", cells[4]))
        rows.setdefault(current, []).append((cells[1], pct, (g_right, g_all), (m_ok, m_all)))
    return rows


def test_the_vllm_accuracy_table_is_the_recorded_runs_and_quotes_the_newest() -> None:
    table = _vllm_cli_rows()
    assert _newest("vllm_cli_*.json").stem in table, "the README does not quote the newest bench_vllm_cli run"
    for stem, quoted in table.items():
        res = json.loads((RESULTS / f"{stem}.json").read_text())
        for tp, pct, gng, marg in quoted:
            rows = [r for r in res["rows"] if tp == "both" or r["tp"] == int(tp)]
            oos = [abs(r["error"]) for r in rows if not r["in_sample"] and r.get("error") is not None]
            calls = [r["go_no_go_right"] for r in rows if r["go_no_go_right"] is not None]
            margins = [r["marginal_ok"] for r in rows if r["marginal_ok"] is not None]
            assert pct == round(100 * statistics.median(oos), 1), (stem, tp)
            assert gng == (sum(calls), len(calls)), (stem, tp)
            assert marg == (sum(margins), len(margins)), (stem, tp)
            if tp == "both":  # the benchmark's own summary agrees
                assert pct == round(100 * res["summary"]["median_abs_error_oos"], 1)
                assert list(gng) == res["summary"]["go_no_go"] and list(marg) == res["summary"]["marginal"]


@pytest.mark.parametrize("pattern", ["spec_loop_oos_*.txt", "spec_loop_gpu_*.txt"], ids=["cpu-stack", "h200-stack"])
def test_the_spec_loop_figure_is_the_newest_recorded_run(pattern: str) -> None:
    newest = _newest(pattern)
    text = README.read_text()
    assert f"`{newest.name}`" in text
    recorded = re.search(r"median \|speedup error\| over \d+ runs: ([\d.]+)%", newest.read_text())
    assert recorded, newest
    row = next(ln for ln in text.splitlines() if ln.startswith("|") and f"`{newest.name}`" in ln)
    assert _groups(r"\*\*([\d.]+) %\*\*", row)[0] == recorded.group(1)


def test_the_readme_dates_nothing_in_prose() -> None:
    # diary words and tracker numbers: tests/test_project_voice.py; here dates, only inside results file names
    text = README.read_text()
    assert not re.search(r"(?<![_\w])20\d\d-\d\d-\d\d", text)
