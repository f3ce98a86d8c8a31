"""The executable's entry point (specmodel/_entry.py) runs the start-up imports with the cyclic
collector off, then freezes what they built and turns it back on before the command runs."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import specmodel_exe

_PROBE = """
import gc, sys
from specmodel import _entry  # (the package itself: before the entry point runs)
assert "click" not in sys.modules and "specmodel.cli" not in sys.modules
during = []  # for each collection: had the command's module been imported yet?
gc.callbacks.append(lambda phase, info: phase == "start" and during.append("specmodel.commands.accept" in sys.modules))
sys.argv = ["specmodel", "accept", "--help"]
try:
    _entry.run()
except SystemExit:
    pass
gc.collect()
print(gc.isenabled(), gc.get_freeze_count() > 1000, during.count(False), during.count(True) > 0)
"""


def test_no_collection_during_start_up_imports_then_frozen_and_back_on() -> None:
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # on, the imports' objects frozen, no collection before the command's module was in, the
    # collector running again after (the gc.collect() at least)
    assert r.stdout.split()[-4:] == ["True", "True", "0", "True"], r.stdout[-300:]


def test_a_plain_import_of_the_cli_leaves_the_collector_alone() -> None:
    code = ("import gc; from specmodel import cli; "
            "cli.main(['accept', '--help']) if False else None; print(gc.isenabled(), gc.get_freeze_count())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.split() == ["True", "0"], r.stderr


def test_the_installed_executable_goes_through_the_entry_point() -> None:
    exe = specmodel_exe()
    if exe[0].endswith("python") or "-m" in exe:
        code = open(__file__.replace("tests/test_entry_gc.py", "specmodel/__main__.py")).read()
        assert "_entry" in code
        return
    with open(exe[0]) as fh:
        assert "from specmodel._entry import run" in fh.read()
