"""The shapes of a target model and its EAGLE-3 drafter, as a profile records them
(``model.target`` / ``model.drafter`` in profile.json) and the profiler builds them
(:mod:`specmodel.profile.configs` reads them from Hugging Face configs)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from specmodel.schema.phases import collectives_per_forward


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """Everything the TP stack needs to build one target model (all sizes are totals, not per rank)."""

    name: str
    family: str
    model_type: str
    architecture: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    attention: str = "gqa"  # gqa | mla
    qkv_bias: bool = False
    qk_norm: bool = False
    rms_norm_eps: float = 1e-6
    # MLA (deepseek)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # MoE (0 experts = dense)
    n_experts: int = 0
    topk: int = 0
    moe_intermediate_size: int = 0
    shared_intermediate_size: int = 0
    first_dense_layers: int = 0
    moe_every: int = 1
    aux_layer_ids: tuple[int, ...] = ()

    def layer_is_moe(self, i: int) -> bool:
        return self.n_experts > 0 and i >= self.first_dense_layers and (i + 1) % max(self.moe_every, 1) == 0

    @property
    def allreduce_per_forward(self) -> int:
        return collectives_per_forward("decode", self.num_layers)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aux_layer_ids"] = list(self.aux_layer_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelShape:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["aux_layer_ids"] = tuple(kw.get("aux_layer_ids") or ())
        return cls(**kw)


@dataclass(frozen=True, kw_only=True)
class DrafterShape:
    """An EAGLE-3 drafter (SGLang ``LlamaForCausalLMEagle3``): one decoder layer whose attention
    reads [embedding, hidden] (2 × hidden), an ``fc`` (3 × target hidden → hidden) over the target's
    aux hidden states, the target vocabulary for the embedding and a draft vocabulary for the head.
    Same TP degree as the target: embedding, ``o_proj`` and MLP down all-reduce (3 per forward)."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    rms_norm_eps: float = 1e-6

    allreduce_per_forward: int = 3

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DrafterShape:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
