"""The profiler's model pieces that CUDA-graph capture depends on, checked on the CPU: the
static-shape MoE computes what the routed loop does without a data-dependent shape (no host
sync), SDPA shares KV heads without copying them, and a forward reads the KV length it is given."""

from __future__ import annotations

import pytest

from specmodel.profile import configs as C

pytestmark = pytest.mark.torch  # every test here builds torch modules


@pytest.fixture(autouse=True)
def _torch_modules():
    """torch and the profiler's modules, imported per test (collection needs no torch)."""
    global torch, MoE, TargetModel, _sdpa, attn_mask, RecordingComm
    import torch

    from specmodel.profile.models import MoE, TargetModel, _sdpa, attn_mask
    from specmodel.profile.tp import RecordingComm


def _moe_shape():
    s, _ = C.load_shape(None, "kimi-k2.5")
    su, _d, _ = C.scale(s, C.drafter_for(s), 2, layers=2, hidden=128, reason="t")
    return su


@pytest.mark.parametrize("tokens", [1, 3, 17])
def test_static_moe_matches_the_routed_loop(tokens):
    su = _moe_shape()
    torch.manual_seed(0)
    loop = MoE(su, RecordingComm(2), dtype=torch.float32, device="cpu", static=False)
    torch.manual_seed(0)
    static = MoE(su, RecordingComm(2), dtype=torch.float32, device="cpu", static=True)
    assert static.static and not loop.static
    x = torch.randn(1, tokens, su.hidden_size)
    a, b = loop(x), static(x)
    assert a.shape == b.shape == x.shape
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), (a - b).abs().max()
    static.grouped = False  # the per-slot gather path (a GPU run in float32)
    assert torch.allclose(a, static(x), rtol=1e-4, atol=1e-5)


def test_static_moe_has_no_data_dependent_shape():
    """Fake tensors have no values: an op whose output shape depends on them (the loop's
    bincount().tolist(), a host sync) raises; the static path must run through."""
    from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode

    su = _moe_shape()
    bf = torch.bfloat16  # the dtype a GPU run uses (torch's grouped GEMM needs it there)
    static = MoE(su, RecordingComm(2), dtype=bf, device="cpu", static=True)
    loop = MoE(su, RecordingComm(2), dtype=bf, device="cpu", static=False)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(torch.randn(1, 5, su.hidden_size, dtype=bf))
        assert static(x).shape == (1, 5, su.hidden_size)
        with pytest.raises(DynamicOutputShapeException):
            loop(x)


def test_sdpa_shares_kv_heads_like_repeat_interleave():
    q, k, v = torch.randn(2, 8, 3, 16), torch.randn(2, 2, 10, 16), torch.randn(2, 2, 10, 16)
    for kind in ("causal", "diag"):
        mask = attn_mask(3, 7, kind, "cpu")
        dense = torch.cat([torch.ones(3, 7, dtype=torch.bool),
                           torch.tril(torch.ones(3, 3, dtype=torch.bool)) if kind == "causal" else
                           torch.eye(3, dtype=torch.bool)], dim=1)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(4, 1),
                                                                v.repeat_interleave(4, 1), attn_mask=dense)
        assert torch.allclose(_sdpa(q, k, v, mask), ref, atol=1e-5)
    from torch.nn.attention.bias import causal_lower_right  # what a GPU forward passes for causal

    ref = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1),
                                                            attn_mask=attn_mask(3, 7, "causal", "cpu"))
    assert torch.allclose(_sdpa(q, k, v, causal_lower_right(3, 10)), ref, atol=1e-5)


def test_forward_reads_the_context_it_is_given():
    """One model, one KV pool, several contexts: a longer context attends over more cache."""
    s, _ = C.load_shape(None, "llama-3.1-8b")
    su, _d, _ = C.scale(s, C.drafter_for(s), 1, layers=1, hidden=128, reason="t")
    torch.manual_seed(0)
    m = TargetModel(su, RecordingComm(1), kv_tokens=2 * 68, max_pos=68, past=0, dtype=torch.float32, device="cpu")
    ids = torch.randint(0, su.vocab_size, (2, 4))
    a0, _ = m(ids, past=0)
    a64, _ = m(ids, past=64)
    assert a0.shape == a64.shape and not torch.allclose(a0, a64)
    with pytest.raises(ValueError, match="KV cache pool"):
        m(torch.randint(0, su.vocab_size, (3, 4)), past=64)  # 3 x 68 slots > the pool's 136
