"""A tiny /metrics server for `specmodel watch` tests: 127.0.0.1 only, serves a scripted sequence
of recorded pages (one per GET, the last one repeated), can go away and come back on the same
port. Requests are bounded by the client's timeout; the server thread is stopped by the test."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LoopbackServer:
    """A threading HTTP server on 127.0.0.1 with a handler class of the subclass's: started by
    :meth:`serve`, stopped by :meth:`stop` (its own thread, bounded join), a context manager."""

    httpd: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    def serve(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> int:
        ThreadingHTTPServer.allow_reuse_address = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return int(self.httpd.server_address[1])

    def start(self) -> LoopbackServer:
        raise NotImplementedError

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        if self.thread is not None:
            self.thread.join(timeout=5)
            self.thread = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PageServer(LoopbackServer):
    def __init__(self, pages: Sequence[str], port: int = 0) -> None:
        self.pages = list(pages)
        self.served = 0
        self.lock = threading.Lock()
        self._port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/metrics"

    def start(self) -> PageServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with outer.lock:
                    page = outer.pages[min(outer.served, len(outer.pages) - 1)]
                    outer.served += 1
                body = page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: object) -> None:
                pass

        self._port = self.serve(Handler, self._port)
        return self
