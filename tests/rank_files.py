"""The hooks' per-process rank files (``rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl``; an older hook's
``rank<tp>.jsonl`` too, so a test run against it fails on what it checks), found by TP rank."""

from __future__ import annotations

from pathlib import Path


def rank_files(out: Path, rank: int | str) -> list[Path]:
    return sorted([*out.glob(f"rank{rank}.jsonl"), *out.glob(f"rank{rank}-*.jsonl")]) if out.is_dir() else []


def rank_file(out: Path, rank: int | str) -> Path:
    """The one file TP rank ``rank`` wrote under ``out`` (a test's single process)."""
    found = rank_files(out, rank)
    assert len(found) == 1, (out, found)
    return found[0]
