"""The README's console examples are run as written, and the figures they print must match.

Each ```console block is a sequence of ``$ specmodel …`` commands, each followed by the lines it
prints; ``...`` stands for lines left out. The printed lines must appear in the real output in
the same order, character for character (trailing spaces aside).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli


def console_examples(text: str) -> list[tuple[str, list[str]]]:
    """(command line, expected output lines) for every ``$ `` line of every console block."""
    out: list[tuple[str, list[str]]] = []
    in_block = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            in_block = line.strip() == "```console"
            continue
        if not in_block:
            continue
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line.rstrip())
    return out


EXAMPLES = console_examples((REPO / "README.md").read_text())


def test_the_readme_has_console_examples() -> None:
    cmds = [c for c, _ in EXAMPLES]
    assert "specmodel predict --accept-len 3.2" in cmds
    assert "specmodel predict --accept-len 2.0 --calibrate 1,2.0,60" in cmds
    assert all(c.startswith("specmodel ") for c in cmds)


def _in_order(expected: list[str], actual: list[str]) -> str | None:
    """None when every non-``...`` expected line occurs in ``actual`` in order, else the first that does not."""
    i = 0
    for want in expected:
        if want.strip() == "...":
            continue
        while i < len(actual) and actual[i] != want:
            i += 1
        if i == len(actual):
            return want
        i += 1
    return None


@pytest.mark.parametrize("command,expected", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_readme_example_prints_what_the_readme_says(command: str, expected: list[str], tmp_path: Path) -> None:
    # a fresh folder: no ./profiles, so the README's default (the shipped reference) applies
    r = run_cli(*shlex.split(command)[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    actual = [ln.rstrip() for ln in r.stdout.splitlines()]
    missing = _in_order(expected, actual)
    assert missing is None, f"README line not printed (or out of order): {missing!r}\n--- actual:\n{r.stdout}"


def test_the_matcher_fails_on_a_changed_figure() -> None:
    actual = ["cycle        30.00 ms", "predicted    66.7 tok/s"]
    assert _in_order(["...", "predicted    66.7 tok/s"], actual) is None
    assert _in_order(["predicted    60.0 tok/s"], actual) == "predicted    60.0 tok/s"
    assert _in_order(["predicted    66.7 tok/s", "cycle        30.00 ms"], actual) == "cycle        30.00 ms"


def test_the_readme_says_how_to_reach_the_command_after_make_demo() -> None:
    # `make demo` installs into .venv; a bare `specmodel` is "command not found"
    text = (REPO / "README.md").read_text()
    first_use = text.index("$ specmodel ")
    say = text.index("source .venv/bin/activate")
    assert say < first_use and ".venv/bin/specmodel" in text[:first_use]


def _options(command: str) -> set[str]:
    r = run_cli(command, "--help")
    assert r.returncode == 0, r.stderr
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", r.stdout))


#: bare flags a page gives for another tool it describes (checked by hand: the tool has them)
OTHER_TOOLS_FLAGS = {"docs/ingest.md": ("--rounds", "--families")}  # benchmarks/bench_ingest_vs_hta.py


@pytest.mark.parametrize("page,command", [("docs/ingest.md", "ingest"), ("docs/profile.md", "profile"),
                                          ("docs/sglang.md", "sglang"), ("docs/drafter.md", "check-drafter")])
def test_a_command_page_names_only_flags_its_command_has(page: str, command: str) -> None:
    # a page naming `ingest --contexts N`, which does not exist, sends users to an error.
    # A bare `--flag` in backticks on a command's page is that command's flag.
    text = (REPO / page).read_text()
    bare = {f.split("=")[0] for m in re.findall(r"`(--[a-z][a-z0-9-]*[^`]*)`", text) for f in m.split()[0].split("/")}
    unknown = sorted(bare - _options(command) - {"--help"} - set(OTHER_TOOLS_FLAGS.get(page, ())))
    assert not unknown, f"{page} names {unknown}, not options of `specmodel {command}`"
