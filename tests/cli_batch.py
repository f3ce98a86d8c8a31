"""Run many ``specmodel`` command lines in one Python process (the bad-input corpus is ~100 of
them; a subprocess each would cost a second of start-up apiece).

Reads a JSON list of ``{"id", "argv", "cwd"}`` on stdin; for each, calls :func:`specmodel.cli.main`
with stdout/stderr captured and writes ``{"id", "rc", "stdout", "stderr"}`` as one JSON list on
stdout. An exception escaping ``main`` (a traceback a user would see) is reported as rc -1 with
the formatted traceback as stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


def run_one(argv: list[str], cwd: str) -> tuple[int, str, str]:
    from specmodel.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    sys.argv = ["specmodel", *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
                rc = 0
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - exactly what the corpus hunts for
                err.write(traceback.format_exc())
                rc = -1
    finally:
        os.chdir(here)
    return rc, out.getvalue(), err.getvalue()


def main() -> None:
    cases = json.load(sys.stdin)
    results = []
    real_stdout = sys.stdout
    for c in cases:
        rc, out, err = run_one(c["argv"], c["cwd"])
        results.append({"id": c["id"], "rc": rc, "stdout": out[-2000:], "stderr": err[-20000:]})
    real_stdout.write(json.dumps(results))


if __name__ == "__main__":
    main()
