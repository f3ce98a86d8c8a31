"""The code says why, not when: no issue numbers or dates in specmodel/ (the history is git's)."""

from __future__ import annotations

import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "specmodel"
#: (a date followed by a time is an engine's log line quoted as a format example, not history)
HISTORY = re.compile(r"\bissue \d+|\b20\d\d-[01]\d-[0-3]\d\b(?! \d\d:\d\d)")


def test_no_issue_numbers_or_dates_in_the_package() -> None:
    hits = [f"{p.relative_to(PKG.parent)}:{i}: {ln.strip()[:80]}"
            for p in sorted(PKG.rglob("*.py")) + sorted(PKG.rglob("*.c"))
            for i, ln in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1) if HISTORY.search(ln)]
    assert hits == []
