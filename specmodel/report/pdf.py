"""Draw a :class:`ReportContent` as a vector PDF (and optionally one PNG per page).

Only this module imports matplotlib, and only when a report is rendered, so ``predict``
never pays for it. Figures are built with the object API (no pyplot state); the Agg
backend is selected here, nothing is ever shown on screen. One module: every page is drawn with
the same few layout helpers behind that one lazy import, one function per page.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
import textwrap
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specmodel.errors import field_name
from specmodel.io import atomic_write_bytes
from specmodel.report.text import cycle_allreduce_text, short_tokens, speedup_text, tokens_per_step_text
from specmodel.report.view import ReportContent
from specmodel.units import alpha_beta, ms, to_ms, to_us, us

PAGE_SIZE_IN = (11.69, 8.27)  # A4 landscape
VERDICT_COLORS = {"GO": "#1a7f37", "NO-GO": "#c62828", "MARGINAL": "#b26a00", "BLOCKED": "#c62828",
                  "INCONSISTENT": "#c62828"}
EXTRAPOLATED_COLOR = "#d50000"  # anything resting on costs or acceptance nobody measured
C_AR, C_COMP, C_OTHER, C_DRAFT, C_OVER = "#d62728", "#1f77b4", "#9e9e9e", "#ff7f0e", "#9467bd"


def _mpl() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["pdf.fonttype"] = 42  # TrueType: the PDF's text is extractable (and searchable)
    matplotlib.rcParams["ps.fonttype"] = 42
    matplotlib.rcParams["font.size"] = 10
    matplotlib.rcParams["axes.grid"] = True
    matplotlib.rcParams["grid.alpha"] = 0.3
    return matplotlib


def _figure() -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=PAGE_SIZE_IN)


def _bytes(b: float) -> str:
    for unit, f in (("MiB", 2**20), ("KiB", 2**10)):
        if b >= f:
            return f"{b / f:.3g} {unit}"
    return f"{b:.0f} B"


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=True, break_on_hyphens=False)) or text


_LINE_SPACING = 1.25  # baseline-to-baseline distance in font sizes (matplotlib draws multi-line text at 1.2)
FOOTER_TOP = 0.045  # figure fraction above which every page's content stays (footer below)


def _text_width_in(text: str, size: float, weight: str = "normal") -> float:
    """Rendered width of one line of ``text`` in inches (matplotlib's own glyph metrics, no renderer)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    w, _, _ = TextToPath().get_text_width_height_descent(text, FontProperties(size=size, weight=weight), ismath=False)
    return float(w) / 72.0 * 1.04  # hinted rasters run ~1.5 % wider than the outlines: keep a margin


def _fit_lines(text: str, width_in: float, size: float, weight: str = "normal") -> list[str]:
    """Greedy word wrap by measured width; a word wider than the line is cut (paths, commands)."""
    out: list[str] = []
    for para in text.split("\n"):
        line = ""
        for word in para.split(" "):
            cand = word if not line else f"{line} {word}"
            if _text_width_in(cand, size, weight) <= width_in:
                line = cand
                continue
            if line:
                out.append(line)
            line = word
            while _text_width_in(line, size, weight) > width_in and len(line) > 1:
                cut = len(line) - 1
                while cut > 1 and _text_width_in(line[:cut], size, weight) > width_in:
                    cut = max(1, int(cut * 0.9)) if cut > 20 else cut - 1
                out.append(line[:cut])
                line = line[cut:]
        out.append(line)
    return out


def _line_h(size: float) -> float:
    """One text line's height as a figure fraction."""
    return size * _LINE_SPACING / 72.0 / PAGE_SIZE_IN[1]


def _flow(fig: Any, x: float, y: float, width: float, items: list[str], size: float, bottom: float, *,
          bullet: str = "- ", gap: float = 0.35, color: str = "black", more: str = "see the JSON report") -> float:
    """Write ``items`` top-down from ``y`` inside [x, x + width] (figure fractions), wrapped by measured
    width, never below ``bottom``: what does not fit is counted in one last line. Returns the next y."""
    width_in = width * PAGE_SIZE_IN[0]
    lh = _line_h(size)
    for i, item in enumerate(items):
        lines = _fit_lines(bullet + item, width_in, size)
        lines = [lines[0]] + [" " * len(bullet) + ln for ln in lines[1:]]
        lines = [lines[0]] + _fit_lines("\n".join(lines[1:]), width_in, size) if len(lines) > 1 else lines
        need = lh * len(lines)
        rest = len(items) - i
        if y - need < bottom + (lh * (1 + gap) if rest > 1 else 0.0):
            if y - lh >= bottom:
                fig.text(x, y, f"... {rest} more ({more})", fontsize=size, va="top", color="#555555")
                y -= lh
            return y
        fig.text(x, y, "\n".join(lines), fontsize=size, va="top", color=color, linespacing=_LINE_SPACING)
        y -= need + gap * lh
    return y


def _frame(fig: Any, c: ReportContent, n: int, title: str, when: str) -> None:
    total = len(c.pages)
    fig.text(0.04, 0.955, title, fontsize=16, weight="bold", va="top")
    fig.text(0.96, 0.955, f"{c.verdict}", fontsize=14, weight="bold", ha="right", va="top",
             color=VERDICT_COLORS.get(c.verdict, "black"))
    fig.text(0.04, 0.02, f"specmodel {c.version} | {c.prediction.source.profile_name} | {when}", fontsize=7, color="#555555")
    fig.text(0.96, 0.02, f"page {n}/{total}", fontsize=7, color="#555555", ha="right")


# --- pages --------------------------------------------------------------------------------------------------


def page_verdict(c: ReportContent) -> Any:
    p = c.prediction
    fig = _figure()
    fig.text(0.04, 0.955, c.title, fontsize=14, weight="bold", va="top")
    fig.text(0.04, 0.915, f"{p.tp_label}, batch {p.point.batch}, steps {p.point.steps}, topk {p.point.topk}, "
             f"draft tokens {p.point.num_draft_tokens}", fontsize=10, va="top", color="#333333")
    fig.text(0.04, 0.88, c.verdict, fontsize=64 if len(c.verdict) <= 8 else 40, weight="bold", va="top",
             color=VERDICT_COLORS.get(c.verdict, "black"))
    if p.verdict_label != p.outcome.verdict and not c.blocked_by and p.consistent:
        # a verdict from costs nobody measured here (or another box's) is qualified, in red, next to the verdict
        ext = p.verdict_label[len(p.outcome.verdict):].strip()
        fig.text(0.42, 0.86, _wrap(ext, 70), fontsize=10, weight="bold", va="top", color=EXTRAPOLATED_COLOR)
    if p.consistent:
        _flow(fig, 0.04, 0.755, 0.92, [c.verdict_reason], 10, 0.71, bullet="")
    else:  # the contradiction is the page's message: it gets the room to be read whole
        _flow(fig, 0.04, 0.80, 0.92, [c.verdict_reason], 9, 0.695, bullet="")

    # provenance first, from the footer up: its height decides how far the columns may run
    prov_size = 6.5
    key_w_in = 0.12 * PAGE_SIZE_IN[0]
    val_w = 0.96 - 0.17
    prov = []
    for k, v in c.provenance:
        vl = _fit_lines(str(v), val_w * PAGE_SIZE_IN[0], prov_size)
        if len(vl) > 2:  # a long value (a command line) keeps two lines and says where the rest is
            vl = vl[:1] + _fit_lines(vl[1], val_w * PAGE_SIZE_IN[0] - _text_width_in(" ... (in full in the JSON)",
                                                                                      prov_size), prov_size)[:1]
            vl[1] += " ... (in full in the JSON)"
        prov.append((f"{k}:", vl))
    prov_lines = sum(len(v) for _, v in prov)
    lh = _line_h(prov_size)
    prov_top = FOOTER_TOP + 0.01 + lh * prov_lines + _line_h(10) * 1.3
    fig.text(0.04, prov_top, "Provenance", fontsize=10, weight="bold", va="top")
    yp = prov_top - _line_h(10) * 1.3
    for k, vlines in prov:
        fig.text(0.05, yp, "\n".join(_fit_lines(k, key_w_in, prov_size)[:1]), fontsize=prov_size, va="top",
                 color="#333333")
        fig.text(0.17, yp, "\n".join(vlines), fontsize=prov_size, va="top", linespacing=_LINE_SPACING)
        yp -= lh * len(vlines)
    bottom = prov_top + 0.015

    figures = [
        ("Predicted (total)", f"{p.figures.tokens_per_s:.1f} tok/s ({p.tokens_per_s_per_request:.1f}/req; "
                              f"95% {p.figures.tokens_per_s_low:.1f}-{p.figures.tokens_per_s_high:.1f})"),
        ("Baseline (total)", f"{p.figures.baseline_tokens_per_s:.1f} tok/s ({p.baseline_tokens_per_s_per_request:.1f}/req)"),
        ("Context", f"{p.point.context_tokens:.0f} KV tokens/request" + ("" if p.point.context_source == "requested"
                                                                    else " (smallest measured)")),
        ("Speedup", speedup_text(p)),
        ("Break-even accept length", tokens_per_step_text(p.figures.break_even_accept_tokens)
         + ("" if p.figures.break_even_reachable else f" (unreachable: max {p.point.steps + 1})")),
        ("Drafter accept length", f"{p.accept.mean_tokens:.2f} tokens/step ({p.accept.mean_drafts:.2f} drafts)"),
        ("Margin", (f"{p.figures.margin_tokens:+.2f} tokens/step" if math.isfinite(p.figures.margin_tokens) else "none")),
        ("P(speedup > 1)", p.p_text),
        ("+20% needs", tokens_per_step_text(p.figures.accept_for_plus20_tokens)),
        ("Cycle", cycle_allreduce_text(p)),
    ]
    y = 0.70
    fig.text(0.04, y, "Key figures", fontsize=12, weight="bold", va="top")
    y -= 0.005
    row_h = _line_h(10) * 1.1
    for label, value in figures:
        y -= row_h
        fig.text(0.05, y, label, fontsize=10, va="top", color="#333333")
        fig.text(0.25, y, value, fontsize=10, va="top", weight="bold")
    # the label grows with what the band holds (an accept log's drift, the cost interval): wrapped to
    # the left column, which ends where the assumptions begin (x = 0.56)
    band_lines = _fit_lines(f"band and P: {p.band_label}", fig.get_size_inches()[0] * 0.49, 8)
    fig.text(0.05, y - row_h * 1.0, "\n".join(band_lines), fontsize=8, va="top", color="#555555",
             linespacing=_LINE_SPACING)
    y -= row_h * 2.3 + _line_h(8) * _LINE_SPACING * (len(band_lines) - 1)

    opt = c.optimizer
    fig.text(0.04, y, "Recommendation (model, page 6)", fontsize=12, weight="bold", va="top")
    y -= _line_h(12) * 1.2
    recs = [opt.recommendation or opt.best.sglang_flags()]
    m = opt.best_measured_topk
    if not opt.recommends_off and m.key != opt.best.key and m.speedup >= 1.0:
        recs.append(f"best with topk {m.topk} (as measured): steps {m.steps}, draft tokens {m.num_draft_tokens} -> "
                    f"{m.tokens_per_s:.1f} tok/s, {m.speedup:.2f}x")
    if not opt.recommends_off and opt.best.accept_extrapolated and opt.best.topk > 1:
        recs[0] += " (tree acceptance extrapolated)"
    if opt.recommended is None:  # nothing measured here: no recommendation, say so instead of "best"
        recs = [opt.recommendation]
    recs.append(opt.limit_text())
    _flow(fig, 0.05, y, 0.46, recs, 9, bottom, bullet="")

    ya = 0.70
    fig.text(0.56, ya, "Assumptions", fontsize=12, weight="bold", va="top")
    ya -= _line_h(12) * 1.3
    items = [f"to remove the qualification, {m}" for m in p.to_measure] + list(c.warnings)
    if c.drafter is not None:
        items.insert(0, f"drafter check: {c.drafter.status} (page {len(c.pages)})")
    # warnings get the room they need first; assumptions take what is left above them
    warn_h = 0.0
    if items:
        warn_h = _line_h(12) * 1.3 + sum(_line_h(8.5) * (len(_fit_lines("- " + w, 0.40 * PAGE_SIZE_IN[0], 8.5)) + 0.35)
                                         for w in items)
        warn_h = min(warn_h, (ya - bottom) * 0.6)
    ya = _flow(fig, 0.565, ya, 0.40, list(c.assumptions), 8.5, bottom + warn_h, more="all in the JSON report")
    if items:
        ya -= 0.01
        fig.text(0.56, ya, "Warnings", fontsize=12, weight="bold", va="top", color="#b26a00")
        ya -= _line_h(12) * 1.3
        _flow(fig, 0.565, ya, 0.40, items, 8.5, bottom, more="all in the JSON report")
    return fig


def page_curve(c: ReportContent) -> Any:
    cv = c.curve
    p = c.prediction
    fig = _figure()
    ax = fig.add_axes((0.08, 0.12, 0.84, 0.72))
    ax.plot(cv.accept_grid, cv.tokens_per_s, color="#1f77b4", lw=2.2,
            label=f"speculative, TP{p.source.tp} B={p.point.batch} steps {p.point.steps} topk {p.point.topk} ndt {p.point.num_draft_tokens}")
    ax.axhline(cv.baseline_tokens_per_s, color="black", lw=1.5, ls="--",
               label=f"baseline {cv.baseline_tokens_per_s:.1f} tok/s")
    if math.isfinite(cv.break_even_tokens):  # (a proposer that proposes nothing breaks even at no accept length)
        ax.axvline(cv.break_even_tokens, color="#c62828", lw=1.5, label=f"break-even {cv.break_even_tokens:.2f}")
    if math.isfinite(cv.plus20_tokens):
        ax.axvline(cv.plus20_tokens, color="#c62828", lw=1, ls=":", label=f"+20% at {cv.plus20_tokens:.2f}")
    ax.axvline(cv.max_tokens, color="#777777", lw=1, ls="-.", label=f"max tokens/step (steps+1) = {cv.max_tokens}")
    if cv.accept_grid[-1] > cv.max_tokens:
        ax.axvspan(cv.max_tokens, cv.accept_grid[-1] + 0.3, facecolor="none", edgecolor="#bbbbbb", hatch="//", lw=0,
                   label=f"hatched: unreachable with steps {cv.max_tokens - 1}")
    if cv.ceiling_tokens is not None:
        ax.axvline(cv.ceiling_tokens, color="#9467bd", lw=2, ls="--",
                   label=f"drafter vocab ceiling {cv.ceiling_tokens:.2f}")
    ax.fill_between(cv.accept_grid, cv.tokens_per_s, cv.baseline_tokens_per_s,
                    where=[t < cv.baseline_tokens_per_s for t in cv.tokens_per_s], color="#c62828", alpha=0.08)
    ax.fill_between(cv.accept_grid, cv.tokens_per_s, cv.baseline_tokens_per_s,
                    where=[t >= cv.baseline_tokens_per_s for t in cv.tokens_per_s], color="#1a7f37", alpha=0.08)
    ax.plot([cv.accept_mean_tokens], [cv.predicted_tokens_per_s], "o", color="black", ms=9, zorder=5,
            label=f"this drafter: {cv.accept_mean_tokens:.2f} -> {cv.predicted_tokens_per_s:.1f} tok/s")
    ax.set_xlabel("accept length (tokens per verify step, bonus included)")
    ax.set_ylabel("tokens / s (all requests)")
    ax.set_xlim(0.7, cv.accept_grid[-1] + 0.3)
    ax.set_ylim(0, max(max(cv.tokens_per_s), cv.baseline_tokens_per_s) * 1.15)
    ax2 = ax.twinx()
    ks = list(range(1, len(cv.accept_probs) + 1))
    ax2.bar(ks, cv.accept_probs, width=0.35, color="#ff7f0e", alpha=0.45, label="P(A = j): drafter distribution")
    ax2.set_ylim(0, max(cv.accept_probs) * 3.2 if max(cv.accept_probs) > 0 else 1)
    ax2.set_ylabel("P(accept length = j)", color="#ff7f0e")
    ax2.grid(False)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8.5, framealpha=0.9)
    return fig


def page_breakdown(c: ReportContent) -> Any:
    bd = c.breakdown
    fig = _figure()
    colors = {"all-reduce": C_AR, "compute + other": C_COMP, "verify all-reduce": C_AR, "verify compute": C_COMP,
              "verify other": C_OTHER, "draft": C_DRAFT, "overhead": C_OVER,
              "decode step (all-reduce split unknown)": C_COMP, "verify (all-reduce split unknown)": C_COMP}
    hatch = {"all-reduce": "//", "compute + other": "//"}
    ax = fig.add_axes((0.08, 0.12, 0.50, 0.72))
    for x, segs in ((0, bd.baseline), (1, bd.cycle)):
        bottom = 0.0
        for s in segs:
            h_ms = to_ms(s.seconds)
            ax.bar(x, h_ms, bottom=bottom, color=colors.get(s.label, C_OTHER), hatch=hatch.get(s.label) if x == 0 else None,
                   edgecolor="white", width=0.55, label=s.label if x == 1 or s.label == "compute + other" else None)
            if s.seconds > 0.03 * sum(t.seconds for t in bd.cycle):
                ax.text(x, bottom + h_ms / 2, f"{s.label}\n{ms(s.seconds)}", ha="center", va="center", fontsize=8,
                        color="white", weight="bold")
            bottom += h_ms
        ax.text(x, bottom, f"{bottom:.2f} ms", ha="center", va="bottom", fontsize=10, weight="bold")
    ax.set_xticks([0, 1], ["baseline decode step", "speculative cycle"])
    ax.set_ylabel("milliseconds")
    extrap = [w for w in c.prediction.outcome.warnings if "extrapolated" in w]
    ax.set_title("one step vs one cycle" + ("\n(some costs extrapolated beyond the measured range)" if extrap else ""),
                 fontsize=11)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(0, to_ms(sum(s.seconds for s in bd.cycle)) * 1.15 + 1e-9)

    ax2 = fig.add_axes((0.68, 0.12, 0.26, 0.72))
    vals = [to_ms(bd.baseline_per_token_s), to_ms(bd.cycle_per_token_s)]
    ax2.bar([0, 1], vals, color=["#555555", "#1f77b4"], width=0.55)
    for x, v in enumerate(vals):
        ax2.text(x, v, f"{v:.2f} ms", ha="center", va="bottom", fontsize=10, weight="bold")
    ax2.set_xticks([0, 1], ["baseline", f"speculative\n(cycle / {bd.accept_mean_tokens:.2f})"])
    ax2.set_ylabel("milliseconds per emitted token (per request)")
    ax2.set_title("per emitted token", fontsize=11)
    ax2.set_ylim(0, max(vals) * 1.2 + 1e-9)
    return fig


def page_allreduce(c: ReportContent) -> Any:
    ar = c.allreduce
    fig = _figure()
    if ar.unavailable:  # no invented curves under a TP label the profile does not have
        fig.text(0.04, 0.90, "All-reduce", fontsize=14, weight="bold", va="top")
        fig.text(0.04, 0.80, "N/A", fontsize=40, weight="bold", va="top", color="#555555")
        _flow(fig, 0.04, 0.66, 0.92, [ar.unavailable.removeprefix("N/A: ")], 11, 0.1, bullet="")
        return fig
    ax = fig.add_axes((0.08, 0.12, 0.62, 0.72))
    xs = [x for x, _ in ar.fit_curve]
    ax.plot(xs, [to_us(t) for _, t in ar.fit_curve], color="#1f77b4", lw=2,
            label=f"alpha-beta {ar.fit_algorithm} model, TP{max(ar.tp, 2)}")
    ax.plot(xs, [to_us(t) for _, t in ar.oneshot_curve], color="#1f77b4", lw=1.2, ls="--",
            label="one-shot (custom all-reduce) model")
    by_tp: dict[int, list[tuple[float, float]]] = {}
    for tp, nbytes, lat in ar.points:
        by_tp.setdefault(tp, []).append((float(nbytes), lat))
    for tp, pts in sorted(by_tp.items()):
        ax.plot([x for x, _ in pts], [to_us(t) for _, t in pts], "o", ms=6, label=f"measured all-reduce, TP{tp}")
    kinds: dict[str, list[tuple[float, float]]] = {}
    for kind, row_bytes, per_call in ar.row_calls:
        kinds.setdefault(kind, []).append((row_bytes, per_call))
    markers = {"decode": "s", "verify": "^", "draft": "v", "draft_extend": "D", "extend": "P"}
    for kind, pts in sorted(kinds.items()):
        ax.plot([x for x, _ in pts], [to_us(t) for _, t in pts], markers.get(kind, "x"), ms=6, mfc="none",
                label=f"{kind} rows: all-reduce time per call (incl. waiting)")
    at: dict[float, list[str]] = {}
    for s in ar.sizes:
        at.setdefault(s.msg_bytes, []).append(s.label)
    for i, (size, names) in enumerate(sorted(at.items())):
        ax.axvline(size, color=C_AR if "verify" in names else "#555555", lw=1, ls=":")
        ax.text(size, 0.98 - 0.08 * i, " " + " = ".join(names) + f"\n {_bytes(size)}", transform=ax.get_xaxis_transform(),
                fontsize=8, va="top", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    measured = [float(b) for _, b, _ in ar.points] + [b for _, b, _ in ar.row_calls]
    if measured and xs:
        # the fit is drawn beyond what was measured: hatch those sizes
        lo, hi = min(measured), max(measured)
        for a, b in ((xs[0], lo), (hi, xs[-1])):
            if b > a:
                ax.axvspan(a, b, facecolor="none", edgecolor="#bbbbbb", hatch="//", lw=0)
        ax.plot([], [], color="#bbbbbb", lw=6, alpha=0.5, label="hatched: beyond the measured sizes (fit only)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("latency per all-reduce (us)")
    ax.legend(loc="lower right", fontsize=8)
    lines = [f"TP {ar.tp}", *alpha_beta(ar.fit_alpha_s, ar.fit_beta_bytes_per_s).split(", "),
             f"fit: {ar.fit_origin}", "", "at this operating point:"]
    for s in ar.sizes:
        per = f", {us(s.per_call_s, 1)}/call (model)" if s.per_call_s is not None else ""
        lines.append(f"{s.label}: {s.tokens} tokens, {_bytes(s.msg_bytes)}{per}")
    if not ar.sizes:
        lines.append("message sizes unknown (no message bytes or hidden size in the profile)")
    if not ar.points:
        lines += ["", "no all-reduce sweep in this profile:", "the curve is the fit alone"]
    fig.text(0.73, 0.84, "\n".join(_wrap(x, 44) for x in lines), fontsize=9, va="top")
    return fig


def page_whatif(c: ReportContent) -> Any:
    fig = _figure()
    ax_t = fig.add_axes((0.04, 0.60, 0.92, 0.28))
    ax_t.axis("off")
    head = ["what-if", "baseline tok/s", "spec tok/s", "speedup", "break-even", "cycle", "verdict"]
    cells = [[w.label, f"{w.baseline_tokens_per_s:.1f}", f"{w.tokens_per_s:.1f}", f"{w.speedup:.2f}x",
              short_tokens(w.break_even_accept_tokens), ms(w.cycle_s), w.verdict] if not w.unavailable else
             [w.label, "-", "-", "-", "-", "-", "N/A"] for w in c.whatifs]
    tab = ax_t.table(cellText=cells, colLabels=head, loc="upper center", cellLoc="center",
                     colWidths=[0.34, 0.11, 0.11, 0.09, 0.1, 0.12, 0.09])
    tab.auto_set_font_size(False)
    tab.set_fontsize(9)
    tab.scale(1, 1.45)
    for (r, col), cell in tab.get_celld().items():
        if r == 0:
            cell.set_text_props(weight="bold")
        elif col == 6:
            cell.set_text_props(color=VERDICT_COLORS.get(cells[r - 1][6], "#555555"), weight="bold")
    notes = [f"{w.label}: " + "; ".join(((w.unavailable,) if w.unavailable else ()) + w.assumptions)
             for w in c.whatifs if w.assumptions or w.unavailable]
    _flow(fig, 0.04, 0.885 - 0.037 * (len(cells) + 1), 0.92, notes, 7, 0.49, bullet="", gap=0.1)

    avail = [w for w in c.whatifs if not w.unavailable]
    ax = fig.add_axes((0.21, 0.08, 0.28, 0.34))
    labels = [w.label for w in avail][::-1]
    ys = list(range(len(labels)))
    ax.barh([y + 0.2 for y in ys], [w.baseline_tokens_per_s for w in avail][::-1], height=0.38,
            color="#9e9e9e", label="baseline")
    unknown = [w.memory.startswith("unknown") for w in avail][::-1]
    ax.barh([y - 0.2 for y in ys], [w.tokens_per_s for w in avail][::-1], height=0.38,
            color=["#ffffff" if u else "#1f77b4" for u in unknown], edgecolor="#1f77b4",
            hatch=["//" if u else "" for u in unknown], label="speculative (hatched: memory fit unknown)")
    ax.set_yticks(ys, labels, fontsize=7.5)
    ax.set_xlabel("tokens / s")
    ax.legend(fontsize=7, loc="best")
    off = [w.label for w in c.whatifs if w.unavailable]
    ax.set_title("tok/s per what-if" + (f"\n({len(off)} not available on this box: no bar)" if off else ""), fontsize=9)

    ax2 = fig.add_axes((0.57, 0.08, 0.38, 0.34))
    bs = [r.batch for r in c.batch_sweep]
    ax2.plot(bs, [r.speedup for r in c.batch_sweep], "o-", color="#1f77b4", label="speedup")
    ext = [r.batch for r in c.batch_sweep if r.extrapolated]
    if ext:
        # beyond the measured costs the curve is the model's extrapolation: hatch that region
        ax2.axvspan(min(ext) / 1.25, max(bs) * 1.25, facecolor="none", edgecolor="#999999", hatch="//", lw=0,
                    label="costs extrapolated")
    ax2.axhline(1.0, color="#c62828", lw=1, ls="--", label="break-even (1.0x)")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(bs, [str(b) for b in bs])
    ax2.set_xlim(min(bs) / 1.25, max(bs) * 1.25)
    ax2.set_xlabel("batch (concurrent requests)")
    ax2.set_ylabel("speedup")
    stop = c.stop_paying_batch
    title = f"stops paying at batch {stop}" if stop is not None else "pays at every batch swept"
    if stop is not None and stop in ext:
        title += " (extrapolated)"
    elif ext:
        title += f" (beyond batch {max(b for b in bs if b not in ext)} extrapolated)" if len(ext) < len(bs) else \
            " (all extrapolated)"
    if c.batch_sweep and c.batch_sweep[0].speedup < 1.0:
        title = "does not pay at any batch swept"
    ax2.set_title(f"batch sweep (same accept length):\n{title}", fontsize=9)
    ax2.legend(fontsize=7)
    return fig


def page_recommendation(c: ReportContent) -> Any:
    o = c.optimizer
    fig = _figure()
    b, d, m = o.best, o.default, o.best_measured_topk
    lines = [
        f"{'Best' if o.recommended is not None else 'Default (not measured here)'} at batch {o.batch}: "
        f"steps {b.steps}, topk {b.topk}, draft tokens {b.num_draft_tokens} -> "
        f"{b.tokens_per_s:.1f} tok/s, speedup {b.speedup:.2f}x, E[A] {b.accept_tokens:.2f} "
        f"({o.gain:.2f}x the default's {d.tokens_per_s:.1f} tok/s)",
        f"    SGLang: {b.sglang_flags()}",
        f"Best with topk {m.topk} (the shape the acceptance was measured at): steps {m.steps}, draft tokens "
        f"{m.num_draft_tokens} -> {m.tokens_per_s:.1f} tok/s, speedup {m.speedup:.2f}x",
        f"Default: steps {d.steps}, topk {d.topk}, draft tokens {d.num_draft_tokens} -> {d.tokens_per_s:.1f} tok/s "
        f"(E[A] {d.accept_tokens:.2f} in the model)",
        f"Batch limit: {o.limit_text()}",
    ]
    lines.insert(0, f"Recommendation: {o.recommendation}")
    if o.recommended is None:
        lines.insert(1, "    (no configuration has measured costs and acceptance: the rows below are extrapolations, listed only)")
    _flow(fig, 0.04, 0.90, 0.92, lines, 9.5, 0.735, bullet="", gap=0.05)
    acc = [f"acceptance: {o.accept_source}"] + list(o.accept_notes) + [
        "trees: sibling j accepted with c((1-c)rho)^(j-1), rho = 0.5 (Sequoia positional acceptance, correlated siblings)",
        f"evaluated {o.evaluated} configurations: steps 1-8, topk 1/2/4/8, draft tokens 2..topk+(steps-1)*topk^2+1 (at most 64 beyond steps*topk+1)"]
    _flow(fig, 0.04, 0.72, 0.92, acc, 7.5, 0.625, bullet="", gap=0.0, color="#333333")

    ax_t = fig.add_axes((0.04, 0.08, 0.50, 0.52))
    ax_t.axis("off")
    head = ["#", "steps", "topk", "ndt", "E[A]", "cycle", "tok/s", "speedup", "note"]
    cells = []
    for i, cand in enumerate(o.ranked[:10], start=1):
        note = ", ".join(x for x, on in (("tree extrap.", cand.accept_extrapolated and cand.topk > 1),
                                         ("depth extrap.", cand.accept_extrapolated and cand.topk == 1),
                                         ("cost extrap.", cand.cost_extrapolated)) if on)
        cells.append([str(i), str(cand.steps), str(cand.topk), str(cand.num_draft_tokens), f"{cand.accept_tokens:.2f}",
                      ms(cand.cycle_s), f"{cand.tokens_per_s:.1f}", f"{cand.speedup:.2f}x", note])
    tab = ax_t.table(cellText=cells, colLabels=head, loc="upper left", cellLoc="center",
                     colWidths=[0.05, 0.08, 0.08, 0.07, 0.09, 0.14, 0.11, 0.11, 0.27])
    tab.auto_set_font_size(False)
    tab.set_fontsize(8)
    tab.scale(1, 1.35)
    ax_t.set_title(f"top configurations at batch {o.batch}", fontsize=10)

    ax = fig.add_axes((0.62, 0.32, 0.34, 0.28))
    for k in sorted({k for _, k, _ in o.grid}):
        pts = [(s, t) for s, kk, t in o.grid if kk == k]
        ax.plot([s for s, _ in pts], [t for _, t in pts], "o-", ms=4, label=f"topk {k}")
    ax.axhline(d.baseline_tokens_per_s, color="black", ls="--", lw=1, label="baseline")
    ax.plot([d.steps], [d.tokens_per_s], "*", ms=13, color="#c62828", label="default")
    ax.set_xlabel("steps")
    ax.set_ylabel("best tok/s over draft tokens")
    ax.legend(fontsize=7, ncol=2)
    depth = c.prediction.point.steps  # the accept distribution covers 1..steps+1: deeper is the optimizer's extrapolation
    if o.grid and max(st for st, _, _ in o.grid) > depth:
        # acceptance deeper than measured is the last-conditional-rate extrapolation
        ax.axvspan(depth + 0.5, max(st for st, _, _ in o.grid) + 0.5, facecolor="none", edgecolor="#bbbbbb",
                   hatch="//", lw=0, label="depth extrapolated")
    ax.set_title(f"tok/s by steps and topk (batch {o.batch})", fontsize=9.5)

    ax2 = fig.add_axes((0.62, 0.08, 0.34, 0.16))
    bs = [cand.batch for cand in o.per_batch]
    ax2.plot(bs, [cand.speedup for cand in o.per_batch], "o-", color="#1a7f37", label="best config per batch")
    if o.measured_max_batch is not None and max(bs) > o.measured_max_batch:
        ax2.axvspan(o.measured_max_batch * 1.1, max(bs) * 1.25, facecolor="none", edgecolor="#999999", hatch="//",
                    lw=0, label="beyond the measured batches")
        ax2.set_xlim(min(bs) / 1.25, max(bs) * 1.25)
    ax2.axhline(1.0, color="#c62828", ls="--", lw=1)
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(bs, [str(x) for x in bs])
    ax2.set_xlabel("batch", fontsize=8)
    ax2.set_ylabel("speedup", fontsize=8)
    ax2.tick_params(labelsize=7)
    ax2.legend(fontsize=7)
    return fig


def page_context(c: ReportContent) -> Any:
    """tok/s, speedup and break-even vs context at the user's batch; extrapolated points in red."""
    v = c.context
    fig = _figure()
    if v is None:
        fig.text(0.04, 0.85, "no context sweep", fontsize=10, va="top")
        return fig
    xs = [max(r.context_tokens, 1) for r in v.rows]  # log axis: context 0 drawn at 1
    ext = [bool(r.extrapolated) for r in v.rows]
    mlo, mhi = min(v.measured_contexts), max(v.measured_contexts)
    fig.text(0.04, 0.90, f"batch {v.batch}, accept length {v.accept_mean_tokens:.2f} tokens/step; measured contexts: "
             f"{', '.join(map(str, v.measured_contexts))} tokens of KV per request (shaded); red = extrapolated",
             fontsize=9, va="top")
    # how acceptance varies over context (per band of the log, or assumed constant): one block with the
    # single-context warning, so the two never overlap
    note = v.accept_note[:1].upper() + v.accept_note[1:] + "."
    if len(v.measured_contexts) == 1:
        fig.text(0.04, 0.875, _wrap("Only one context was measured: at every other context the costs are held at the "
                                    "measured ones (flat, extrapolated). Measure a context sweep (specmodel profile "
                                    f"{field_name('contexts')}) or give {field_name('baseline_sweep')} with a context "
                                    "column. " + note, 160),
                 fontsize=9, va="top", color=EXTRAPOLATED_COLOR)
    else:
        fig.text(0.04, 0.875, _wrap(note, 160), fontsize=9, va="top")

    def _panel(rect: tuple[float, float, float, float], series: list[tuple[str, list[float], str]], ylabel: str,
               hline: float | None = None) -> Any:
        ax = fig.add_axes(rect)
        for label, ys, color in series:
            ax.plot(xs, ys, "-", color=color, label=label)
            ax.scatter([x for x, e in zip(xs, ext, strict=True) if not e],
                       [y for y, e in zip(ys, ext, strict=True) if not e], color=color, s=18, zorder=3)
            ax.scatter([x for x, e in zip(xs, ext, strict=True) if e], [y for y, e in zip(ys, ext, strict=True) if e],
                       color=EXTRAPOLATED_COLOR, marker="x", s=30, zorder=3)
        ax.axvspan(max(mlo, 1), max(mhi, 1) * 1.001, color="#1a7f37", alpha=0.08)
        if hline is not None:
            ax.axhline(hline, color="#c62828", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("context (KV tokens per request; 0 drawn at 1)", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        if len(series) > 1:
            ax.legend(fontsize=7)
        return ax

    _panel((0.06, 0.50, 0.40, 0.33), [("speculative", [r.tokens_per_s for r in v.rows], "#1f77b4"),
                                      ("baseline", [r.baseline_tokens_per_s for r in v.rows], "black")],
           "tok/s (total over the batch)")
    _panel((0.56, 0.50, 0.40, 0.33), [("speedup", [r.speedup for r in v.rows], "#1a7f37")], "speedup", hline=1.0)
    ax3 = _panel((0.06, 0.08, 0.40, 0.30), [("break-even", [r.break_even_accept_tokens for r in v.rows], "#ff7f0e")],
                 "break-even accept length (tokens/step)", hline=v.accept_mean_tokens)
    ax3.text(0.02, 0.95, f"dashed: drafter's {v.accept_mean_tokens:.2f}", transform=ax3.transAxes, fontsize=7, va="top")

    ax_t = fig.add_axes((0.54, 0.04, 0.44, 0.38))
    ax_t.axis("off")
    cells = [[str(r.context_tokens), f"{r.baseline_tokens_per_s:.1f}", f"{r.tokens_per_s:.1f}", f"{r.speedup:.2f}x",
              short_tokens(r.break_even_accept_tokens),
              # a refused context (costs that cross there) has no verdict: said in a word that fits the column
              ("refused" if r.verdict == "INCONSISTENT" else r.verdict) + (" (extrap.)" if r.extrapolated else "")]
             for r in v.rows]
    tab = ax_t.table(cellText=cells, colLabels=["context", "baseline tok/s", "spec tok/s", "speedup", "break-even",
                                                "verdict"], loc="upper left", cellLoc="center")
    tab.auto_set_font_size(False)
    tab.set_fontsize(7.5)
    tab.scale(1, 1.2)
    for i, r in enumerate(v.rows, start=1):
        if r.extrapolated:
            for j in range(6):
                tab[i, j].set_text_props(color=EXTRAPOLATED_COLOR)
    return fig


def page_drafter(c: ReportContent) -> Any:
    dv = c.drafter
    assert dv is not None
    fig = _figure()
    lines = [f"status: {dv.status}"]
    if dv.acceptance_ceiling is not None:
        ct = f" = at most {dv.ceiling_tokens:.2f} tokens/step at {c.prediction.point.steps} steps" if dv.ceiling_tokens else ""
        lines.append(f"acceptance ceiling (target-token mass the draft vocabulary covers): {dv.acceptance_ceiling:.1%}{ct}")
    if dv.warning:
        lines.append("WARNING: " + dv.warning)
    lines += [f"{k}: {v}" for k, v in dv.inputs]
    y = _flow(fig, 0.04, 0.90, 0.92, lines, 9, 0.70, bullet="", gap=0.0)
    if not dv.findings:
        fig.text(0.04, y - 0.02, "no findings", va="top")
        return fig
    # the table is drawn row by row from measured line counts, so it ends above the footer
    size = 8.0
    cols = ((0.04, 0.07, "status"), (0.115, 0.22, "check"), (0.34, 0.62, "message"))
    lh = _line_h(size)
    top = y - 0.02
    bottom = FOOTER_TOP + 0.02
    fig.text(cols[0][0], top, "status", fontsize=size, weight="bold", va="top")
    fig.text(cols[1][0], top, "check", fontsize=size, weight="bold", va="top")
    fig.text(cols[2][0], top, "message", fontsize=size, weight="bold", va="top")
    yy = top - lh * 1.3
    colors = {"PASS": "#1a7f37", "WARN": "#b26a00", "FAIL": "#c62828"}
    # failing and warning findings first: a page that runs out of room drops passes, not problems
    order = sorted(dv.findings, key=lambda f: {"FAIL": 0, "WARN": 1}.get(f.status, 2))
    for i, f in enumerate(order):
        name = _fit_lines(f.name, cols[1][1] * PAGE_SIZE_IN[0], size)
        msg = _fit_lines(f.message, cols[2][1] * PAGE_SIZE_IN[0], size)
        n = max(len(name), len(msg))
        rest = len(order) - i
        if yy - lh * n < bottom + (lh if rest > 1 else 0):
            fig.text(cols[0][0], yy, f"... {rest} more findings (all {len(order)} in the JSON report)",
                     fontsize=size, va="top", color="#555555")
            break
        fig.text(cols[0][0], yy, f.status, fontsize=size, va="top", weight="bold", color=colors.get(f.status, "black"))
        fig.text(cols[1][0], yy, "\n".join(name), fontsize=size, va="top", linespacing=_LINE_SPACING)
        fig.text(cols[2][0], yy, "\n".join(msg), fontsize=size, va="top", linespacing=_LINE_SPACING)
        yy -= lh * n + 0.25 * lh
        fig.add_artist(_hline(fig, yy + 0.125 * lh))
    return fig


def _hline(fig: Any, y: float) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([0.04, 0.96], [y, y], transform=fig.transFigure, color="#dddddd", lw=0.5)


PAGE_TITLES: dict[str, tuple[str, Callable[[ReportContent], Any]]] = {
    "verdict": ("", page_verdict),
    "throughput-vs-accept": ("tok/s vs accept length", page_curve),
    "cycle-breakdown": ("Where the cycle goes", page_breakdown),
    "allreduce": ("All-reduce cost vs message size", page_allreduce),
    "what-if": ("What if", page_whatif),
    "recommendation": ("Recommended configuration", page_recommendation),
    "context": ("tok/s, speedup and break-even vs context", page_context),
    "drafter-check": ("Drafter check", page_drafter),
}


def render_figures(c: ReportContent) -> list[tuple[str, Any]]:
    """(page name, Figure) for every page, in order."""
    _mpl()
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = []
    for i, name in enumerate(c.pages, start=1):
        title, fn = PAGE_TITLES[name]
        fig = fn(c)
        if title:
            _frame(fig, c, i, f"{i}. {title}", when)
        else:
            fig.text(0.04, 0.02, f"specmodel {c.version} | {when}", fontsize=7, color="#555555")
            fig.text(0.96, 0.02, f"page {i}/{len(c.pages)}", fontsize=7, color="#555555", ha="right")
        out.append((name, fig))
    return out


def write_pdf(c: ReportContent, tmp_path: Path, figures: list[tuple[str, Any]]) -> None:
    """Write the figures as one multi-page vector PDF at ``tmp_path`` (the caller renames it)."""
    from matplotlib.backends.backend_pdf import PdfPages

    meta = {"Title": c.title, "Author": "specmodel", "Subject": f"{c.verdict}: {c.verdict_reason}",
            "Creator": f"specmodel {c.version}", "Keywords": "speculative decoding, tensor parallel, go/no-go"}
    with PdfPages(tmp_path, metadata=meta) as pdf:
        for _, fig in figures:
            pdf.savefig(fig)


def png_bytes(fig: Any, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def write_pngs(figures: list[tuple[str, Any]], png_dir: Path, stem: str, dpi: int = 80) -> list[Path]:
    """One PNG per page, ``<stem>-p<N>-<page>.png`` (written atomically, for eyes and tests)."""
    out = []
    for i, (name, fig) in enumerate(figures, start=1):
        out.append(atomic_write_bytes(png_dir / f"{stem}-p{i}-{name}.png", png_bytes(fig, dpi)))
    return out


def render_pdf_to_temp(c: ReportContent, target: Path) -> tuple[Path, list[tuple[str, Any]]]:
    """Render into a temp file beside ``target`` (same filesystem, so ``os.replace`` is atomic)."""
    figures = render_figures(c)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is meant to be shared
        write_pdf(c, Path(tmp), figures)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp), figures
