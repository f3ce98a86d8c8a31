"""A stand-in SGLang server for ``specmodel sglang``'s page keeping (SGLang cannot run here): it
refuses to start (exit 3) unless the device timer was turned on for it (``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``
in its environment, ``--enable-metrics`` among its arguments), serves the device-timer pages of
tests/sglang_timer_pages.py on ``--port`` (127.0.0.1), one run of cycles more per GET, and exits 0 once
it has served ``--pages`` of them (a bound of 300 s guards a hang).

    python tests/sglang_timer_server.py --port P --pages 2
"""

from __future__ import annotations

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sglang_timer_pages import Server  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    if os.environ.get("SGLANG_ENABLE_METRICS_DEVICE_TIMER") != "1" or "--enable-metrics" not in args:
        print("stand-in: the device timer is off", file=sys.stderr)
        return 3
    port = int(args[args.index("--port") + 1])
    want = int(args[args.index("--pages") + 1])
    state = Server(occupancy_pct=80.0)
    served = threading.Event()
    count = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            state.cycles(10, 2, 100, target_verify=0.01, eagle_draft=0.002)
            body = state.page().encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            count[0] += 1
            if count[0] >= want:
                served.set()

        def log_message(self, *a: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    served.wait(timeout=300)
    time.sleep(0.2)  # let the last answer leave
    httpd.shutdown()
    return 0 if served.is_set() else 4


if __name__ == "__main__":
    sys.exit(main())
