"""A stand-in for a Prometheus server's ``/api/v1/query`` (127.0.0.1 only), for the fleet watch's
tests and benchmark: it holds recorded /metrics pages of several servers, each stamped with the
time Prometheus would have scraped it, and answers a range selector
``{__name__=~"a|b", label="v", ...}[Nms]`` the way Prometheus does: a matrix of every series whose
name matches and whose labels equal the matchers (``=`` only), with the samples in
``(time - N ms, time]``. Pages are parsed independently of specmodel (a plain split of each sample
line) so the fleet watch is checked against the pages, not against its own parser."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler

from tests.metrics_server import LoopbackServer

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)\s*$")
_LAB = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_QUERY = re.compile(r'^\{__name__=~"([^"]*)"(.*)\}\[(\d+)ms\]$')


def page_series(text: str, target: dict[str, str]) -> list[tuple[dict[str, str], float]]:
    """(labels incl. __name__ and the target's labels, value) of every sample line of a page."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m is None or line.startswith("#"):
            continue
        labels = dict(_LAB.findall(m.group(2) or ""))
        labels.update(target)  # Prometheus attaches the target's labels to every series it scrapes
        labels["__name__"] = m.group(1)
        out.append((labels, float(m.group(3))))
    return out


class FakePrometheus(LoopbackServer):
    """``add(target_labels, t_s, page_text)`` records one scrape (``up`` 1 with it); ``add_down`` a failed one."""

    def __init__(self) -> None:
        self.series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        self.queries: list[str] = []
        self.lock = threading.Lock()

    def _put(self, labels: dict[str, str], t: float, v: float) -> None:
        self.series.setdefault(tuple(sorted(labels.items())), []).append((t, v))

    def add(self, target: dict[str, str], t_s: float, page: str) -> None:
        with self.lock:
            for labels, v in page_series(page, target):
                self._put(labels, t_s, v)
            self._put({**target, "__name__": "up"}, t_s, 1.0)

    def add_down(self, target: dict[str, str], t_s: float) -> None:
        with self.lock:
            self._put({**target, "__name__": "up"}, t_s, 0.0)

    def answer(self, query: str, at: float) -> tuple[int, dict]:
        m = _QUERY.match(query)
        if m is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": f"fake: cannot parse {query!r}"}
        names = re.compile(f"^(?:{m.group(1)})$")
        want = dict(_LAB.findall(m.group(2)))
        lo = at - int(m.group(3)) / 1000.0
        result = []
        with self.lock:
            for key, vals in self.series.items():
                lab = dict(key)
                if not names.match(lab["__name__"]) or any(lab.get(k) != v for k, v in want.items()):
                    continue
                pts = [[t, repr(v)] for t, v in vals if lo < t <= at]
                if pts:
                    result.append({"metric": lab, "values": pts})
        return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}

    @property
    def url(self) -> str:
        assert self.httpd is not None
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> FakePrometheus:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                u = urllib.parse.urlparse(self.path)
                q = urllib.parse.parse_qs(u.query)
                if u.path != "/api/v1/query":
                    status, doc = 404, {"status": "error", "error": "not found"}
                else:
                    outer.queries.append(q["query"][0])
                    status, doc = outer.answer(q["query"][0], float(q["time"][0]))
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self.serve(Handler)
        return self
