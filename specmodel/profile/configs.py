"""Model shapes for the TP profiler: Hugging Face ``config.json`` → :class:`ModelShape`, named
presets, and the scaling that makes the CPU default finish in minutes.

Pure Python (no torch): the command validates ``--model-config`` / ``--preset`` before it
spawns any rank, so a bad file costs one line and exit 2.

Families (what decides the all-reduce points of a forward):

* ``deepseek`` — DeepSeek-V2/V3, Kimi-K2 / K2.5: MLA attention (replicated ``q_a``/``kv_a``
  down-projections, column-parallel ``q_b``/``kv_b``, row-parallel ``o_proj``) and MoE layers
  (routed experts sharded along their intermediate dim, shared experts likewise, one
  all-reduce after routed + shared are summed) after ``first_k_dense_replace`` dense layers.
* ``llama`` — Llama / Mistral: GQA attention + SwiGLU MLP.
* ``qwen`` — Qwen2/Qwen3 (dense; Qwen2 has a QKV bias, Qwen3 a per-head q/k norm) and
  Qwen2-MoE / Qwen3-MoE (MoE every ``decoder_sparse_step`` layer).

Every family: a vocab-parallel embedding (1 all-reduce), per layer one all-reduce after the
attention ``o_proj`` and one after the MLP/MoE down projection, and a vocab-parallel LM head
whose logits are all-gathered: ``2 * layers + 1`` all-reduces and 1 all-gather per forward,
each all-reduce message ``tokens * hidden * dtype bytes`` (SGLang/Megatron tensor parallelism).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from specmodel.errors import FieldError, SpecmodelError
from specmodel.hfconfig import HFConfig
from specmodel.io import read_json
from specmodel.schema.shapes import DrafterShape, ModelShape

FAMILIES = ("deepseek", "llama", "qwen")

#: model_type -> family. ``kimi_k25`` is the multimodal wrapper whose ``text_config`` is a DeepSeek-V3.
MODEL_TYPES: dict[str, str] = {
    "deepseek_v2": "deepseek", "deepseek_v3": "deepseek", "deepseek_v32": "deepseek",
    "kimi_k2": "deepseek", "kimi_k25": "deepseek",
    "llama": "llama", "mistral": "llama",
    "qwen2": "qwen", "qwen3": "qwen", "qwen2_moe": "qwen", "qwen3_moe": "qwen",
}
ARCHITECTURES: dict[str, str] = {
    "DeepseekV2ForCausalLM": "deepseek", "DeepseekV3ForCausalLM": "deepseek", "DeepseekV32ForCausalLM": "deepseek",
    "KimiK25ForConditionalGeneration": "deepseek",
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen", "Qwen3ForCausalLM": "qwen", "Qwen2MoeForCausalLM": "qwen",
    "Qwen3MoeForCausalLM": "qwen",
}

#: Named presets: the fields of the model's public config.json that matter here.
PRESETS: dict[str, dict[str, Any]] = {
    "kimi-k2.5": {
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "text_config": {
            "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
            "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
            "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
            "n_routed_experts": 384, "num_experts_per_tok": 8, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "vocab_size": 163840, "rms_norm_eps": 1e-6,
        },
    },
    "kimi-k2": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
        "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 384,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 1, "vocab_size": 163840,
    },
    "deepseek-v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
        "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3, "vocab_size": 129280,
    },
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 128256,
    },
    "llama-3.1-70b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
        "intermediate_size": 28672, "vocab_size": 128256,
    },
    "qwen3-32b": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120,
        "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 25600, "vocab_size": 151936,
    },
    "qwen3-235b-a22b": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
        "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
        "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_experts": 128,
        "num_experts_per_tok": 8, "decoder_sparse_step": 1, "vocab_size": 151936,
    },
}
DEFAULT_PRESET = "kimi-k2.5"

#: CPU default (scaled) sizes: the whole default sweep at --tp 8 on 2 cores in ~2 minutes.
CPU_LAYERS = 4
CPU_HIDDEN = 512
CPU_MAX_EXPERTS = 8
CPU_MAX_TOPK = 2
#: The LM head dominates a scaled forward on the CPU (memory-bound GEMV): cap its vocabulary.
CPU_MAX_VOCAB = 4096
#: EAGLE-3 drafters for these targets use a 32k draft vocabulary.
DRAFT_VOCAB = 32000


# ---------------------------------------------------------------- parsing


def _read_config(path: str | Path) -> HFConfig:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    raw = read_json(p)  # missing / unreadable / invalid JSON: one SpecmodelError naming the file
    if not isinstance(raw, dict):
        raise SpecmodelError(f"{p}: expected a JSON object (a Hugging Face config.json)")
    return HFConfig(path=p, raw=raw)


def _family(cfg: HFConfig, where: str) -> str:
    for sec in (cfg.raw, cfg):  # the wrapper's own model_type (kimi_k25) first, then the text model's
        mt = sec.get("model_type")
        if isinstance(mt, str) and mt in MODEL_TYPES:
            return MODEL_TYPES[mt]
    archs = cfg.raw.get("architectures") or cfg.get("architectures") or []
    for a in archs if isinstance(archs, list) else []:
        if isinstance(a, str) and a in ARCHITECTURES:
            return ARCHITECTURES[a]
    raise SpecmodelError(
        f"{where}: unknown architecture (model_type {cfg.raw.get('model_type')!r}, architectures {archs!r}); "
        f"supported: {', '.join(sorted(MODEL_TYPES))}"
    )


def _get_int(cfg: HFConfig, key: str, where: str, *, default: int | None = None, minimum: int = 1) -> int:
    v = cfg.get(key, default)  # nested text config first (multimodal wrappers)
    if v is None:
        raise SpecmodelError(f"{where}: {key}: missing")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise SpecmodelError(f"{where}: {key}: expected an integer, got {v!r}")
    if int(v) < minimum:
        raise SpecmodelError(f"{where}: {key}: must be >= {minimum}, got {v!r}")
    return int(v)


def _aux_ids(layers: int) -> tuple[int, ...]:
    """SGLang's default EAGLE-3 capture layers: (2, L // 2, L - 3), clamped into the stack."""
    return tuple(min(max(i, 0), layers - 1) for i in (2, layers // 2, layers - 3))


def shape_from_hf(cfg: HFConfig, *, name: str) -> ModelShape:
    """Parse a Hugging Face config (any supported family) into a :class:`ModelShape`."""
    where = str(cfg.path)
    family = _family(cfg, where)
    archs = cfg.architectures or cfg.get("architectures") or [""]
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    model_type = str(cfg.raw.get("model_type") or cfg.get("model_type") or "")
    text_type = str(cfg.get("model_type") or "")
    hidden = _get_int(cfg, "hidden_size", where)
    layers = _get_int(cfg, "num_hidden_layers", where)
    heads = _get_int(cfg, "num_attention_heads", where)
    eps = float(cfg.get("rms_norm_eps") or 1e-6)
    common: dict[str, Any] = dict(
        name=name, family=family, model_type=model_type, architecture=arch, hidden_size=hidden, num_layers=layers,
        vocab_size=_get_int(cfg, "vocab_size", where), num_heads=heads,
        num_kv_heads=_get_int(cfg, "num_key_value_heads", where, default=heads),
        intermediate_size=_get_int(cfg, "intermediate_size", where), rms_norm_eps=eps, aux_layer_ids=_aux_ids(layers))
    if family == "deepseek":
        moe_inter = _get_int(cfg, "moe_intermediate_size", where, default=0, minimum=0)
        shape = ModelShape(
            **common, attention="mla", head_dim=_get_int(cfg, "v_head_dim", where),
            q_lora_rank=_get_int(cfg, "q_lora_rank", where, default=0, minimum=0),  # null in V2-Lite
            kv_lora_rank=_get_int(cfg, "kv_lora_rank", where),
            qk_nope_head_dim=_get_int(cfg, "qk_nope_head_dim", where),
            qk_rope_head_dim=_get_int(cfg, "qk_rope_head_dim", where),
            v_head_dim=_get_int(cfg, "v_head_dim", where),
            n_experts=_get_int(cfg, "n_routed_experts", where, default=0, minimum=0),
            topk=_get_int(cfg, "num_experts_per_tok", where, default=0, minimum=0),
            moe_intermediate_size=moe_inter,
            shared_intermediate_size=_get_int(cfg, "n_shared_experts", where, default=0, minimum=0) * moe_inter,
            first_dense_layers=_get_int(cfg, "first_k_dense_replace", where, default=0, minimum=0),
            moe_every=_get_int(cfg, "moe_layer_freq", where, default=1),
        )
    else:
        n_exp = _get_int(cfg, "num_experts", where, default=0, minimum=0)
        shape = ModelShape(
            **common, attention="gqa", head_dim=_get_int(cfg, "head_dim", where, default=hidden // heads),
            qkv_bias=text_type in ("qwen2", "qwen2_moe") or bool(cfg.get("attention_bias")),
            qk_norm=text_type in ("qwen3", "qwen3_moe"),
            n_experts=n_exp,
            topk=_get_int(cfg, "num_experts_per_tok", where, default=0, minimum=0) if n_exp else 0,
            moe_intermediate_size=_get_int(cfg, "moe_intermediate_size", where, default=0, minimum=0) if n_exp else 0,
            shared_intermediate_size=_get_int(cfg, "shared_expert_intermediate_size", where, default=0, minimum=0),
            moe_every=_get_int(cfg, "decoder_sparse_step", where, default=1),
        )
    if shape.n_experts and not (1 <= shape.topk <= shape.n_experts):
        raise SpecmodelError(f"{where}: num_experts_per_tok: must be in 1..{shape.n_experts}, got {shape.topk}")
    if shape.n_experts and shape.moe_intermediate_size < 1:
        raise SpecmodelError(f"{where}: moe_intermediate_size: missing for a MoE model")
    return shape


def load_shape(model_config: str | None, preset: str | None) -> tuple[ModelShape, str]:
    """(shape, where it came from) from ``--model-config`` or ``--preset`` (default: Kimi-K2.5)."""
    if model_config and preset:
        raise FieldError(None, "give {model_config} or {preset}, not both")
    if model_config:
        cfg = _read_config(model_config)
        return shape_from_hf(cfg, name=cfg.path.parent.name or cfg.path.stem), str(cfg.path)
    key = (preset or DEFAULT_PRESET).lower()
    if key not in PRESETS:
        raise FieldError("preset", f"unknown {preset!r} (known: {', '.join(sorted(PRESETS))})")
    return shape_from_hf(HFConfig(path=Path(f"preset {key}"), raw=PRESETS[key]), name=key), f"preset {key}"


def drafter_for(target: ModelShape, draft_config: str | None = None) -> DrafterShape:
    """The EAGLE-3 drafter: from its own config.json when given, else derived from the target
    (target hidden; GQA heads like the target's, or heads/8 KV heads for an MLA target; the
    target's dense intermediate size; a 32k draft vocabulary)."""
    if draft_config:
        cfg = _read_config(draft_config)
        where = str(cfg.path)
        hidden = _get_int(cfg, "hidden_size", where)
        heads = _get_int(cfg, "num_attention_heads", where)
        return DrafterShape(
            hidden_size=hidden, num_heads=heads, num_kv_heads=_get_int(cfg, "num_key_value_heads", where, default=heads),
            head_dim=_get_int(cfg, "head_dim", where, default=hidden // heads),
            intermediate_size=_get_int(cfg, "intermediate_size", where),
            vocab_size=_get_int(cfg, "vocab_size", where, default=target.vocab_size),
            draft_vocab_size=_get_int(cfg, "draft_vocab_size", where, default=_get_int(cfg, "vocab_size", where)),
            target_hidden_size=_get_int(cfg, "target_hidden_size", where, default=target.hidden_size),
            rms_norm_eps=float(cfg.get("rms_norm_eps") or 1e-6),
        )
    if target.attention == "mla":
        heads, kv, hd = target.num_heads, max(target.num_heads // 8, 1), target.hidden_size // target.num_heads
    else:
        heads, kv, hd = target.num_heads, target.num_kv_heads, target.head_dim
    return DrafterShape(hidden_size=target.hidden_size, num_heads=heads, num_kv_heads=kv, head_dim=hd,
                        intermediate_size=target.intermediate_size, vocab_size=target.vocab_size,
                        draft_vocab_size=min(DRAFT_VOCAB, target.vocab_size),
                        target_hidden_size=target.hidden_size, rms_norm_eps=target.rms_norm_eps)


# ---------------------------------------------------------------- TP checks and scaling


def check_tp(shape: ModelShape, drafter: DrafterShape, tp: int, where: str) -> None:
    """Megatron TP needs the sharded dims divisible by ``tp``; say which one is not."""
    def need(value: int, what: str) -> None:
        if value % tp:
            raise FieldError(None, f"{where}: {what} = {value} is not divisible by {{tp}} {tp}")

    need(shape.num_heads, "num_attention_heads")
    if shape.attention == "gqa" and shape.num_kv_heads % tp and tp % shape.num_kv_heads:
        raise FieldError(None, f"{where}: num_key_value_heads = {shape.num_kv_heads} neither divides nor is "
                                 f"divisible by {{tp}} {tp}")
    need(shape.intermediate_size, "intermediate_size")
    if shape.n_experts:
        need(shape.moe_intermediate_size, "moe_intermediate_size")
        if shape.shared_intermediate_size:
            need(shape.shared_intermediate_size, "shared expert intermediate size")
    need(shape.vocab_size, "vocab_size")
    need(drafter.num_heads, "drafter num_attention_heads")
    if drafter.num_kv_heads % tp and tp % drafter.num_kv_heads:
        raise FieldError(None, f"{where}: drafter num_key_value_heads = {drafter.num_kv_heads} neither divides "
                                 f"nor is divisible by {{tp}} {tp}")
    need(drafter.intermediate_size, "drafter intermediate_size")
    need(drafter.draft_vocab_size, "drafter draft_vocab_size")
    need(drafter.vocab_size, "drafter vocab_size")


def _round_to(x: float, multiple: int, minimum: int) -> int:
    return max(minimum, int(multiple * max(round(x / multiple), 1)))


def _kv_for(kv: int, heads: int, heads_used: int, tp: int) -> int:
    want = max(1, round(kv * heads_used / heads))
    if want >= tp:
        return _round_to(want, tp, tp)
    p = 1  # below tp: a divisor of tp (KV heads are replicated across ranks)
    while p * 2 <= want and tp % (p * 2) == 0:
        p *= 2
    return p


def _summary(s: ModelShape, d: DrafterShape) -> dict[str, Any]:
    return {"num_hidden_layers": s.num_layers, "hidden_size": s.hidden_size, "num_attention_heads": s.num_heads,
            "num_key_value_heads": s.num_kv_heads, "head_dim": s.head_dim, "intermediate_size": s.intermediate_size,
            "vocab_size": s.vocab_size, "n_experts": s.n_experts, "num_experts_per_tok": s.topk,
            "moe_intermediate_size": s.moe_intermediate_size, "q_lora_rank": s.q_lora_rank,
            "kv_lora_rank": s.kv_lora_rank, "qk_nope_head_dim": s.qk_nope_head_dim,
            "qk_rope_head_dim": s.qk_rope_head_dim, "v_head_dim": s.v_head_dim,
            "drafter_hidden_size": d.hidden_size, "drafter_intermediate_size": d.intermediate_size,
            "draft_vocab_size": d.draft_vocab_size}


def scale(shape: ModelShape, drafter: DrafterShape, tp: int, *, layers: int | None, hidden: int | None,
          max_experts: int | None = CPU_MAX_EXPERTS, max_topk: int | None = CPU_MAX_TOPK,
          max_vocab: int | None = CPU_MAX_VOCAB, reason: str) -> tuple[ModelShape, DrafterShape, dict[str, Any]]:
    """Scale a model down (layers, hidden and everything tied to hidden by the same factor),
    keeping every dim TP-divisible and the all-reduce structure (points per layer) intact.

    Returns (shape, drafter, scaling) where ``scaling`` records original vs used and the factors.
    """
    L = min(layers or shape.num_layers, shape.num_layers)
    H = min(hidden or shape.hidden_size, shape.hidden_size)
    if L < 1 or H < 8:
        raise SpecmodelError(f"scaling: need at least 1 layer and hidden >= 8 (got {L}, {H})")
    f = H / shape.hidden_size
    heads = _round_to(shape.num_heads * f, tp, tp) if f < 1 else shape.num_heads
    heads = min(heads, max(shape.num_heads, tp))
    kv = _kv_for(shape.num_kv_heads, shape.num_heads, heads, tp) if heads != shape.num_heads else shape.num_kv_heads

    def dim(d: int, minimum: int = 8, multiple: int = 8) -> int:
        return d if f >= 1 or d == 0 else _round_to(d * f, multiple, minimum)

    n_exp, topk = shape.n_experts, shape.topk
    if n_exp and max_experts:
        n_exp = min(n_exp, max_experts)
    if n_exp and max_topk:
        topk = min(topk, max_topk, n_exp)
    first_dense = shape.first_dense_layers
    if shape.n_experts and first_dense >= L:  # keep at least one MoE layer in a scaled MoE stack
        first_dense = min(first_dense, max(L - 1, 0))
    if shape.n_experts and L < shape.num_layers:
        first_dense = min(first_dense, 1)
    moe_inter = dim(shape.moe_intermediate_size, 8 * tp, 8 * tp) if shape.n_experts else 0
    shared = moe_inter * (shape.shared_intermediate_size // shape.moe_intermediate_size) \
        if shape.n_experts and shape.moe_intermediate_size and shape.shared_intermediate_size else \
        (dim(shape.shared_intermediate_size, 8 * tp, 8 * tp) if shape.shared_intermediate_size else 0)
    used = replace(
        shape, num_layers=L, hidden_size=H, num_heads=heads, num_kv_heads=kv,
        head_dim=dim(shape.head_dim, 16, 8) if shape.attention == "gqa" else dim(shape.v_head_dim, 16, 8),
        intermediate_size=dim(shape.intermediate_size, 8 * tp, 8 * tp),
        vocab_size=min(dim(shape.vocab_size, 64 * tp, 64 * tp), _round_to(max_vocab, 64 * tp, 64 * tp))
        if max_vocab else dim(shape.vocab_size, 64 * tp, 64 * tp),
        q_lora_rank=dim(shape.q_lora_rank, 16, 8) if shape.q_lora_rank else 0,
        kv_lora_rank=dim(shape.kv_lora_rank, 16, 8) if shape.kv_lora_rank else 0,
        qk_nope_head_dim=dim(shape.qk_nope_head_dim, 16, 8) if shape.qk_nope_head_dim else 0,
        qk_rope_head_dim=dim(shape.qk_rope_head_dim, 8, 8) if shape.qk_rope_head_dim else 0,
        v_head_dim=dim(shape.v_head_dim, 16, 8) if shape.v_head_dim else 0,
        n_experts=n_exp, topk=topk, moe_intermediate_size=moe_inter, shared_intermediate_size=shared,
        first_dense_layers=first_dense,
        aux_layer_ids=tuple(min(max(round(i * L / shape.num_layers), 0), L - 1) for i in shape.aux_layer_ids)
        if L != shape.num_layers else shape.aux_layer_ids,
    )
    dheads = _round_to(drafter.num_heads * f, tp, tp) if f < 1 else drafter.num_heads
    d_used = replace(
        drafter, hidden_size=H if drafter.hidden_size == shape.hidden_size else dim(drafter.hidden_size, 8 * tp, 8 * tp),
        num_heads=dheads,
        num_kv_heads=_kv_for(drafter.num_kv_heads, drafter.num_heads, dheads, tp) if dheads != drafter.num_heads
        else drafter.num_kv_heads,
        head_dim=dim(drafter.head_dim, 16, 8), intermediate_size=dim(drafter.intermediate_size, 8 * tp, 8 * tp),
        vocab_size=used.vocab_size,
        draft_vocab_size=min(dim(drafter.draft_vocab_size, 64 * tp, 64 * tp), used.vocab_size),
        target_hidden_size=H,
    )
    orig, now = _summary(shape, drafter), _summary(used, d_used)
    scaling = {
        "scaled": orig != now,
        "reason": reason if orig != now else "full size",
        "factor": {"layers": L / shape.num_layers, "hidden": f},
        "original": orig,
        "used": now,
        "note": ("all-reduce points per forward are those of the original architecture (2 per layer + 1); "
                 "message sizes scale with hidden; times are for the scaled model, not extrapolated"),
    }
    return used, d_used, scaling
