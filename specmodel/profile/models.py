"""The tensor-parallel target stack and the EAGLE-3 drafter, built from :mod:`.configs` shapes.

Per target forward: 1 all-reduce in the vocab-parallel embedding, then per layer one after the
attention ``o_proj`` (GQA or MLA) and one after the MLP / MoE (routed + shared experts summed
first, as SGLang's DeepseekV2MoE does), then the LM head's logits all-gather: ``2 L + 1``
all-reduces of ``tokens × hidden`` elements and 1 all-gather. The drafter (SGLang
``LlamaForCausalLMEagle3``): embedding, ``o_proj``, MLP down = 3 all-reduces, + 1 all-gather.

Attention reads a static KV cache of ``context_len`` tokens per request (random, written once)
plus the new tokens; verify/draft-extend use a causal mask over the new tokens, draft steps with
``topk`` > 1 a diagonal one (each branch sees the cache and itself).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specmodel.profile.configs import DrafterShape, ModelShape
from specmodel.profile.tp import (
    ColumnParallelLinear,
    Comm,
    ParallelLMHead,
    ReplicatedLinear,
    RMSNorm,
    Rotary,
    RowParallelLinear,
    VocabParallelEmbedding,
    shard,
)


def attn_mask(t: int, past: int, kind: str, device: Any) -> torch.Tensor | None:
    """Boolean (t, past + t) mask, True = may attend. None when every position may (t == 1)."""
    if t == 1:
        return None
    new = torch.ones(t, t, dtype=torch.bool, device=device)
    new = torch.tril(new) if kind == "causal" else torch.eye(t, dtype=torch.bool, device=device)
    return torch.cat([torch.ones(t, past, dtype=torch.bool, device=device), new], dim=1)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
          scale: float | None = None) -> torch.Tensor:
    """q (b, h, t, d), k/v (b, kv, T, d[v]); kv heads broadcast to h (GQA / MQA)."""
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


class KVCache:
    """Static per-layer cache: ``rows`` requests × (``past`` + ``max_new``) positions."""

    def __init__(self, rows: int, heads: int, past: int, max_new: int, dim_k: int, dim_v: int | None, *,
                 dtype: torch.dtype, device: Any) -> None:
        self.past = past
        n = past + max_new
        self.k = torch.randn(rows, heads, n, dim_k, dtype=dtype, device=device) * 0.1
        self.v = None if dim_v is None else torch.randn(rows, heads, n, dim_v, dtype=dtype, device=device) * 0.1

    def write(self, b: int, k: torch.Tensor, v: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        t = k.shape[2]
        end = self.past + t
        self.k[:b, :, self.past:end] = k
        if self.v is not None and v is not None:
            self.v[:b, :, self.past:end] = v
        return self.k[:b, :, :end], (self.v[:b, :, :end] if self.v is not None else None)


class GQAAttention(nn.Module):
    def __init__(self, *, in_dim: int, hidden: int, heads: int, kv_heads: int, head_dim: int, comm: Comm,
                 qkv_bias: bool, qk_norm: bool, eps: float, cache_rows: int, past: int, max_new: int,
                 dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        w = comm.world
        self.h = shard(heads, w, "num_attention_heads")
        self.kv = kv_heads // w if kv_heads >= w else 1  # fewer KV heads than ranks: replicated
        self.d = head_dim
        self.qkv = ColumnParallelLinear(in_dim, (self.h + 2 * self.kv) * head_dim * w, comm, dtype=dtype,
                                        device=device, bias=qkv_bias)
        self.o_proj = RowParallelLinear(heads * head_dim, hidden, comm, dtype=dtype, device=device)
        self.q_norm = RMSNorm(head_dim, eps, dtype=dtype, device=device) if qk_norm else None
        self.k_norm = RMSNorm(head_dim, eps, dtype=dtype, device=device) if qk_norm else None
        self.rotary = Rotary(head_dim, past + max_new, dtype=dtype, device=device)
        self.cache = KVCache(cache_rows, self.kv, past, max_new, head_dim, head_dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([self.h * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = q.view(b, t, self.h, self.d).transpose(1, 2)
        k = k.view(b, t, self.kv, self.d).transpose(1, 2)
        v = v.view(b, t, self.kv, self.d).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary.apply(q, pos), self.rotary.apply(k, pos)
        kk, vv = self.cache.write(b, k, v)
        assert vv is not None
        out = _sdpa(q, kk, vv, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.h * self.d))


class MLAAttention(nn.Module):
    """DeepSeek multi-head latent attention, decode-style (weights absorbed into q and out):
    the cache holds the compressed latent + rope key once per token (shared by all heads)."""

    def __init__(self, s: ModelShape, comm: Comm, *, cache_rows: int, past: int, max_new: int,
                 dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        w = comm.world
        H = s.hidden_size
        self.h = shard(s.num_heads, w, "num_attention_heads")
        self.nope, self.rope, self.vd, self.lora = s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim, s.kv_lora_rank
        qk = self.nope + self.rope
        self.q_a: ReplicatedLinear | None = None
        if s.q_lora_rank:
            self.q_a = ReplicatedLinear(H, s.q_lora_rank, dtype=dtype, device=device)
            self.q_a_norm = RMSNorm(s.q_lora_rank, s.rms_norm_eps, dtype=dtype, device=device)
            self.q_b = ColumnParallelLinear(s.q_lora_rank, s.num_heads * qk, comm, dtype=dtype, device=device)
        else:
            self.q_b = ColumnParallelLinear(H, s.num_heads * qk, comm, dtype=dtype, device=device)
        self.kv_a = ReplicatedLinear(H, self.lora + self.rope, dtype=dtype, device=device)
        self.kv_a_norm = RMSNorm(self.lora, s.rms_norm_eps, dtype=dtype, device=device)
        kv_b = ColumnParallelLinear(self.lora, s.num_heads * (self.nope + self.vd), comm, dtype=dtype, device=device)
        wkv = kv_b.weight.view(self.h, self.nope + self.vd, self.lora)
        self.w_kc = wkv[:, : self.nope, :].contiguous()  # (h, nope, lora)
        self.w_vc = wkv[:, self.nope:, :].contiguous()  # (h, v, lora)
        self.o_proj = RowParallelLinear(s.num_heads * self.vd, H, comm, dtype=dtype, device=device)
        self.rotary = Rotary(self.rope, past + max_new, dtype=dtype, device=device)
        self.cache = KVCache(cache_rows, 1, past, max_new, self.lora + self.rope, None, dtype=dtype, device=device)
        self.scale = 1.0 / (qk ** 0.5)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        q_in = self.q_a_norm(self.q_a(x)) if self.q_a is not None else x
        q = self.q_b(q_in).view(b, t, self.h, self.nope + self.rope).transpose(1, 2)
        q_nope, q_rope = q.split([self.nope, self.rope], dim=-1)
        q_lat = torch.matmul(q_nope, self.w_kc)  # (b, h, t, lora)
        q_rope = self.rotary.apply(q_rope, pos)
        c, k_rope = self.kv_a(x).split([self.lora, self.rope], dim=-1)
        c = self.kv_a_norm(c)
        k_rope = self.rotary.apply(k_rope, pos)
        kk, _ = self.cache.write(b, torch.cat([c, k_rope], dim=-1).unsqueeze(1), None)
        out_lat = _sdpa(torch.cat([q_lat, q_rope], dim=-1), kk, kk[..., : self.lora], mask, scale=self.scale)
        out = torch.matmul(out_lat, self.w_vc.transpose(1, 2))  # (b, h, t, v)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.h * self.vd))


class MLP(nn.Module):
    """SwiGLU: gate/up column-parallel, down row-parallel (``reduce=False``: no all-reduce, the
    caller sums partial outputs first — the MoE shared expert)."""

    def __init__(self, hidden: int, inter: int, comm: Comm, *, dtype: torch.dtype, device: Any,
                 reduce: bool = True) -> None:
        super().__init__()
        self.il = shard(inter, comm.world, "intermediate_size")
        self.gate_up = ColumnParallelLinear(hidden, 2 * inter, comm, dtype=dtype, device=device)
        if reduce:
            self.down: nn.Module = RowParallelLinear(inter, hidden, comm, dtype=dtype, device=device)
        else:
            self.down = ReplicatedLinear(self.il, hidden, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g, u = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(g) * u)


class MoE(nn.Module):
    """Routed experts (each sharded along its intermediate dim across the TP ranks) + shared
    experts; one all-reduce of the sum. Router replicated (same on every rank → same routing)."""

    def __init__(self, s: ModelShape, comm: Comm, *, dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        self.comm = comm
        H = s.hidden_size
        self.topk = s.topk
        self.sigmoid = s.family == "deepseek"
        self.gate = ReplicatedLinear(H, s.n_experts, dtype=dtype, device=device)
        il = shard(s.moe_intermediate_size, comm.world, "moe_intermediate_size")
        self.w13 = nn.Parameter(torch.randn(s.n_experts, 2 * il, H, dtype=dtype, device=device) / H ** 0.5,
                                requires_grad=False)
        self.w2 = nn.Parameter(torch.randn(s.n_experts, H, il, dtype=dtype, device=device) / (il * comm.world) ** 0.5,
                               requires_grad=False)
        self.shared = MLP(H, s.shared_intermediate_size, comm, dtype=dtype, device=device, reduce=False) \
            if s.shared_intermediate_size else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        logits = self.gate(xf).float()
        scores = logits.sigmoid() if self.sigmoid else logits.softmax(dim=-1)
        w, ids = scores.topk(self.topk, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(xf)
        flat = ids.flatten()
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=self.w13.shape[0]).tolist()
        tok = order // self.topk
        wsel = w.flatten()[order]
        start = 0
        for e, n in enumerate(counts):  # only the experts some token was routed to
            if n == 0:
                continue
            idx = tok[start:start + n]
            g, u = F.linear(xf[idx], self.w13[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(g) * u, self.w2[e]) * wsel[start:start + n, None]
            out.index_add_(0, idx, y)
            start += n
        if self.shared is not None:
            out = out + self.shared(xf)
        return self.comm.all_reduce(out).view(shape)


class DecoderLayer(nn.Module):
    def __init__(self, s: ModelShape, i: int, comm: Comm, *, cache_rows: int, past: int, max_new: int,
                 dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        H = s.hidden_size
        self.norm1 = RMSNorm(H, s.rms_norm_eps, dtype=dtype, device=device)
        self.norm2 = RMSNorm(H, s.rms_norm_eps, dtype=dtype, device=device)
        kw: dict[str, Any] = dict(cache_rows=cache_rows, past=past, max_new=max_new, dtype=dtype, device=device)
        if s.attention == "mla":
            self.attn: nn.Module = MLAAttention(s, comm, **kw)
        else:
            self.attn = GQAAttention(in_dim=H, hidden=H, heads=s.num_heads, kv_heads=s.num_kv_heads,
                                     head_dim=s.head_dim, comm=comm, qkv_bias=s.qkv_bias, qk_norm=s.qk_norm,
                                     eps=s.rms_norm_eps, **kw)
        self.mlp: nn.Module = MoE(s, comm, dtype=dtype, device=device) if s.layer_is_moe(i) else \
            MLP(H, s.intermediate_size, comm, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), pos, mask)
        return x + self.mlp(self.norm2(x))


class TargetModel(nn.Module):
    """The target: embedding → layers → norm → LM head. Returns (logits, aux hidden states)."""

    def __init__(self, s: ModelShape, comm: Comm, *, cache_rows: int, past: int, max_new: int,
                 dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        self.shape = s
        self.past = past
        self.device = device
        self.embed = VocabParallelEmbedding(s.vocab_size, s.hidden_size, comm, dtype=dtype, device=device)
        self.layers = nn.ModuleList(DecoderLayer(s, i, comm, cache_rows=cache_rows, past=past, max_new=max_new,
                                                 dtype=dtype, device=device) for i in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps, dtype=dtype, device=device)
        self.lm_head = ParallelLMHead(s.vocab_size, s.hidden_size, comm, dtype=dtype, device=device)
        self.aux = set(s.aux_layer_ids)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, mask_kind: str = "causal") -> tuple[torch.Tensor, torch.Tensor]:
        b, t = ids.shape
        pos = torch.arange(self.past, self.past + t, device=ids.device)
        mask = attn_mask(t, self.past, mask_kind, ids.device)
        x = self.embed(ids)
        aux: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            x = layer(x, pos, mask)
            if i in self.aux:
                aux.append(x)
        while len(aux) < 3:  # EAGLE-3 reads three hidden states
            aux.append(x)
        return self.lm_head(self.norm(x)), torch.cat(aux[:3], dim=-1)


class Drafter(nn.Module):
    """EAGLE-3 draft model (one decoder layer over [embedding, hidden]). ``hidden`` of width
    3 × target hidden (the target's aux states, draft-extend) goes through ``fc`` first."""

    def __init__(self, d: DrafterShape, comm: Comm, *, cache_rows: int, past: int, max_new: int,
                 dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        H = d.hidden_size
        self.past = past
        self.embed = VocabParallelEmbedding(d.vocab_size, H, comm, dtype=dtype, device=device)
        self.fc = ReplicatedLinear(3 * d.target_hidden_size, H, dtype=dtype, device=device)
        self.input_norm = RMSNorm(H, d.rms_norm_eps, dtype=dtype, device=device)
        self.hidden_norm = RMSNorm(H, d.rms_norm_eps, dtype=dtype, device=device)
        self.attn = GQAAttention(in_dim=2 * H, hidden=H, heads=d.num_heads, kv_heads=d.num_kv_heads,
                                 head_dim=d.head_dim, comm=comm, qkv_bias=False, qk_norm=False, eps=d.rms_norm_eps,
                                 cache_rows=cache_rows, past=past, max_new=max_new, dtype=dtype, device=device)
        self.post_norm = RMSNorm(H, d.rms_norm_eps, dtype=dtype, device=device)
        self.mlp = MLP(H, d.intermediate_size, comm, dtype=dtype, device=device)
        self.norm = RMSNorm(H, d.rms_norm_eps, dtype=dtype, device=device)
        self.lm_head = ParallelLMHead(d.draft_vocab_size, H, comm, dtype=dtype, device=device)
        self.hidden = H

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, hidden: torch.Tensor, mask_kind: str = "causal",
                last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = ids.shape
        pos = torch.arange(self.past, self.past + t, device=ids.device)
        mask = attn_mask(t, self.past, mask_kind, ids.device)
        e = self.embed(ids)
        if hidden.shape[-1] != self.hidden:
            hidden = self.fc(hidden)
        h = hidden + self.attn(torch.cat([self.input_norm(e), self.hidden_norm(hidden)], dim=-1), pos, mask)
        h = h + self.mlp(self.post_norm(h))
        out = h[:, -1:] if last_only else h
        return self.lm_head(self.norm(out)), h
