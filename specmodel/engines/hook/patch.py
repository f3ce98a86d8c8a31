"""What the engine hooks (:mod:`specmodel.engines.sglang.hook`, :mod:`specmodel.engines.vllm.hook`) share:
patching a module the moment it is first imported (TP workers import the engine late, after the
``sitecustomize`` shim in ``shim/`` -- one shim for both engines -- ran), and the name of
each process's rank file.

Kept free of torch and of any engine import: the shims load it in every Python process.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str, on_import: Callable[[str, ModuleType], None]) -> None:
        self._loader = loader
        self._name = name
        self._on_import = on_import

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._on_import(self._name, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Calls ``on_import(name, module)`` right after one of ``names`` is first imported."""

    def __init__(self, names: Iterable[str], on_import: Callable[[str, ModuleType], None]) -> None:
        self.names = frozenset(names)
        self.on_import = on_import

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, fullname, self.on_import)
                return spec
        return None


def as_wrapper(wrapper: Callable[..., Any], orig: Callable[..., Any], *, name: str, qualname: str) -> Callable[..., Any]:
    """Dress a hook's ``wrapper`` as ``orig``: its name, qualname and doc, ``__wrapped__`` (so
    ``inspect.signature`` sees the original) and ``__specmodel_wrapped__`` (how uninstall and a second
    install recognise a wrapper of ours); ``name`` / ``qualname`` stand in where ``orig`` has none."""
    w: Any = wrapper
    w.__specmodel_wrapped__ = orig
    w.__name__ = getattr(orig, "__name__", name)
    w.__qualname__ = getattr(orig, "__qualname__", qualname)
    w.__doc__ = getattr(orig, "__doc__", None)
    w.__wrapped__ = orig
    return wrapper


def process_rank() -> str:
    """This process's rank where the engine does not say: torch.distributed's, else ``$RANK`` /
    ``$LOCAL_RANK``, else ``pid<pid>`` (torch is imported here, once, by a hook that found no rank)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return str(dist.get_rank())
    except Exception:  # noqa: BLE001 - no torch or no process group: the next source
        pass
    for env in ("RANK", "LOCAL_RANK"):
        if os.environ.get(env, "").isdigit():
            return os.environ[env]
    return f"pid{os.getpid()}"


def rank_file_name(*, rank: str, dp: int | None, pp: int | None, pid: int, attempt: int = 0) -> str:
    """``rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl``: one file per process (a DP replica or PP stage
    has its own TP rank 0; two servers sharing ``--out`` have their own pids)."""
    tail = f"-{attempt}" if attempt else ""
    return f"rank{rank}-dp{0 if dp is None else dp}-pp{0 if pp is None else pp}-pid{pid}{tail}.jsonl"


def open_rank_file(out: Path, *, rank: str, dp: int | None, pp: int | None) -> tuple[int, Path]:
    """Create this process's rank file (``O_EXCL``: a name another process holds -- the same pid in
    another container sharing the directory -- gets a suffix) and open it for appending."""
    pid = os.getpid()
    for attempt in range(1000):
        path = out / rank_file_name(rank=rank, dp=dp, pp=pp, pid=pid, attempt=attempt)
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644), path
        except FileExistsError:
            continue
    raise FileExistsError(f"{out}: no free rank file name for pid {pid}")
