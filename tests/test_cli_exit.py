"""The CLI's entry point ends a finished read-or-write-atomically command without the interpreter's
teardown (``specmodel.cli._end_now``): the exit status and every byte printed survive, and it
steps aside whenever teardown still has work (an atexit callback, another thread)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REFERENCE, run_cli

_END = """
import sys
{setup}
from specmodel.cli import _end_now
sys.stdout.write("x" * 200000)  # more than a pipe holds: only a flush gets it out
print("unflushed tail", end="")
_end_now({rv})
{after}
print(" and teardown ran", end="")
sys.exit(7)
"""


def _run(setup: str, rv: str, after: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _END.format(setup=setup, rv=rv, after=after)], capture_output=True,
                          text=True, timeout=300)


def test_it_ends_the_process_with_the_status_and_all_output() -> None:
    r = _run("", "None")
    assert r.returncode == 0
    assert r.stdout == "x" * 200000 + "unflushed tail"
    r = _run("", "3")
    assert r.returncode == 3


def test_it_steps_aside_for_an_atexit_callback() -> None:
    r = _run("import atexit; atexit.register(lambda: print(' atexit', end=''))", "None")
    assert r.returncode == 7
    assert r.stdout.endswith("unflushed tail and teardown ran atexit")


def test_it_steps_aside_for_another_thread() -> None:
    # the thread lives until the script goes on past _end_now (a timed sleep could end first on a slow box)
    r = _run("import threading; ev = threading.Event(); threading.Thread(target=ev.wait, args=(120,)).start()",
             "None", after="ev.set()")
    assert r.returncode == 7
    assert r.stdout.endswith("and teardown ran")


def test_it_steps_aside_for_a_return_value_sys_exit_would_print() -> None:
    r = _run("", "'a message'")
    assert r.returncode == 7


def test_a_real_command_keeps_its_output_and_status(tmp_path) -> None:
    r = run_cli("predict", "--profile", str(REFERENCE), "--accept-len", "3.2", "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("}")
    r = run_cli("predict", "--profile", str(tmp_path / "none"), "--accept-len", "3.2")
    assert r.returncode == 2
    assert r.stderr.startswith("specmodel: error:")
