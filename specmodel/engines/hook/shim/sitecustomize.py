"""Run by Python at start-up because ``specmodel sglang`` / ``specmodel vllm`` put this directory
on ``PYTHONPATH``.

Installs the engine's forward-pass hook (SGLang or vLLM: whichever output directory is named;
lazily: modules are patched when the engine imports them), then runs the ``sitecustomize`` this one shadows, if any. Never raises: a server must start
even when the hook cannot.
"""

import os
import sys

#: (environment variable naming the output directory, engine package, hook module, tag) per engine
_HOOKS = (("SPECMODEL_SGLANG_DIR", "sglang", "specmodel.engines.sglang.hook", "specmodel sglang hook"),
          ("SPECMODEL_VLLM_DIR", "vllm", "specmodel.engines.vllm.hook", "specmodel vllm hook"))


def _install() -> None:
    for env, package, module, tag in _HOOKS:
        if os.environ.get(env):
            _install_one(package, module, tag)


def _install_one(package: str, module: str, tag: str) -> None:
    # PYTHONPATH reaches every descendant of the server (compilers, helper scripts, other venvs):
    # an interpreter that cannot import the engine is none of its processes, so the shim stays silent there
    import importlib
    import importlib.util

    try:
        if importlib.util.find_spec(package) is None:
            return
    except (ImportError, ValueError):
        return
    try:
        importlib.import_module(module).install()
    except Exception as exc:  # noqa: BLE001 - never stop the server from starting
        print(f"{tag}: warning: not installed in {sys.executable} ({exc!r}); "
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
