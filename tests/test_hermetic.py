"""The suite's own check (tests/conftest.py) fails a test that reads, lists or writes the checkout's
profiles/ or reports/, leaves a file at its top, or starts a process there -- and passes one that
works in its own folders and reads what git ships there. Seen failing: a pytest run of a few such
tests against a stand-in checkout (SPECMODEL_TESTS_GUARDED_CHECKOUT), the suite's conftest loaded as
a plugin."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import checkout_env

PROBES = textwrap.dedent('''
    import os, subprocess
    from pathlib import Path

    CHECKOUT = Path(os.environ["SPECMODEL_TESTS_GUARDED_CHECKOUT"])

    def test_lists_profiles():
        os.listdir(CHECKOUT / "profiles")

    def test_opens_the_demos_profile():
        (CHECKOUT / "profiles" / "cpu-demo" / "profile.json").read_text()

    def test_writes_a_report():
        (CHECKOUT / "reports" / "r.pdf").write_bytes(b"%PDF")

    def test_leaves_a_file_at_the_top():
        (CHECKOUT / "fuzz-report.jsonl").write_text("{}")

    def test_starts_a_process_in_the_checkout():
        subprocess.run(["true"], cwd=CHECKOUT, check=True)

    def test_a_bare_relative_read_is_its_own_folders(tmp_path):
        assert not Path("profiles").exists() and Path.cwd() != CHECKOUT and Path.cwd() != tmp_path

    def test_reads_what_git_ships_there(tmp_path):
        (CHECKOUT / "profiles" / "kimi-k2.5-int4-tp8-pcie" / "profile.json").read_text()
        (tmp_path / "mine.txt").write_text("ok")
        subprocess.run(["true"], check=True)
''')


def test_the_check_fails_each_way_a_test_touches_the_checkout(tmp_path: Path) -> None:
    fake = tmp_path / "checkout"
    (fake / "profiles" / "cpu-demo").mkdir(parents=True)
    (fake / "profiles" / "cpu-demo" / "profile.json").write_text("{}")
    (fake / "profiles" / "kimi-k2.5-int4-tp8-pcie").mkdir()
    (fake / "profiles" / "kimi-k2.5-int4-tp8-pcie" / "profile.json").write_text("{}")
    (fake / "reports").mkdir()
    (fake / "reports" / ".gitkeep").write_text("")
    run = tmp_path / "run"
    run.mkdir()
    (run / "test_probes.py").write_text(PROBES)
    env = checkout_env({**os.environ, "SPECMODEL_TESTS_GUARDED_CHECKOUT": str(fake)})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                        "-rA", "test_probes.py"], capture_output=True, text=True, timeout=300,
                       cwd=run, env=env)
    out = r.stdout
    outcome = {m.group(2): m.group(1) for m in re.finditer(r"^(PASSED|ERROR|FAILED) test_probes\.py::(\w+)", out, re.M)}
    assert outcome == {
        "test_lists_profiles": "ERROR",
        "test_opens_the_demos_profile": "ERROR",
        "test_writes_a_report": "ERROR",
        "test_leaves_a_file_at_the_top": "ERROR",
        "test_starts_a_process_in_the_checkout": "ERROR",
        "test_a_bare_relative_read_is_its_own_folders": "PASSED",
        "test_reads_what_git_ships_there": "PASSED",
    }, out[-6000:]
    # each names what it touched
    assert f"os.listdir {fake / 'profiles'}" in out
    assert f"open {fake / 'profiles' / 'cpu-demo' / 'profile.json'}" in out
    assert f"{fake / 'reports' / 'r.pdf'}" in out and "'fuzz-report.jsonl'" in out
    assert f"started ['true'] in the checkout ({fake})" in out
