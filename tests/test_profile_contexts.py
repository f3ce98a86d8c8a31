"""``--contexts``: the sweep's points, KV-pool sizing, and the GPU memory check (its arithmetic
runs here with the free-memory figure a stand-in for ``torch.cuda.mem_get_info``)."""

from __future__ import annotations

import pytest

from specmodel.commands.profile_plan import _contexts, _fit_gpu
from specmodel.errors import SpecmodelError
from specmodel.model import memory as M
from specmodel.profile import configs as C
from specmodel.profile import device
from specmodel.profile.plan import kv_need, sweep_points

GiB = 1024**3


def test_contexts_accept_k_and_m_suffixes():
    assert _contexts("0,4K,32K,128K") == (0, 4096, 32768, 131072)
    assert _contexts("1m, 512, 512") == (512, 1048576)
    for bad in ("4KB", "-1", "", "1.5K"):
        with pytest.raises(SpecmodelError, match="--contexts"):
            _contexts(bad)


def test_every_phase_at_every_context_and_the_pool_follows_the_largest_point():
    pts = sweep_points(kinds=("decode", "verify", "draft", "draft_extend"), batches=(1, 8), verify_tokens=(4,),
                       topk=1, num_draft_tokens=4, contexts=(0, 4096))
    assert {(p.kind, p.context) for p in pts} == {(k, c) for k in ("decode", "verify", "draft", "draft_extend")
                                                  for c in (0, 4096)}
    # target: verify at batch 8 x 4 tokens, context 4096 → 8 x 4100 slots (not max batch x max context + ...)
    assert kv_need(pts, "target") == (8 * 4100, 4100)
    assert kv_need(pts, "target", loop=(16, 0, 4)) == (8 * 4100, 4100)  # the loop's 16 x 4 is smaller
    assert next(p for p in pts if p.context == 4096 and p.kind == "decode").unit.endswith("ctx=4096")


def _fit(monkeypatch, free_bytes, contexts, batches, layers=None):
    monkeypatch.setattr(device, "free_memory_bytes_local", lambda: free_bytes)
    shape, src = C.load_shape(None, "kimi-k2.5")
    pts = sweep_points(kinds=("decode", "verify"), batches=batches, verify_tokens=(4,), topk=1,
                       num_draft_tokens=4, contexts=contexts)
    return _fit_gpu({"layers": layers, "hidden": None}, shape, C.drafter_for(shape), 8, "bfloat16", src, pts, None), pts


def test_gpu_sizing_leaves_room_for_the_kv_pool(monkeypatch):
    (t_small, _d, _s), _ = _fit(monkeypatch, 80 * GiB, (1024,), (1, 8))
    (t_big, d, _s), pts = _fit(monkeypatch, 80 * GiB, (131072,), (1, 8))
    assert 1 <= t_big.num_layers < t_small.num_layers  # a longer context leaves room for fewer layers
    per_layer, outside = M.per_rank_weight_bytes(t_big, 8, 2)
    slots, _ = kv_need(pts, "target")
    kv = slots * M.kv_bytes_per_token(t_big, 8, 2) * t_big.num_layers
    assert per_layer * t_big.num_layers + outside + kv <= 0.6 * 80 * GiB


def test_a_context_that_cannot_fit_is_refused_with_the_figure(monkeypatch):
    with pytest.raises(SpecmodelError) as e:
        _fit(monkeypatch, 80 * GiB, (1048576,), (64,))
    msg = str(e.value)
    assert msg.startswith("--contexts: not even one layer fits: the KV cache needs ") and "GiB" in msg
    assert "batch 64 x context 1048576 tokens" in msg
    with pytest.raises(SpecmodelError) as e:  # --layers given: the whole pool vs what is free
        _fit(monkeypatch, 80 * GiB, (1048576,), (64,), layers=2)
    assert "--contexts: the KV cache needs" in str(e.value) and "over 2 layers" in str(e.value)
    with pytest.raises(SpecmodelError, match="--layers 61: the weights need"):
        _fit(monkeypatch, 80 * GiB, (1024,), (1,), layers=61)
