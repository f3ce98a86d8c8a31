"""Which profile a command uses: ``--profile`` as a path or a NAME the tool prints, and the default
when none is given (the one measured profile under ./profiles, else the shipped reference)."""

from __future__ import annotations

import re
from pathlib import Path

from specmodel.errors import FieldError, field_name
from specmodel.schema.profile import resolve_profile_path
from specmodel.schema.source import OWN_BOX_KINDS, read_source_kind

REFERENCE_PROFILE = "kimi-k2.5-int4-tp8-pcie"
PROFILES_DIR = Path("profiles")
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def reference_profile_path() -> Path:
    """The shipped reference profile (package data; ``profiles/`` links to it in the repo): Kimi-K2.5
    INT4 on 8x RTX PRO 6000 over PCIe, derived from a published write-up, not measured by this tool."""
    return Path(__file__).resolve().parent.parent / "reference" / REFERENCE_PROFILE / "profile.json"


def find_default_profile() -> tuple[Path, str]:
    """The one measured/ingested profile under ./profiles, else the shipped reference.

    Deterministic: with more than one candidate the user must choose (an ``ingest`` or
    ``profile`` run in the same folder must not silently change what a bare command uses).
    Returns (path, note) where the note tells the user which one and why.
    """
    candidates: list[Path] = []
    kinds: dict[Path, str] = {}
    if PROFILES_DIR.is_dir():
        for pj in sorted(PROFILES_DIR.glob("*/profile.json")):
            kind = read_source_kind(pj)
            if kind in OWN_BOX_KINDS:
                candidates.append(pj)
                kinds[pj] = str(kind)
    if len(candidates) > 1:
        names = ", ".join(str(c.parent) for c in candidates)
        raise FieldError("profile", f"{len(candidates)} measured profiles under {PROFILES_DIR}/ ({names}); "
                                    "pass {profile} to choose one")
    if candidates:
        path = candidates[0]
        return path, (f"using your {kinds[path]} profile {path.parent} (the only measured, ingested or derived "
                      f"profile under {PROFILES_DIR}/; pass {field_name('profile')} to choose)")
    return reference_profile_path(), (
        "using the shipped reference profile (derived from a published write-up, not measured by this tool); "
        f"run `specmodel profile {field_name('tp')} N` to measure your own"
    )


def find_profile(arg: str | Path) -> Path:
    """``--profile``: a path (profile.json or its directory), or a NAME as the tool prints it,
    looked up as ``./profiles/NAME`` then among the shipped references."""
    p = Path(arg)
    if p.exists() or not PROFILE_NAME.match(str(arg)):
        return resolve_profile_path(p)
    for cand in (PROFILES_DIR / str(arg), reference_profile_path().parent.parent / str(arg)):
        if (cand / "profile.json").is_file():
            return cand / "profile.json"
    known = sorted({pj.parent.name for d in (PROFILES_DIR, reference_profile_path().parent.parent) if d.is_dir()
                    for pj in d.glob("*/profile.json")})
    raise FieldError("profile", f"{arg}: file not found, and no profile of that name under {PROFILES_DIR}/ or "
                                f"the shipped references (known: {', '.join(known) or 'none'})")
