"""``specmodel sglang --summarize``: the device timer's pages of each run directory
(``DIR/metrics/*.prom``, else ``DIR/metrics.prom``) into the hook's profile.

Per run: the costs per cycle between consecutive pages (:func:`specmodel.engines.sglang.devtimer.window`)
and over the whole run (first page to last), kept in ``source.details["engine_device_timer"]`` with
their clock; the notes compare them with the hook's rows at the same batch (two clocks on the same
forwards). Where the hook's rows carry no host work, the speculative run's host work per cycle from
``sglang:fwd_occupancy`` becomes the profile's per-cycle overhead (origin ``engine_device_timer``).
A page that is malformed, or that carries the timer without the counts it needs, is one line
(exit 2); a directory without pages (a run before the timer was kept) only gets a note.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from specmodel.engines.hook.records import METRICS_FILE
from specmodel.engines.prom import parse_page
from specmodel.engines.sglang import devtimer as dt
from specmodel.errors import SpecmodelError
from specmodel.io import read_bytes
from specmodel.limits import MAX_METRICS_PAGE_BYTES
from specmodel.schema.profile import Profile
from specmodel.units import ms

OVERHEAD_ORIGIN = f"{dt.CLOCK} (sglang:fwd_occupancy)"


def pages_of(d: Path) -> list[Path]:
    many = sorted((d / "metrics").glob("*.prom")) if (d / "metrics").is_dir() else []
    return many or ([d / METRICS_FILE] if (d / METRICS_FILE).is_file() else [])


def read_run(d: Path) -> tuple[list[dt.DevicePage], str | None]:
    """The run's device-timer pages in order, or (``[]``, why there are none)."""
    paths = pages_of(d)
    if not paths:
        return [], f"{d}: no /metrics page kept (a run before specmodel sglang kept them): no device timer"
    out: list[dt.DevicePage] = []
    for p in paths:
        raw = read_bytes(p, "a /metrics page", max_bytes=MAX_METRICS_PAGE_BYTES)
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise SpecmodelError(f"{p}: not UTF-8 text (not a /metrics page)") from None
        page = parse_page(text, str(p))
        if dt.has_timer(page, text):
            out.append(dt.from_page(page, str(p), declared=dt.declared(text)))
    if not out:
        return [], (f"{d}: its /metrics pages carry no {dt.SECONDS} (SGLang < 0.5.23, or the device timer "
                    "turned off): no device timer")
    if out[-1].decode_passes is None:
        raise SpecmodelError(f"{out[-1].where}: {dt.SECONDS} without {dt.PASSES}{{mode=decode_*}}: no count to "
                             "divide the device timer's seconds by")
    return out, None


def run_costs(pages: Sequence[dt.DevicePage]) -> tuple[dt.DeviceCosts | None, list[dt.DeviceCosts]]:
    """(first page -> last page, every consecutive pair that held a decode batch)."""
    wins = [w for a, b in zip(pages, pages[1:], strict=False) if isinstance(w := dt.window(a, b), dt.DeviceCosts)]
    whole = dt.window(pages[0], pages[-1]) if len(pages) > 1 else dt.window(None, pages[-1])
    return (whole if isinstance(whole, dt.DeviceCosts) else None), wins


def _hook_row(profile: Profile, kind: str, batch: float | None) -> Any:
    rows = profile.rows(kind)
    if not rows or batch is None:
        return None
    return min(rows, key=lambda r: abs(r.batch - batch))


def _fmt(x: float | None) -> str:
    return "unknown" if x is None else ms(x)


def with_device_timer(profile: Profile, dirs: Sequence[Path]) -> Profile:
    """``profile`` (the hook's summary) with the device timer's figures of ``dirs``."""
    runs: list[dict[str, Any]] = []
    notes: list[str] = []
    host: list[float] = []
    for d in map(Path, dirs):
        pages, why = read_run(d)
        if why is not None:
            notes.append(why)
            continue
        whole, wins = run_costs(pages)
        runs.append({"dir": str(d), "pages": len(pages), "whole": whole.to_dict() if whole else None,
                     "windows": [w.to_dict() for w in wins]})
        if whole is None:
            notes.append(f"{d}: device timer ({dt.CLOCK}): no decode batch between its first and last page")
            continue
        kind = "verify" if whole.speculative else "decode"
        own = whole.verify_s if whole.speculative else whole.decode_s
        row = _hook_row(profile, kind, whole.batch)
        hook = ""
        if row is not None and own is not None:
            apart = own / row.total_s - 1.0
            apart = 0.0 if abs(apart) < 5e-4 else apart  # no "-0.0 %"
            hook = (f"; the hook's {kind} row at batch {row.batch}: {ms(row.total_s)} "
                    f"({profile.source.details.get('clock', 'hook')}, {apart:+.1%} apart)")
        wanted = ("verify", "draft", "host") if whole.speculative else ("host",)
        unk = "; ".join(f"{k} unknown: {v}" for k, v in whole.unknown.items() if k in wanted)
        batch = f"{whole.batch:g}" if whole.batch is not None else "unknown"
        notes.append(f"{d}: device timer ({dt.CLOCK}) over {whole.cycles:.0f} decode batches at batch "
                     f"{batch}: {kind} {_fmt(own)} per cycle"
                     + (f", draft {_fmt(whole.draft_s)} per cycle" if whole.speculative else "")
                     + f", host work {_fmt(whole.host_s)} per cycle{hook}" + (f" ({unk})" if unk else ""))
        if whole.speculative:
            host += [w.host_s for w in wins if w.speculative and w.host_s is not None]
            if whole.host_s is not None and not wins:
                host.append(whole.host_s)
    if not runs:
        return replace(profile, notes=profile.notes + tuple(notes))
    details = {**profile.source.details,
               dt.CLOCK: {"clock": dt.CLOCK, "categories": {c: {"holds": h, "misses": m} for c, (h, m) in dt.CATEGORIES.items()},
                          "not_seen": dt.NOT_SEEN, "runs": runs}}
    src = replace(profile.source, details=details)
    oh = profile.overhead_s
    if host and not src.host_work_in_rows and oh == 0.0 and "overhead" not in src.origins:
        oh = statistics.median(host)
        src = src.with_origins({"overhead": OVERHEAD_ORIGIN})
        notes.append(f"host work per cycle {ms(oh)} from the device timer's GPU occupancy ({OVERHEAD_ORIGIN}: "
                     "wall time the timed forwards did not fill, an upper bound on the host work alone)")
    return replace(profile, source=src, overhead_s=oh, notes=profile.notes + tuple(notes))
