"""Read text positions back from a rendered PDF and report what a printed page would get wrong.

pdfminer gives every glyph's box (advance width x font ascent..descent) in page coordinates.
Two glyphs of different strings whose boxes overlap by more than a sliver are text printed
over text; a glyph whose box leaves the page (MediaBox) is clipped when printed. Glyphs of one
string touch but do not overlap, so the check needs no knowledge of how the page was drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Overlap that counts: this share of the smaller glyph's area (kerning and rounding stay far below it).
MIN_OVERLAP_SHARE = 0.25


@dataclass(frozen=True)
class Glyph:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    line: int  # index of the pdfminer text line the glyph belongs to

    @property
    def area(self) -> float:
        return max(self.x1 - self.x0, 0.0) * max(self.y1 - self.y0, 0.0)


def _glyphs(page_layout: object) -> tuple[list[Glyph], list[str]]:
    from pdfminer.layout import LTChar, LTTextLine

    glyphs: list[Glyph] = []
    lines: list[str] = []

    def walk(obj: object) -> None:
        if isinstance(obj, LTTextLine):
            idx = len(lines)
            lines.append(obj.get_text().strip())
            for ch in obj:
                if isinstance(ch, LTChar) and ch.get_text().strip():
                    glyphs.append(Glyph(ch.get_text(), ch.x0, ch.y0, ch.x1, ch.y1, idx))
            return
        if isinstance(obj, LTChar):  # a glyph outside any line (pdfminer left it loose)
            if obj.get_text().strip():
                lines.append(obj.get_text())
                glyphs.append(Glyph(obj.get_text(), obj.x0, obj.y0, obj.x1, obj.y1, len(lines) - 1))
            return
        for child in getattr(obj, "__iter__", lambda: iter(()))():
            walk(child)

    walk(page_layout)
    return glyphs, lines


def layout_problems(pdf: Path, *, max_reports: int = 20) -> list[str]:
    """Every overlapping or clipped text on every page of ``pdf`` (empty list: printable)."""
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LAParams

    problems: list[str] = []
    # char_margin/line_margin small: lines are the strings as drawn, not merged paragraphs
    params = LAParams(char_margin=0.5, line_margin=0.01, word_margin=0.1, boxes_flow=None)
    for pageno, layout in enumerate(extract_pages(str(pdf), laparams=params), start=1):
        x0, y0, x1, y1 = layout.bbox
        glyphs, lines = _glyphs(layout)
        for g in glyphs:
            if g.x0 < x0 - 0.5 or g.x1 > x1 + 0.5 or g.y0 < y0 - 0.5 or g.y1 > y1 + 0.5:
                problems.append(f"page {pageno}: text outside the page: {lines[g.line][:60]!r}")
                break
        # sweep along x: only glyphs whose x-ranges meet can overlap
        order = sorted(glyphs, key=lambda g: g.x0)
        seen: set[tuple[int, int]] = set()
        active: list[Glyph] = []
        for g in order:
            active = [a for a in active if a.x1 > g.x0]
            for a in active:
                if a.line == g.line:
                    continue
                w = min(a.x1, g.x1) - max(a.x0, g.x0)
                h = min(a.y1, g.y1) - max(a.y0, g.y0)
                if w <= 0 or h <= 0:
                    continue
                if w * h > MIN_OVERLAP_SHARE * min(a.area, g.area):
                    key = (min(a.line, g.line), max(a.line, g.line))
                    if key not in seen:
                        seen.add(key)
                        problems.append(f"page {pageno}: {lines[a.line][:50]!r} overlaps {lines[g.line][:50]!r}")
            active.append(g)
            if len(problems) >= max_reports:
                return problems
    return problems
