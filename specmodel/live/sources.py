"""Where ``specmodel watch`` reads a running server from: an engine's ``/metrics`` URL
(:class:`MetricsSource`, the page's engine recognised by the registry's metrics plug-ins) or a server
log being written (:class:`LogSource`, followed incrementally with bounded memory). A server that does
not answer is :class:`SourceGone` (retried by the loop); bad input is a :class:`SpecmodelError`."""

from __future__ import annotations

import http.client
import re
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from specmodel.engines import engine_of_log, engines_help, metrics_format_of
from specmodel.engines.base import DecodeWindow, EngineConfig, EngineSpec, LogFile, MetricsSample
from specmodel.engines.prom import MAX_PAGE_BYTES
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_LINE_BYTES, WATCH_HEAD_LINES, WATCH_TAIL_BYTES

#: a scrape waits at most this long for the server (bounded; the loop retries on the next interval)
FETCH_TIMEOUT_S = 5.0


class SourceGone(Exception):
    """The server did not answer this time (connection refused, timeout, HTTP error)."""


@dataclass(kw_only=True)
class MetricsSource:
    """An engine's ``/metrics`` URL; the engine is recognised from the page (registry sniff)."""

    url: str
    timeout_s: float = FETCH_TIMEOUT_S
    opener: Callable[[str, float], str] | None = None  # tests inject a fake server

    def fetch(self) -> MetricsSample:
        try:
            text = (self.opener or _http_get)(self.url, self.timeout_s)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise SourceGone(f"{self.url}: {getattr(exc, 'reason', exc)}") from None
        except http.client.HTTPException as exc:
            # a server dying mid-answer (a body cut short, a garbled status line): like no answer,
            # retried next interval; the exception's text may carry the raw line, so one line, bounded
            raise SourceGone(f"{self.url}: broken HTTP answer ({type(exc).__name__}: {_one_line(str(exc))})") from None
        fmt = metrics_format_of(text)
        if fmt is None:
            raise SpecmodelError(f"{self.url}: not a {engines_help()} Prometheus metrics page "
                                 "(no metrics of a registered engine); give the server's /metrics URL")
        return fmt.parse(text, self.url)


def _one_line(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _http_get(url: str, timeout_s: float) -> str:
    req = urllib.request.Request(url, headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:  # noqa: S310 - the user's own server
        body = r.read(MAX_PAGE_BYTES + 1)
        declared = (r.headers.get("Content-Length") or "").strip()
    # a bounded read returns what arrived before the connection closed, short of Content-Length
    # without a word: half a page would parse as a page with counters missing
    if declared.isdigit() and len(body) < int(declared) and len(body) <= MAX_PAGE_BYTES:
        raise http.client.IncompleteRead(body, int(declared) - len(body))
    if len(body) > MAX_PAGE_BYTES:
        raise SpecmodelError(f"{url}: metrics page larger than {MAX_PAGE_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


@dataclass(kw_only=True)
class LogSource:
    """A server log being written, followed incrementally: each :meth:`read` reads only the bytes
    appended since the last one. Memory is bounded whatever the log's length: the first
    ``WATCH_HEAD_LINES`` lines (the start-up configuration lives there) and the most recent
    ``WATCH_TAIL_BYTES`` of lines are kept, and the engine's log plug-in parses those two (a window
    needs only its own lines). A partial last line waits for its newline; a file that shrank was
    rotated or truncated: it is read again from its start."""

    path: str
    head: list[str] = field(default_factory=list)
    tail: deque[str] = field(default_factory=deque)
    tail_bytes: int = 0
    offset: int = 0
    carry: bytes = b""
    engine: EngineSpec | None = None
    restarted: int = 0

    def _take(self, line: str) -> None:
        from specmodel.engines.parse import strip_ansi

        line = strip_ansi(line)
        if len(self.head) < WATCH_HEAD_LINES and not self.tail:
            self.head.append(line)
            return
        self.tail.append(line)
        self.tail_bytes += len(line) + 1
        while self.tail_bytes > WATCH_TAIL_BYTES and len(self.tail) > 1:
            self.tail_bytes -= len(self.tail.popleft()) + 1

    def _pull(self) -> None:
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self.offset:  # rotated or truncated: start again
                    self.head, self.tail, self.tail_bytes, self.offset, self.carry = [], deque(), 0, 0, b""
                    self.restarted += 1
                f.seek(self.offset)
                while True:
                    chunk = f.read(1 << 20)
                    if not chunk:
                        break
                    self.offset += len(chunk)
                    data = self.carry + chunk
                    *done, self.carry = data.split(b"\n")
                    if len(self.carry) > MAX_LINE_BYTES:
                        raise SpecmodelError(f"{self.path}: a line longer than {MAX_LINE_BYTES} bytes: not a server log")
                    for raw in done:
                        self._take(raw.decode("utf-8", errors="replace").rstrip("\r"))
        except OSError as exc:
            raise SpecmodelError(f"{self.path}: cannot read: {exc.strerror or exc}") from None

    def read(self) -> tuple[list[DecodeWindow], EngineConfig | None, EngineSpec]:
        """The windows in the kept lines, the logged configuration, and the engine that wrote the log."""
        from specmodel.engines.logs import parse_lines

        self._pull()
        lines = self.head + list(self.tail)
        if self.carry:
            lines.append(self.carry.decode("utf-8", errors="replace"))
        lf: LogFile = parse_lines(self.path, lines, unterminated=bool(self.carry))
        eng = engine_of_log(lf.engine)
        if eng is None:
            raise SpecmodelError(f"{self.path}: {lf.description}: watch reads a server log being written "
                                 f"({engines_help()}) or a /metrics URL")
        self.engine = eng
        return list(lf.windows), lf.config, eng


_URL = re.compile(r"^https?://", re.IGNORECASE)


def is_url(s: str) -> bool:
    return bool(_URL.match(s))
