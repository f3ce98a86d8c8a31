"""Test-only (tests/test_vllm_allreduce_bypass_live.py): with ``SPECMODEL_TEST_AR_BYPASS_TOKENS=N`` set,
every second all-reduce of a forward over at most N tokens calls the TP group's device communicator
directly instead of ``GroupCoordinator._all_reduce_out_place`` -- the method the hook wraps -- as
vLLM's fused all-reduce + RMSNorm op does for batches under its token limit
(``torch.ops.vllm.flashinfer_trtllm_fused_allreduce_norm``, vllm 0.34
``compilation/passes/fusion/allreduce_rms_fusion.py``). The all-reduce itself still runs (same
result, same ranks, same order on every rank: each rank makes the same calls), only unseen.

Inert without the variable, and in an interpreter without vLLM. Put on the server's PYTHONPATH
behind the hook's own shim, which runs it (``specmodel/engines/hook/shim/sitecustomize.py``
executes the sitecustomize it shadows)."""

import importlib.abc
import os
import sys

_ENV = "SPECMODEL_TEST_AR_BYPASS_TOKENS"
_MODULE = "vllm.distributed.parallel_state"


def _patch(mod):
    coordinator = mod.GroupCoordinator
    orig = coordinator.all_reduce
    limit = int(os.environ[_ENV])
    seen = [0]

    def all_reduce(self, input_):
        if self.world_size > 1 and input_.dim() >= 2 and input_.shape[0] <= limit:
            seen[0] += 1
            if seen[0] % 2 == 0:
                return self.device_communicator.all_reduce(input_)
        return orig(self, input_)

    coordinator.all_reduce = all_reduce


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Asks the other finders (the hook's among them: it wraps the loader too), then wraps theirs."""

    busy = False

    def find_spec(self, name, path=None, target=None):
        if name != _MODULE or self.busy:
            return None
        self.busy = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None:
                        spec.loader = _Loader(spec.loader)
                    return spec
            return None
        finally:
            self.busy = False


if os.environ.get(_ENV):
    if _MODULE in sys.modules:
        _patch(sys.modules[_MODULE])
    else:
        sys.meta_path.insert(0, _Finder())
