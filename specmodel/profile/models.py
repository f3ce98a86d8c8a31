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
from specmodel.schema.shapes import DrafterShape, ModelShape


def attn_mask(t: int, past: int, kind: str, device: Any) -> Any:
    """What may attend to what for ``t`` new tokens after ``past`` cached ones. None when every
    position may (t == 1). ``causal`` on a GPU: a lower-right causal bias (SDPA keeps its fused
    kernels, no (t, past + t) tensor); otherwise a boolean (t, past + t) mask, True = may attend
    (on the CPU the same result, without importing torch._dynamo — 2 s per rank start)."""
    if t == 1:
        return None
    if kind == "causal" and torch.device(device).type == "cuda":
        from torch.nn.attention.bias import causal_lower_right

        return causal_lower_right(t, past + t)
    new = torch.tril(torch.ones(t, t, dtype=torch.bool, device=device)) if kind == "causal" else \
        torch.eye(t, dtype=torch.bool, device=device)
    return torch.cat([torch.ones(t, past, dtype=torch.bool, device=device), new], dim=1)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, scale: float | None = None) -> torch.Tensor:
    """q (b, h, t, d), k/v (b, kv, T, d[v]); kv heads shared by h / kv query heads (GQA / MQA)
    inside SDPA (``enable_gqa``: no repeat_interleave copy of the cache per forward)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1])


class KVCache:
    """Static per-layer cache, one flat pool of ``pool_tokens`` token slots (random, written
    once): a forward of ``b`` requests at ``past`` cached tokens views the first
    ``b × (past + t)`` slots as (b, heads, past + t, dim), so the pool is sized by the largest
    point of the sweep, not by max batch × max context."""

    def __init__(self, pool_tokens: int, heads: int, dim_k: int, dim_v: int | None, *,
                 dtype: torch.dtype, device: Any) -> None:
        self.heads, self.dim_k, self.dim_v = heads, dim_k, dim_v
        self.k = torch.randn(pool_tokens * heads * dim_k, dtype=dtype, device=device) * 0.1
        self.v = None if dim_v is None else torch.randn(pool_tokens * heads * dim_v, dtype=dtype, device=device) * 0.1

    @property
    def pool_tokens(self) -> int:
        return self.k.numel() // (self.heads * self.dim_k)

    def write(self, b: int, past: int, k: torch.Tensor, v: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        t = k.shape[2]
        n = past + t
        if b * n > self.pool_tokens:
            raise ValueError(f"KV cache pool holds {self.pool_tokens} token slots; {b} x {n} needed")
        kk = self.k[: b * self.heads * n * self.dim_k].view(b, self.heads, n, self.dim_k)
        kk[:, :, past:] = k
        vv = None
        if self.v is not None and v is not None and self.dim_v is not None:
            vv = self.v[: b * self.heads * n * self.dim_v].view(b, self.heads, n, self.dim_v)
            vv[:, :, past:] = v
        return kk, vv


class GQAAttention(nn.Module):
    def __init__(self, *, in_dim: int, hidden: int, heads: int, kv_heads: int, head_dim: int, comm: Comm,
                 qkv_bias: bool, qk_norm: bool, eps: float, kv_tokens: int, max_pos: int,
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
        self.rotary = Rotary(head_dim, max_pos, dtype=dtype, device=device)
        self.cache = KVCache(kv_tokens, self.kv, head_dim, head_dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: Any, past: int) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([self.h * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = q.view(b, t, self.h, self.d).transpose(1, 2)
        k = k.view(b, t, self.kv, self.d).transpose(1, 2)
        v = v.view(b, t, self.kv, self.d).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary.apply(q, pos), self.rotary.apply(k, pos)
        kk, vv = self.cache.write(b, past, k, v)
        assert vv is not None
        out = _sdpa(q, kk, vv, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.h * self.d))


class MLAAttention(nn.Module):
    """DeepSeek multi-head latent attention, decode-style (weights absorbed into q and out):
    the cache holds the compressed latent + rope key once per token (shared by all heads)."""

    def __init__(self, s: ModelShape, comm: Comm, *, kv_tokens: int, max_pos: int,
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
        self.rotary = Rotary(self.rope, max_pos, dtype=dtype, device=device)
        self.cache = KVCache(kv_tokens, 1, self.lora + self.rope, None, dtype=dtype, device=device)
        self.scale = 1.0 / (qk ** 0.5)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: Any, past: int) -> torch.Tensor:
        b, t, _ = x.shape
        q_in = self.q_a_norm(self.q_a(x)) if self.q_a is not None else x
        q = self.q_b(q_in).view(b, t, self.h, self.nope + self.rope).transpose(1, 2)
        q_nope, q_rope = q.split([self.nope, self.rope], dim=-1)
        q_lat = torch.matmul(q_nope, self.w_kc)  # (b, h, t, lora)
        q_rope = self.rotary.apply(q_rope, pos)
        c, k_rope = self.kv_a(x).split([self.lora, self.rope], dim=-1)
        c = self.kv_a_norm(c)
        k_rope = self.rotary.apply(k_rope, pos)
        kk, _ = self.cache.write(b, past, torch.cat([c, k_rope], dim=-1).unsqueeze(1), None)
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
    experts; one all-reduce of the sum. Router replicated (same on every rank → same routing).

    ``static``: tokens sorted by expert and run as one grouped GEMM over per-expert offsets kept
    on the device (``torch._grouped_mm``, what fused-MoE kernels do): same FLOPs as the loop,
    static shapes, no host sync — capturable in a CUDA graph. Otherwise a loop over the experts
    tokens were routed to (``bincount().tolist()`` syncs the host once per layer)."""

    def __init__(self, s: ModelShape, comm: Comm, *, dtype: torch.dtype, device: Any, static: bool = False) -> None:
        super().__init__()
        self.comm = comm
        H = s.hidden_size
        self.topk = s.topk
        self.sigmoid = s.family == "deepseek"
        self.static = static
        # torch's grouped GEMM takes bf16 on CUDA (sm90+); elsewhere on a GPU each routed slot
        # gathers its expert's weights (same FLOPs, more memory traffic, still static)
        self.grouped = hasattr(torch, "_grouped_mm") and (torch.device(device).type == "cpu" or dtype == torch.bfloat16)
        self.gate = ReplicatedLinear(H, s.n_experts, dtype=dtype, device=device)
        il = shard(s.moe_intermediate_size, comm.world, "moe_intermediate_size")
        self.w13 = nn.Parameter(torch.randn(s.n_experts, 2 * il, H, dtype=dtype, device=device) / H ** 0.5,
                                requires_grad=False)
        self.w2 = nn.Parameter(torch.randn(s.n_experts, H, il, dtype=dtype, device=device) / (il * comm.world) ** 0.5,
                               requires_grad=False)
        self.shared = MLP(H, s.shared_intermediate_size, comm, dtype=dtype, device=device, reduce=False) \
            if s.shared_intermediate_size else None

    def route(self, xf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(token of each sorted slot, weight of each sorted slot, order) for the top-k routing."""
        logits = self.gate(xf).float()
        scores = logits.sigmoid() if self.sigmoid else logits.softmax(dim=-1)
        w, ids = scores.topk(self.topk, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(xf.dtype)
        flat = ids.flatten()
        order = flat.argsort(stable=True)
        return flat, w.flatten()[order], order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        flat, wsel, order = self.route(xf)
        tok = order // self.topk
        E = self.w13.shape[0]
        if self.static:
            counts = torch.zeros(E, dtype=torch.int32, device=x.device).scatter_add_(
                0, flat, torch.ones_like(flat, dtype=torch.int32))
            offs = counts.cumsum(0, dtype=torch.int32)  # stays on the device: no host sync
            xs = xf.index_select(0, tok)
            if self.grouped:
                g, u = torch._grouped_mm(xs, self.w13.transpose(-2, -1), offs=offs).chunk(2, dim=-1)
                y = torch._grouped_mm(F.silu(g) * u, self.w2.transpose(-2, -1), offs=offs)
            else:
                ex = flat[order]
                g, u = torch.bmm(self.w13.index_select(0, ex), xs[:, :, None]).squeeze(-1).chunk(2, dim=-1)
                y = torch.bmm(self.w2.index_select(0, ex), (F.silu(g) * u)[:, :, None]).squeeze(-1)
            y = y * wsel[:, None]
            out = torch.zeros_like(xf).index_add_(0, tok, y)
        else:
            out = torch.zeros_like(xf)
            start = 0
            for e, n in enumerate(torch.bincount(flat, minlength=E).tolist()):  # only the experts in use
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
    def __init__(self, s: ModelShape, i: int, comm: Comm, *, kv_tokens: int, max_pos: int,
                 dtype: torch.dtype, device: Any, static_moe: bool = False) -> None:
        super().__init__()
        H = s.hidden_size
        self.norm1 = RMSNorm(H, s.rms_norm_eps, dtype=dtype, device=device)
        self.norm2 = RMSNorm(H, s.rms_norm_eps, dtype=dtype, device=device)
        kw: dict[str, Any] = dict(kv_tokens=kv_tokens, max_pos=max_pos, dtype=dtype, device=device)
        if s.attention == "mla":
            self.attn: nn.Module = MLAAttention(s, comm, **kw)
        else:
            self.attn = GQAAttention(in_dim=H, hidden=H, heads=s.num_heads, kv_heads=s.num_kv_heads,
                                     head_dim=s.head_dim, comm=comm, qkv_bias=s.qkv_bias, qk_norm=s.qk_norm,
                                     eps=s.rms_norm_eps, **kw)
        self.mlp: nn.Module = MoE(s, comm, dtype=dtype, device=device, static=static_moe) if s.layer_is_moe(i) else \
            MLP(H, s.intermediate_size, comm, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: Any, past: int) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), pos, mask, past)
        return x + self.mlp(self.norm2(x))


class TargetModel(nn.Module):
    """The target: embedding → layers → norm → LM head. Returns (logits, aux hidden states).

    ``kv_tokens``: KV pool slots per layer (largest batch × (context + new tokens) of the run);
    ``max_pos``: largest context + new tokens (rotary table); ``past``: the default context.
    ``static_moe``: MoE routing with static shapes and no host sync (CUDA-graph capture)."""

    def __init__(self, s: ModelShape, comm: Comm, *, kv_tokens: int, max_pos: int, past: int,
                 dtype: torch.dtype, device: Any, static_moe: bool = False) -> None:
        super().__init__()
        self.shape = s
        self.past = past
        self.device = device
        self.embed = VocabParallelEmbedding(s.vocab_size, s.hidden_size, comm, dtype=dtype, device=device)
        self.layers = nn.ModuleList(DecoderLayer(s, i, comm, kv_tokens=kv_tokens, max_pos=max_pos, dtype=dtype,
                                                 device=device, static_moe=static_moe) for i in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps, dtype=dtype, device=device)
        self.lm_head = ParallelLMHead(s.vocab_size, s.hidden_size, comm, dtype=dtype, device=device)
        self.aux = set(s.aux_layer_ids)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, mask_kind: str = "causal", past: int | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = ids.shape
        past = self.past if past is None else past
        pos = torch.arange(past, past + t, device=ids.device)
        mask = attn_mask(t, past, mask_kind, ids.device)
        x = self.embed(ids)
        aux: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            x = layer(x, pos, mask, past)
            if i in self.aux:
                aux.append(x)
        while len(aux) < 3:  # EAGLE-3 reads three hidden states
            aux.append(x)
        return self.lm_head(self.norm(x)), torch.cat(aux[:3], dim=-1)


class Drafter(nn.Module):
    """EAGLE-3 draft model (one decoder layer over [embedding, hidden]). ``hidden`` of width
    3 × target hidden (the target's aux states, draft-extend) goes through ``fc`` first."""

    def __init__(self, d: DrafterShape, comm: Comm, *, kv_tokens: int, max_pos: int, past: int,
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
                                 kv_tokens=kv_tokens, max_pos=max_pos, dtype=dtype, device=device)
        self.post_norm = RMSNorm(H, d.rms_norm_eps, dtype=dtype, device=device)
        self.mlp = MLP(H, d.intermediate_size, comm, dtype=dtype, device=device)
        self.norm = RMSNorm(H, d.rms_norm_eps, dtype=dtype, device=device)
        self.lm_head = ParallelLMHead(d.draft_vocab_size, H, comm, dtype=dtype, device=device)
        self.hidden = H

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, hidden: torch.Tensor, mask_kind: str = "causal",
                last_only: bool = False, past: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = ids.shape
        past = self.past if past is None else past
        pos = torch.arange(past, past + t, device=ids.device)
        mask = attn_mask(t, past, mask_kind, ids.device)
        e = self.embed(ids)
        if hidden.shape[-1] != self.hidden:
            hidden = self.fc(hidden)
        h = hidden + self.attn(torch.cat([self.input_norm(e), self.hidden_norm(hidden)], dim=-1), pos, mask, past)
        h = h + self.mlp(self.post_norm(h))
        out = h[:, -1:] if last_only else h
        return self.lm_head(self.norm(out)), h
