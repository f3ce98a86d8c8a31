"""The ``specmodel`` executable's entry point (and ``python -m specmodel``'s).

The cyclic garbage collector is off while the CLI and the command's modules import: they build
~10^5 objects (classes, functions, the dataclasses' generated methods) and no garbage, and the ~25
collections CPython would run meanwhile cost ~5 ms of every start (measured on `ingest`). Once the
command's module is in, what exists is frozen (never traversed again: it lives as long as the
process) and collection is back on (:func:`specmodel.cli.resume_gc`)."""

from __future__ import annotations

import gc
from typing import Any


def run() -> Any:
    gc.disable()
    from specmodel import cli

    cli.GC_DEFERRED = True
    return cli.main()
