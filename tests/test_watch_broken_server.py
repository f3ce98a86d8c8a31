"""`specmodel watch` against a real HTTP server on 127.0.0.1 that dies mid-answer (a body cut short of its
Content-Length, a garbled status line) and then answers well: one line naming the server, then a
reading on a later interval -- never a traceback. The server is a raw socket, so the bytes on the
wire are exactly the broken ones (http.server would repair them)."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Sequence

import pytest

from tests.conftest import DATA, REFERENCE, specmodel_exe

PAGES = [p.read_text() for p in sorted((DATA / "sglang_metrics_055").glob("page_*.txt"))[5:9]]


def _ok(page: str) -> bytes:
    body = page.encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body


def _truncated(page: str) -> bytes:
    # the headers promise the whole page and 1000 bytes more; half the page arrives, then the connection closes
    body = page.encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (len(body) + 1000)) + body[: len(body) // 2]


GARBAGE = b"\x16\x03garbage status line\r\n\r\n"


class ScriptedServer:
    """One scripted raw answer per connection, in order (the last repeated), then the socket closes."""

    def __init__(self, answers: Sequence[bytes]) -> None:
        self.answers = list(answers)
        self.served = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/metrics"

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                req = b""
                while b"\r\n\r\n" not in req:  # the whole request head before answering
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    req += chunk
                conn.sendall(self.answers[min(self.served, len(self.answers) - 1)])
                self.served += 1

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.mark.parametrize(("broken", "name"), [(_truncated(PAGES[1]), "IncompleteRead"), (GARBAGE, "BadStatusLine")],
                         ids=["body-cut-short", "garbled-status-line"])
def test_a_broken_answer_is_one_line_naming_the_server_then_the_next_interval_reads(broken, name):
    # answers: good (the first scrape), broken, then good ones: the reading needs two good scrapes
    with ScriptedServer([_ok(PAGES[0]), broken, _ok(PAGES[2]), _ok(PAGES[3])]) as srv:
        r = subprocess.run(specmodel_exe() + ["watch", srv.url, "--profile", str(REFERENCE), "--interval", "0.2",
                                              "--window", "100", "--count", "1", "--timeout", "5"],
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stdout.splitlines()
    gone = [i for i, ln in enumerate(lines) if srv.url in ln]
    assert len(gone) == 1, lines
    assert f"broken HTTP answer ({name}" in lines[gone[0]] and "retrying" in lines[gone[0]]
    readings = [i for i, ln in enumerate(lines) if "speedup" in ln and "advice:" in ln]
    assert len(readings) == 1 and readings[0] > gone[0], lines


@pytest.mark.parametrize("broken", [_truncated(PAGES[0]), GARBAGE], ids=["body-cut-short", "garbled-status-line"])
def test_a_server_that_never_answers_well_is_one_line_exit_2(broken):
    # before the first reading a broken answer is bad input: one line, exit 2
    with ScriptedServer([broken]) as srv:
        r = subprocess.run(specmodel_exe() + ["watch", srv.url, "--profile", str(REFERENCE), "--once",
                                              "--timeout", "5"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and srv.url in err[0] and "broken HTTP answer" in err[0], err
