"""What a newcomer hits first at the command line: a mistyped command,
Ctrl-C, and ``--profile NAME`` as the tool prints it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import run_cli, sigint_default


def test_a_mistyped_command_gets_did_you_mean() -> None:
    r = run_cli("predcit", "--accept-len", "3")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["specmodel: error: no such command 'predcit'; did you mean predict?"]


def test_an_unknown_command_lists_the_commands() -> None:
    r = run_cli("frobnicate")
    assert r.returncode == 2
    line = r.stderr.strip()
    assert line.startswith("specmodel: error: no such command 'frobnicate' (commands: accept, check-drafter,")
    assert "\n" not in line


_CTRL_C = """
import os, signal, time
import click
import specmodel.cli as c

@click.command()
def slow():
    print("working", flush=True)
    os.kill(os.getpid(), signal.SIGINT)  # what the terminal sends on Ctrl-C
    time.sleep(30)

c.COMMANDS["slow"] = ("unused:slow", "")
c.LazyGroup.get_command = lambda self, ctx, name: slow if name == "slow" else None
c.main(["slow"])
"""


def test_ctrl_c_prints_exactly_one_line() -> None:
    r = subprocess.run([sys.executable, "-c", _CTRL_C], capture_output=True, text=True, timeout=60,
                       preexec_fn=sigint_default)
    assert r.returncode == 130
    # click on its own prints a blank line before its Abort: the promise is one line
    assert r.stderr.splitlines() == ["specmodel: interrupted"], r.stderr
    assert r.stdout == "working\n"


def test_profile_by_the_name_the_tool_prints(tmp_path) -> None:
    import shutil

    from tests.conftest import REFERENCE

    # a shipped reference by name, from a folder with no ./profiles
    r = run_cli("predict", "--profile", "kimi-k2.5-int4-tp8-pcie", "--accept-len", "3.2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "profile      kimi-k2.5-int4-tp8-pcie" in r.stdout
    # a profile under ./profiles by its folder name (what `specmodel profile --name box` prints)
    (tmp_path / "profiles" / "box").mkdir(parents=True)
    shutil.copy(REFERENCE / "profile.json", tmp_path / "profiles" / "box" / "profile.json")
    r = run_cli("predict", "--profile", "box", "--accept-len", "3.2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "profiles/box" in r.stdout
    r = run_cli("predict", "--profile", "nobox", "--accept-len", "3.2", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == ("specmodel: error: --profile: nobox: file not found, and no profile of that name under "
                                "profiles/ or the shipped references (known: box, kimi-k2.5-int4-tp8-pcie)")
