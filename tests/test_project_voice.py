"""The project's text says what the tool does and how well, never who worked on it when.

README.md, docs/**/*.md, specmodel/**/*.py and tests/**/*.py (not tests/data/: recorded engine
output and stand-in engine sources) carry no work-diary words and no tracker numbers: a test names
the behaviour it guards, a doc states the fact. Technical uses of the word are allowed where the
line shows which one it is (a POSIX process group leader, an HTTP client, a pytest fixture scope).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: the diary word, built so that this file's own text does not contain it
WORD = "sess" + "ion"
#: the word as a word: not inside an identifier such as ``start_new_<word>``
DIARY = re.compile(rf"(?<![\w.]){WORD}s?\b", re.IGNORECASE)
#: a tracker reference: the word, then a number (built as WORD is)
TRACKER_WORD = "iss" + "ue"
TRACKER = re.compile(rf"\b{TRACKER_WORD}s?\s*#?\s*[0-9]", re.IGNORECASE)
#: lines that use the word technically, and say so on the line
ALLOWED = re.compile(
    rf"start_new_{WORD}|setsid|requests\.{WORD}|ClientSession|scope=[\"']{WORD}[\"']",
    re.IGNORECASE)

SCOPES = {
    "README.md": ["README.md"],
    "docs": ["docs/**/*.md"],
    "specmodel": ["specmodel/**/*.py"],
    "tests": ["tests/**/*.py"],
}


def offending_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for each line that narrates history or cites a tracker number."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if TRACKER.search(line) or (DIARY.search(line) and not ALLOWED.search(line)):
            out.append((n, line.strip()))
    return out


def scope_files(globs: list[str]) -> list[Path]:
    files = set()
    for g in globs:
        files.update(p for p in REPO.glob(g) if p.is_file())
    data = REPO / "tests" / "data"
    return sorted(p for p in files if data not in p.parents)


@pytest.mark.parametrize("scope", list(SCOPES))
def test_no_diary_words_or_tracker_numbers(scope: str) -> None:
    files = scope_files(SCOPES[scope])
    assert files, f"{scope}: nothing to scan"
    found = [f"{p.relative_to(REPO)}:{n}: {line[:120]}"
             for p in files for n, line in offending_lines(p.read_text(encoding="utf-8"))]
    assert not found, ("text that narrates the project's history instead of stating the behaviour "
                       f"({len(found)} lines):\n" + "\n".join(found))


@pytest.mark.parametrize("line, flagged", [
    (f"measured in this {WORD} on a loaded box", True),
    (f"the {WORD}s before that", True),
    (f"This {WORD.capitalize()} (the fifth)", True),
    (f"# {TRACKER_WORD} 18 item 4: the idle window is left out", True),
    (f'"""{TRACKER_WORD.capitalize()} 13: every figure adds up."""', True),
    (f"the rule ({TRACKER_WORD}s 17, 18)", True),
    (f"fixed in {TRACKER_WORD} #4", True),
    (f"Popen(cmd, start_new_{WORD}=True)", False),
    ("os.setsid()  # own process group", False),
    (f"@pytest.fixture(scope=\"{WORD}\")", False),
    (f"async with aiohttp.Client{WORD.capitalize()}() as s:", False),
    (f"s = requests.{WORD.capitalize()}()", False),
    (f"the engine's {WORD}_id field", False),
    (f"kernels that {TRACKER_WORD} an all-reduce", False),
    ("a verify cost nobody measured is named where it is shown", False),
])
def test_the_check_flags_history_and_allows_technical_uses(line: str, flagged: bool) -> None:
    assert bool(offending_lines(line)) is flagged, line


def test_data_and_stand_in_sources_are_not_scanned() -> None:
    data = REPO / "tests" / "data"
    assert not any(data in p.parents for p in scope_files(SCOPES["tests"]))
    assert Path(__file__).resolve() in scope_files(SCOPES["tests"])
