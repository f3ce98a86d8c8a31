"""A new engine is one folder and one registry line: a copy of specmodel whose ``ENGINE_PACKAGES``
holds one line more (``tests.toy_engine``: a record, a log reader and a counters /metrics reader,
shaped like ``specmodel/engines/<engine>/``) reads the toy server's log (``accept``), plans for it
(``plan --engine toy``), watches its /metrics page and lists it in every command's help -- with no
other edit. Each command runs in its own Python, as a user's would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import specmodel
from tests.conftest import REFERENCE, checkout_env
from tests.metrics_server import PageServer
from tests.toy_engine import log as toy_log
from tests.toy_engine import metrics as toy_metrics

ROOT = Path(__file__).resolve().parents[1]
#: the line that adds an engine, beside the others in the registry's tuple
LINE = '    "specmodel.engines.sglang",\n'


@pytest.fixture(scope="module")
def with_toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the specmodel package with the toy engine's line in ``ENGINE_PACKAGES``."""
    root = tmp_path_factory.mktemp("with_toy")
    pkg = root / "specmodel"
    shutil.copytree(Path(specmodel.__file__).resolve().parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    registry = pkg / "engines" / "__init__.py"
    text = registry.read_text()
    assert text.count(LINE) == 1
    registry.write_text(text.replace(LINE, LINE + '    "tests.toy_engine",\n'))
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # (run from the copy: ``-m`` puts the working directory first on the path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "specmodel", *args], capture_output=True, text=True, timeout=180,
                          cwd=root, env=env)


def test_the_copy_runs_the_copy(with_toy: Path) -> None:
    r = _run(with_toy, "--help")
    assert r.returncode == 0, r.stderr
    probe = subprocess.run([sys.executable, "-c", "import specmodel; print(specmodel.__file__)"], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(with_toy)}, cwd=with_toy, timeout=60)
    assert probe.stdout.strip().startswith(str(with_toy))


def test_accept_reads_the_toy_servers_log(with_toy: Path, tmp_path: Path) -> None:
    log = tmp_path / "toy.log"
    log.write_text("booting\n" + toy_log.line(2, 2.5, 100.0) + toy_log.line(2, 3.5, 0.0) + toy_log.line(1, 2.0, 80.0))
    r = _run(with_toy, "accept", str(log), "--steps", "3", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # the idle window (tok/s 0) is left out by the shared rule; weights 2 and 1
    assert doc["mean_tokens"] == pytest.approx((2 * 2.5 + 2.0) / 3, abs=1e-6)
    text = _run(with_toy, "accept", str(log), "--steps", "3")
    assert text.returncode == 0 and "Toy engine log" in text.stdout
    # the specmodel the tests import has no toy engine: the same file is no log it knows
    plain = subprocess.run([sys.executable, "-m", "specmodel", "accept", str(log)], capture_output=True, text=True,
                           timeout=180, env=checkout_env())
    assert plain.returncode == 2 and "no SGLang 'Decode batch' lines" in plain.stderr


def test_watch_reads_the_toy_counters(with_toy: Path) -> None:
    pages = [toy_metrics.page(100, 150, 400), toy_metrics.page(300, 750, 1400)]  # 200 drafts, 600 accepted
    with PageServer(pages) as srv:
        r = _run(with_toy, "watch", srv.url, "--profile", str(REFERENCE), "--once", "--interval", "0.1", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    assert doc["observed"]["engine"] == "toy" and doc["observed"]["verify_steps"] == 200
    assert doc["observed"]["accept_mean_tokens"] == 4.0  # differenced counters: 1 + 600 / 200
    assert doc["spec"]["topk"] == 1  # the record says it drafts chains
    assert doc["verdict"] in ("GO", "MARGINAL", "NO-GO")


def test_plan_writes_the_toy_engines_schedule(with_toy: Path) -> None:
    r = _run(with_toy, "plan", "--profile", str(REFERENCE), "--accept-len", "3.2", "--engine", "toy", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["engine"] == "toy" and doc["encoding_read_from"] == "tests/toy_engine/record.py"
    for band in doc["bands"]:
        assert band["toy"]["per_batch"] == [[x["start"], x["end"], x["k"]] for x in band["ranges"]]
    text = _run(with_toy, "plan", "--profile", str(REFERENCE), "--accept-len", "3.2")
    assert text.returncode == 0 and "Toy:" in text.stdout  # the ready-to-paste lines come from every record


def test_every_commands_help_lists_the_toy_engine(with_toy: Path) -> None:
    # the strings are generated from the registry, not written in the commands
    for cmd, name in (("predict", "Toy engine log"), ("accept", "Toy engine log"), ("validate", "Toy engine log"),
                      ("watch", "toy /metrics")):
        r = _run(with_toy, cmd, "--help")
        assert r.returncode == 0, r.stderr
        flat = " ".join(r.stdout.split())
        assert name in flat and "vLLM" in flat and "SGLang" in flat, (cmd, flat)
    r = _run(with_toy, "plan", "--help")
    assert "Toy" in " ".join(r.stdout.split())
