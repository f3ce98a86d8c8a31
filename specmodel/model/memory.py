"""Per-rank memory of a tensor-parallel model: weight bytes and KV-cache bytes from its shape,
and how many layers fit beside them (sizing a GPU profile run; the TP what-if's memory check)."""

from __future__ import annotations

import math

from specmodel.schema.shapes import DrafterShape, ModelShape


def per_rank_weight_bytes(shape: ModelShape, tp: int, dtype_bytes: int) -> tuple[int, int]:
    """(bytes per layer, bytes outside the layers) of one rank's weights: for fitting a model in memory."""
    H = shape.hidden_size
    if shape.attention == "mla":
        qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim
        attn = (H * shape.q_lora_rank + shape.q_lora_rank * shape.num_heads * qk // tp if shape.q_lora_rank
                else H * shape.num_heads * qk // tp)
        attn += H * (shape.kv_lora_rank + shape.qk_rope_head_dim)
        attn += shape.kv_lora_rank * shape.num_heads * (shape.qk_nope_head_dim + shape.v_head_dim) // tp
        attn += shape.num_heads * shape.v_head_dim * H // tp
    else:
        attn = H * (shape.num_heads + 2 * max(shape.num_kv_heads, tp)) * shape.head_dim // tp
        attn += shape.num_heads * shape.head_dim * H // tp
    dense = 3 * H * shape.intermediate_size // tp
    moe = 3 * H * (shape.n_experts * shape.moe_intermediate_size + shape.shared_intermediate_size) // tp \
        + H * shape.n_experts
    n_moe = sum(1 for i in range(shape.num_layers) if shape.layer_is_moe(i))
    per_layer = attn + (moe if n_moe else dense)
    outside = 2 * shape.vocab_size * H // tp
    return per_layer * dtype_bytes, outside * dtype_bytes


def layers_that_fit(shape: ModelShape, tp: int, dtype_bytes: int, free_bytes: int, fraction: float = 0.6) -> int:
    per_layer, outside = per_rank_weight_bytes(shape, tp, dtype_bytes)
    budget = free_bytes * fraction - outside
    return max(0, min(shape.num_layers, int(math.floor(budget / max(per_layer, 1)))))


def kv_bytes_per_token(shape: ModelShape | DrafterShape, tp: int, dtype_bytes: int) -> int:
    """One layer's KV-cache bytes per token on one rank, as :mod:`.models` allocates it: MLA keeps
    the compressed latent + rope key once (shared by all heads); GQA keys and values of this
    rank's KV heads (replicated when there are fewer KV heads than ranks)."""
    if isinstance(shape, ModelShape) and shape.attention == "mla":
        return (shape.kv_lora_rank + shape.qk_rope_head_dim) * dtype_bytes
    kv = shape.num_kv_heads // tp if shape.num_kv_heads >= tp else 1
    return 2 * kv * shape.head_dim * dtype_bytes


def layers_that_fit_with_kv(shape: ModelShape, tp: int, dtype_bytes: int, free_bytes: int, kv_tokens: int,
                            fraction: float = 0.6) -> int:
    """:func:`layers_that_fit` when each layer also holds a KV pool of ``kv_tokens`` token slots."""
    per_layer, outside = per_rank_weight_bytes(shape, tp, dtype_bytes)
    per_layer += kv_tokens * kv_bytes_per_token(shape, tp, dtype_bytes)
    budget = free_bytes * fraction - outside
    return max(0, min(shape.num_layers, int(math.floor(budget / max(per_layer, 1)))))
