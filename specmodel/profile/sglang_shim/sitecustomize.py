"""Run by Python at start-up because ``specmodel sglang`` put this directory on ``PYTHONPATH``.

Installs the SGLang forward-pass hook (lazily: modules are patched when SGLang imports them),
then runs the ``sitecustomize`` this one shadows, if any. Never raises: a server must start
even when the hook cannot.
"""

import os
import sys


def _install() -> None:
    if not os.environ.get("SPECMODEL_SGLANG_DIR"):
        return
    # PYTHONPATH reaches every descendant of the server (compilers, helper scripts, other venvs):
    # an interpreter that cannot import SGLang is none of its processes, so the shim stays silent there
    import importlib.util

    try:
        if importlib.util.find_spec("sglang") is None:
            return
    except (ImportError, ValueError):
        return
    try:
        from specmodel.profile.sglang import install

        install()
    except Exception as exc:  # noqa: BLE001 - never stop the server from starting
        print(f"specmodel sglang hook: warning: not installed in {sys.executable} ({exc!r}); "
              "is specmodel installed in the server's Python environment?", file=sys.stderr, flush=True)


def _chain() -> None:
    """Execute the next ``sitecustomize`` on sys.path (the one this file shadows)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
    except Exception as exc:  # noqa: BLE001
        print(f"specmodel sglang hook: warning: the shadowed sitecustomize failed ({exc!r})", file=sys.stderr, flush=True)


_install()
_chain()
