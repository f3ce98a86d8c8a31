"""``check-drafter``: can this EAGLE-3 drafter work with this target at all? (seconds, no GPU)

:func:`check_drafter` (at the end) runs every check; each ``check_*`` above it takes parsed facts
and returns Findings. It reads the two ``config.json`` files, the drafter's safetensors headers and
only its ``d2t`` / ``t2d`` tensors; from the target only ``config.json`` (it may be hundreds of GB
of shards). The published case it catches: the Kimi-K2 EAGLE-3 drafter on Kimi-K2.5 had the same
shapes as the K2.5 drafter, but its d2t differed in 31,748 of 32,000 slots, and it accepted 0.58
drafts per step (52 tok/s against an 82 tok/s baseline).

Engine behaviour cited here was read from SGLang 0.5.5 / 0.5.23 and vLLM 0.33.0 sources:

* SGLang ``models/llama_eagle3.py`` ``load_weights``: ``hot_token_id = d2t + arange(len(d2t))``
  (d2t holds *deltas*, target id − draft id); ``t2d`` is skipped. 0.5.5's module is
  ``midlayer`` (keys ``layers.0.*`` silently match no parameter); 0.5.23 maps ``midlayer`` ->
  ``layers.0``. vLLM ``llama_eagle3.py`` maps ``midlayer.`` -> ``layers.0.``, renames d2t to
  ``draft_id_to_target_id`` (targets = arange + d2t) and skips t2d.
* Both take ``embed_tokens`` from the target when the drafter has none (SGLang ``set_embed``,
  skipped when ``target_hidden_size != hidden_size``).
* ``fc`` maps the concatenated aux hidden states (``len(eagle_aux_hidden_state_layer_ids)``,
  default 3, times ``target_hidden_size`` or ``hidden_size``) to ``hidden_size``.
* SGLang captures aux states inside its loop over the target's layers, so an id outside
  [0, num_hidden_layers) is never captured; its default ids are [2, L // 2, L − 3].
* SGLang refuses to start when the target's context length exceeds the drafter's derived one
  (``model_config._derive_context_length``) unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specmodel.drafter.findings import DrafterReport, Finding
from specmodel.drafter.safetensors_io import FLOAT_DTYPES, TensorInfo, read_checkpoint_headers
from specmodel.drafter.token_freq import read_token_freq
from specmodel.errors import FieldError, SpecmodelError
from specmodel.hfconfig import SGLANG_EAGLE3_ARCHS, VLLM_EAGLE3_ARCHS, HFConfig, load_config, vllm_eagle3_name
from specmodel.model.accept import chain_mean

#: config dtype name -> safetensors dtype
CONFIG_TO_ST_DTYPE = {"bfloat16": "BF16", "float16": "F16", "half": "F16", "float32": "F32", "float": "F32"}
#: single-node TP sizes a drafter must split over whenever the target's heads do (the draft runs at the
#: target's TP, and attention heads are sharded, so heads % tp == 0).
TP_SIZES = (2, 4, 8)
#: d2t slots differing from the reference: at most this share is a WARN, above it a FAIL.
MISMATCH_WARN_MAX = 0.01
#: draft-vocab overlap with the reference: PASS at or above, WARN at or above the second, else FAIL.
OVERLAP_PASS_MIN, OVERLAP_WARN_MIN = 0.95, 0.80
#: token-frequency coverage of the draft vocab: PASS at or above, WARN at or above the second, else FAIL.
COVERAGE_PASS_MIN, COVERAGE_WARN_MIN = 0.90, 0.50
#: chain depths the coverage ceiling is quoted for (SGLang defaults: DeepSeek 3 steps, Llama 5).
CEILING_STEPS = (1, 3, 5)


def accept_ceiling_tokens(coverage: float, steps: int) -> float:
    """Most tokens per verify step (bonus included) when each drafted token must lie in the
    draft vocab, i.e. per-token acceptance ≤ ``coverage``: Leviathan et al. 2023 Eq. (1),
    (1 − α^(γ+1)) / (1 − α) with α = coverage, γ = steps (:func:`specmodel.model.accept.chain_mean`).
    """
    return chain_mean(coverage, steps)


def _n(x: int) -> str:
    return f"{x:,}"


def _pct(x: float) -> str:
    """One decimal, more when that would round a partial share to 0% or 100%."""
    s = f"{x:.1%}"
    if (s == "100.0%" and x < 1.0) or (s == "0.0%" and x > 0.0):
        s = f"{x:.3%}"
    return s


@dataclass(frozen=True, kw_only=True)
class Dims:
    """The numbers every check needs, validated from both config.json files."""

    hidden: int
    target_hidden: int          # what fc's inputs are made of: drafter target_hidden_size, else target hidden
    vocab: int
    draft_vocab: int | None     # None: config has no draft_vocab_size (SGLang then uses the full vocab)
    layers: int                 # drafter decoder layers (num_hidden_layers, default 1)
    target_layers: int
    target_vocab: int
    target_model_hidden: int

    @property
    def draft_vocab_effective(self) -> int:
        return self.draft_vocab if self.draft_vocab is not None else self.vocab


def read_dims(d: HFConfig, t: HFConfig) -> Dims:
    hidden = d.get_int("hidden_size", required=True, minimum=1)
    vocab = d.get_int("vocab_size", required=True, minimum=1)
    t_hidden = t.get_int("hidden_size", required=True, minimum=1)
    assert hidden is not None and vocab is not None and t_hidden is not None
    return Dims(
        hidden=hidden,
        target_hidden=d.get_int("target_hidden_size", minimum=1) or t_hidden,
        vocab=vocab,
        draft_vocab=d.get_int("draft_vocab_size", minimum=1),
        layers=d.get_int("num_hidden_layers", minimum=1) or 1,
        target_layers=t.get_int("num_hidden_layers", required=True, minimum=1) or 0,
        target_vocab=t.get_int("vocab_size", required=True, minimum=1) or 0,
        target_model_hidden=t_hidden,
    )


def find_tensor(tensors: Mapping[str, TensorInfo], short: str) -> TensorInfo | None:
    """``short`` itself, else any ``<prefix>.short`` (e.g. ``model.fc.weight``)."""
    if short in tensors:
        return tensors[short]
    for name in sorted(tensors):
        if name.endswith("." + short):
            return tensors[name]
    return None


# --- vocab maps -------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class VocabMap:
    """d2t as absolute target ids (``targets = arange + d2t``) and the optional t2d mask."""

    d2t: TensorInfo | None
    targets: np.ndarray | None   # int64, len = draft vocab
    t2d: TensorInfo | None
    t2d_mask: np.ndarray | None  # raw values (bool or 0/1 ints), len = vocab


def load_vocab_map(tensors: Mapping[str, TensorInfo], dims: Dims, where: str) -> VocabMap:
    """Read d2t/t2d (only these tensors); wrong dtype or shape is bad input (SpecmodelError)."""
    from specmodel.drafter.safetensors_io import INT_DTYPES, load_tensor

    d2t = find_tensor(tensors, "d2t")
    targets = None
    if d2t is not None:
        n = dims.draft_vocab_effective
        if d2t.dtype not in INT_DTYPES:
            raise SpecmodelError(f"{d2t.file}: {d2t.name}: dtype {d2t.dtype}, expected an integer tensor "
                                 f"(int64 deltas: target id - draft id) [{where}]")
        if d2t.shape != (n,):
            src = "draft_vocab_size" if dims.draft_vocab is not None else "vocab_size (no draft_vocab_size)"
            raise SpecmodelError(f"{d2t.file}: {d2t.name}: shape {list(d2t.shape)}, expected [{n}] "
                                 f"({src} in config.json) [{where}]")
        deltas = load_tensor(d2t).astype(np.int64, copy=False)
        targets = deltas + np.arange(n, dtype=np.int64)
    t2d = find_tensor(tensors, "t2d")
    mask = None
    if t2d is not None:
        if t2d.dtype != "BOOL" and t2d.dtype not in INT_DTYPES:
            raise SpecmodelError(f"{t2d.file}: {t2d.name}: dtype {t2d.dtype}, expected a bool mask over the target vocab [{where}]")
        if t2d.shape != (dims.vocab,):
            raise SpecmodelError(f"{t2d.file}: {t2d.name}: shape {list(t2d.shape)}, expected [{dims.vocab}] "
                                 f"(vocab_size in config.json) [{where}]")
        mask = load_tensor(t2d)
    return VocabMap(d2t=d2t, targets=targets, t2d=t2d, t2d_mask=mask)


def valid_targets(vm: VocabMap, dims: Dims) -> np.ndarray:
    """The draft vocab as a set of target ids (in range, de-duplicated); identity without d2t."""
    if vm.targets is None:
        return np.arange(dims.draft_vocab_effective, dtype=np.int64)
    t = vm.targets[(vm.targets >= 0) & (vm.targets < dims.vocab)]
    return np.unique(t)


# --- config checks ----------------------------------------------------------------------------

def check_architecture(d: HFConfig) -> Finding:
    archs = d.architectures
    if not archs:
        return Finding(name="config.architecture", status="FAIL",
                       message="config.json has no 'architectures': neither SGLang nor vLLM can pick a model class",
                       values={"architecture": None, "sglang": False, "vllm": False})
    a = archs[0]
    sg, vl_name = a in SGLANG_EAGLE3_ARCHS, vllm_eagle3_name(a)
    vl = vl_name in VLLM_EAGLE3_ARCHS
    values = {"architecture": a, "sglang": sg, "vllm": vl, "vllm_name": vl_name}
    if sg and vl:
        return Finding(name="config.architecture", status="PASS",
                       message=f"{a}: an EAGLE-3 drafter class in SGLang and vLLM", values=values)
    if sg or vl:
        engine, other = ("SGLang", "vLLM") if sg else ("vLLM", "SGLang")
        return Finding(name="config.architecture", status="WARN",
                       message=f"{a}: EAGLE-3 drafter class in {engine} only ({other} has no such EAGLE-3 class)",
                       values=values)
    known = ", ".join(sorted(SGLANG_EAGLE3_ARCHS))
    return Finding(name="config.architecture", status="FAIL",
                   message=f"{a}: not an EAGLE-3 drafter class in SGLang ({known}) or vLLM", values=values)


def check_hidden_size(d: HFConfig, dims: Dims) -> Finding:
    declared = d.get_int("target_hidden_size", minimum=1)
    values = {"drafter_hidden_size": dims.hidden, "target_hidden_size": dims.target_model_hidden,
              "drafter_target_hidden_size": declared}
    if declared is not None and declared != dims.target_model_hidden:
        return Finding(name="config.hidden_size", status="FAIL",
                       message=f"drafter expects target hidden states of size {_n(declared)} "
                               f"(target_hidden_size), the target's are {_n(dims.target_model_hidden)}", values=values)
    if dims.hidden != dims.target_model_hidden:
        if declared is None:
            return Finding(name="config.hidden_size", status="FAIL",
                           message=f"drafter hidden_size {_n(dims.hidden)} != target {_n(dims.target_model_hidden)} "
                                   "(and no target_hidden_size): built for another target", values=values)
        return Finding(name="config.hidden_size", status="WARN",
                       message=f"drafter hidden {_n(dims.hidden)} != target {_n(dims.target_model_hidden)} (declared via "
                               "target_hidden_size): SGLang cannot share the target's embedding", values=values)
    return Finding(name="config.hidden_size", status="PASS",
                   message=f"hidden_size {_n(dims.hidden)} = target's", values=values)


def check_vocab_size(dims: Dims) -> Finding:
    values = {"drafter_vocab_size": dims.vocab, "target_vocab_size": dims.target_vocab}
    if dims.vocab != dims.target_vocab:
        return Finding(name="config.vocab_size", status="FAIL",
                       message=f"drafter vocab_size {_n(dims.vocab)} != target {_n(dims.target_vocab)}: "
                               "d2t would map into another vocabulary", values=values)
    return Finding(name="config.vocab_size", status="PASS",
                   message=f"vocab_size {_n(dims.vocab)} = target's", values=values)


def check_draft_vocab_size(dims: Dims) -> Finding:
    values = {"draft_vocab_size": dims.draft_vocab, "vocab_size": dims.vocab}
    if dims.draft_vocab is None:
        return Finding(name="config.draft_vocab_size", status="PASS",
                       message=f"no draft_vocab_size: full vocab ({_n(dims.vocab)}), engines take the target's lm_head",
                       values=values)
    if dims.draft_vocab > dims.vocab:
        return Finding(name="config.draft_vocab_size", status="FAIL",
                       message=f"draft_vocab_size {_n(dims.draft_vocab)} > vocab_size {_n(dims.vocab)}", values=values)
    return Finding(name="config.draft_vocab_size", status="PASS",
                   message=f"draft_vocab_size {_n(dims.draft_vocab)} of {_n(dims.vocab)} target tokens "
                           f"({_pct(dims.draft_vocab / dims.vocab)})", values=values)


def check_heads(d: HFConfig, t: HFConfig, dims: Dims) -> Finding:
    heads = d.get_int("num_attention_heads", minimum=1)
    kv = d.get_int("num_key_value_heads", minimum=1) or heads
    head_dim = d.get_int("head_dim", minimum=1)
    t_heads = t.get_int("num_attention_heads", minimum=1)
    t_kv = t.get_int("num_key_value_heads", minimum=1) or t_heads
    values: dict[str, object] = {"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
              "target_num_attention_heads": t_heads, "target_num_key_value_heads": t_kv}
    if heads is None or kv is None:
        return Finding(name="config.heads", status="FAIL",
                       message="drafter config.json has no num_attention_heads", values=values)
    desc = f"{heads} heads / {kv} KV heads"
    if heads % kv:
        return Finding(name="config.heads", status="FAIL",
                       message=f"{desc}: heads not a multiple of KV heads", values=values)
    if head_dim is None and dims.hidden % heads:
        return Finding(name="config.heads", status="FAIL",
                       message=f"{desc}: hidden_size {_n(dims.hidden)} not divisible by heads and no head_dim", values=values)
    tdesc = f"target {t_heads} heads" if t_heads else "target heads unknown"
    bad_tp = [tp for tp in TP_SIZES if t_heads and t_heads % tp == 0 and heads % tp]
    values["tp_sizes_not_splitting"] = bad_tp
    if bad_tp:
        return Finding(name="config.heads", status="WARN",
                       message=f"{desc} ({tdesc}): the drafter runs at the target's TP, but its heads do not "
                               f"split over TP {', '.join(map(str, bad_tp))}", values=values)
    return Finding(name="config.heads", status="PASS",
                   message=f"{desc} ({tdesc}); splits over every TP size the target's heads do", values=values)


def check_dtype(d: HFConfig, t: HFConfig) -> Finding:
    dd, td = d.dtype, t.dtype
    quant = t.get("quantization_config")
    qdesc = ""
    if isinstance(quant, dict):
        qdesc = f" (target weights quantized: {quant.get('quant_method', quant.get('format', 'unknown'))})"
    values = {"drafter_dtype": dd, "target_dtype": td, "target_quantized": isinstance(quant, dict)}
    if dd is None:
        return Finding(name="config.dtype", status="WARN",
                       message=f"drafter config.json has no torch_dtype/dtype; target {td}{qdesc}", values=values)
    if td is not None and dd != td:
        return Finding(name="config.dtype", status="WARN",
                       message=f"drafter {dd} vs target {td}{qdesc}: the engine casts the drafter to the serving dtype",
                       values=values)
    return Finding(name="config.dtype", status="PASS",
                   message=f"{dd}, same as the target{qdesc}" if td else f"{dd} (target gives none){qdesc}",
                   values=values)


def _default_aux_ids(layers: int) -> list[int]:
    return [2, layers // 2, layers - 3]


def check_aux_layer_ids(d: HFConfig, dims: Dims) -> Finding:
    ec = d.eagle_config
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    L = dims.target_layers
    default = _default_aux_ids(L)
    values: dict[str, object] = {"layer_ids": ids, "target_num_hidden_layers": L, "default_layer_ids": default}
    if ids is None:
        return Finding(name="eagle.aux_layer_ids", status="PASS",
                       message=f"not set: engines capture the default [2, L//2, L-3] = {default} of {L} target layers",
                       values=values)
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise SpecmodelError(f"{d.path}: eagle_config.eagle_aux_hidden_state_layer_ids must be a non-empty list "
                             f"of integers, got {ids!r}")
    bad = [i for i in ids if not 0 <= i < L]
    if bad:
        return Finding(name="eagle.aux_layer_ids", status="FAIL",
                       message=f"{ids}: {bad} outside the target's {L} layers [0, {L - 1}]: never captured", values=values)
    if len(set(ids)) != len(ids):
        return Finding(name="eagle.aux_layer_ids", status="FAIL",
                       message=f"{ids}: repeated layer ids", values=values)
    if ids != sorted(ids):
        return Finding(name="eagle.aux_layer_ids", status="WARN",
                       message=f"{ids}: not ascending (engines concatenate in capture order)", values=values)
    # the ids SGLang would default to for some other depth: the drafter was trained on that target
    other = next((n for n in range(6, 512) if n != L and _default_aux_ids(n) == ids), None)
    values["trained_for_layers"] = other
    if other is not None:
        return Finding(name="eagle.aux_layer_ids", status="WARN",
                       message=f"{ids} are the defaults for a {other}-layer target, this one has {L} "
                               f"(its defaults: {default}): trained on another target?", values=values)
    return Finding(name="eagle.aux_layer_ids", status="PASS",
                   message=f"{ids} within the target's {L} layers", values=values)


def check_context_length(d: HFConfig, t: HFConfig) -> Finding:
    dl, tl = d.context_length(), t.context_length()
    values = {"drafter_max_position_embeddings": d.get("max_position_embeddings"), "drafter_context_length": dl,
              "target_max_position_embeddings": t.get("max_position_embeddings"), "target_context_length": tl}
    if dl is None or tl is None:
        who = "drafter" if dl is None else "target"
        return Finding(name="config.max_position_embeddings", status="WARN",
                       message=f"{who} config.json gives no max_position_embeddings: cannot compare context lengths",
                       values=values)
    if dl < tl:
        return Finding(name="config.max_position_embeddings", status="FAIL",
                       message=f"drafter context {_n(dl)} < target {_n(tl)}: SGLang refuses to start; set "
                               f"max_position_embeddings to {tl} in the drafter's config.json or serve "
                               f"--context-length {dl}", values=values)
    return Finding(name="config.max_position_embeddings", status="PASS",
                   message=f"drafter context {_n(dl)} >= target {_n(tl)}", values=values)


# --- weight checks ----------------------------------------------------------------------------

_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def check_layout(tensors: Mapping[str, TensorInfo], dims: Dims) -> Finding:
    mid = sorted(n for n in tensors if n.startswith("midlayer.") or ".midlayer." in n)
    layer_ids = sorted({int(m.group(1)) for n in tensors if (m := _LAYER_RE.search(n))})
    values = {"midlayer_tensors": len(mid), "layers_indices": layer_ids, "config_num_hidden_layers": dims.layers}
    if mid and layer_ids:
        return Finding(name="weights.layout", status="FAIL",
                       message=f"mixed layout: {len(mid)} midlayer.* and layers.{layer_ids}.* tensors", values=values)
    if not mid and not layer_ids:
        return Finding(name="weights.layout", status="FAIL",
                       message="no decoder-layer weights (neither midlayer.* nor layers.N.*)", values=values)
    if mid:
        if dims.layers != 1:
            return Finding(name="weights.layout", status="FAIL",
                           message=f"midlayer.* holds one layer, config.json says num_hidden_layers {dims.layers}",
                           values=values)
        return Finding(name="weights.layout", status="PASS",
                       message=f"midlayer.* ({len(mid)} tensors): loaded by SGLang 0.5.5 and 0.5.23 and by vLLM", values=values)
    if layer_ids != list(range(dims.layers)):
        return Finding(name="weights.layout", status="FAIL",
                       message=f"layers.{layer_ids}.* but config.json says num_hidden_layers {dims.layers}", values=values)
    return Finding(name="weights.layout", status="WARN",
                   message="layers.0.* layout: SGLang 0.5.23 and vLLM map it, older SGLang (0.5.5) silently skips "
                           "it (its module is midlayer): rename to midlayer.* for those", values=values)


def _shape(info: TensorInfo) -> list[int]:
    return list(info.shape)


def check_embed_tokens(tensors: Mapping[str, TensorInfo], dims: Dims) -> Finding:
    e = find_tensor(tensors, "embed_tokens.weight")
    want = [dims.vocab, dims.hidden]
    shares = dims.hidden == dims.target_model_hidden
    values = {"present": e is not None, "shape": _shape(e) if e else None, "expected_shape": want,
              "shared_from_target": shares}
    if e is None:
        if not shares:
            return Finding(name="weights.embed_tokens", status="FAIL",
                           message=f"no embed_tokens and drafter hidden {_n(dims.hidden)} != target "
                                   f"{_n(dims.target_model_hidden)}: the target's cannot be shared", values=values)
        return Finding(name="weights.embed_tokens", status="PASS",
                       message="absent: taken from the target (SGLang set_embed, vLLM shares the target's)", values=values)
    if _shape(e) != want:
        return Finding(name="weights.embed_tokens", status="FAIL",
                       message=f"{e.name} shape {_shape(e)}, expected {want} (vocab_size x hidden_size)", values=values)
    note = "SGLang replaces it with the target's" if shares else "kept (hidden sizes differ)"
    return Finding(name="weights.embed_tokens", status="PASS",
                   message=f"{e.name} {_shape(e)} present ({note})", values=values)


def check_fc(d: HFConfig, tensors: Mapping[str, TensorInfo], dims: Dims) -> Finding:
    ec = d.eagle_config
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    n_aux = len(ids) if isinstance(ids, list) and ids else 3
    want = [dims.hidden, n_aux * dims.target_hidden]
    fc = find_tensor(tensors, "fc.weight")
    values = {"shape": _shape(fc) if fc else None, "expected_shape": want, "num_aux_hidden_states": n_aux}
    if ec.get("use_aux_hidden_state") is False:
        return Finding(name="weights.fc", status="PASS" if fc is None else "WARN",
                       message="use_aux_hidden_state is false: no fc" + ("" if fc is None else f", but {fc.name} is present (ignored)"),
                       values=values)
    if fc is None:
        return Finding(name="weights.fc", status="FAIL",
                       message=f"no fc.weight (expected {want} = hidden x ({n_aux} x hidden))", values=values)
    if _shape(fc) != want:
        return Finding(name="weights.fc", status="FAIL",
                       message=f"{fc.name} shape {_shape(fc)}, expected {want} = hidden x ({n_aux} x target hidden)",
                       values=values)
    return Finding(name="weights.fc", status="PASS",
                   message=f"{fc.name} {_shape(fc)} = hidden x ({n_aux} x hidden)", values=values)


def check_lm_head(d: HFConfig, tensors: Mapping[str, TensorInfo], dims: Dims) -> Finding:
    h = find_tensor(tensors, "lm_head.weight")
    want = [dims.draft_vocab_effective, dims.hidden]
    values = {"shape": _shape(h) if h else None, "expected_shape": want}
    if h is None:
        if d.get("tie_word_embeddings") is True:
            return Finding(name="weights.lm_head", status="PASS",
                           message="absent, tie_word_embeddings: uses embed_tokens", values=values)
        if dims.draft_vocab is None:
            return Finding(name="weights.lm_head", status="PASS",
                           message="absent, no draft_vocab_size: SGLang loads the target's lm_head", values=values)
        return Finding(name="weights.lm_head", status="FAIL",
                       message=f"no lm_head.weight for a {_n(dims.draft_vocab)}-token draft vocab: the head stays "
                               "uninitialised", values=values)
    if _shape(h) != want:
        return Finding(name="weights.lm_head", status="FAIL",
                       message=f"{h.name} shape {_shape(h)}, expected {want} (draft_vocab_size x hidden_size)",
                       values=values)
    return Finding(name="weights.lm_head", status="PASS", message=f"{h.name} {_shape(h)}", values=values)


def check_attention(tensors: Mapping[str, TensorInfo], d: HFConfig, dims: Dims) -> Finding | None:
    """EAGLE-3's decoder layer attends over [embedding; hidden] (2 x hidden inputs), Llama-style only."""
    q, k = find_tensor(tensors, "self_attn.q_proj.weight"), find_tensor(tensors, "self_attn.k_proj.weight")
    heads = d.get_int("num_attention_heads", minimum=1)
    if q is None or k is None or heads is None:
        return None  # MLA-style drafters (q_a_proj, kv_a_proj_with_mqa) have no q/k_proj to check
    kv = d.get_int("num_key_value_heads", minimum=1) or heads
    hd = d.get_int("head_dim", minimum=1) or dims.hidden // heads
    want_q, want_k = [heads * hd, 2 * dims.hidden], [kv * hd, 2 * dims.hidden]
    values = {"q_proj": _shape(q), "k_proj": _shape(k), "expected_q_proj": want_q, "expected_k_proj": want_k}
    if _shape(q) != want_q or _shape(k) != want_k:
        return Finding(name="weights.attention", status="FAIL",
                       message=f"q_proj {_shape(q)} / k_proj {_shape(k)}, expected {want_q} / {want_k} "
                               "(heads x head_dim, 2 x hidden inputs)", values=values)
    return Finding(name="weights.attention", status="PASS",
                   message=f"q_proj {want_q}, k_proj {want_k}: heads x head_dim over 2 x hidden inputs", values=values)


def check_weight_dtypes(d: HFConfig, tensors: Mapping[str, TensorInfo]) -> Finding:
    counts = Counter(t.dtype for t in tensors.values() if t.dtype in FLOAT_DTYPES)
    cfg = d.dtype
    want = CONFIG_TO_ST_DTYPE.get(cfg or "")
    values = {"float_dtypes": dict(sorted(counts.items())), "config_dtype": cfg}
    desc = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no float tensors"
    if want is not None and set(counts) - {want}:
        return Finding(name="weights.dtype", status="WARN",
                       message=f"tensors {desc}; config.json says {cfg} ({want})", values=values)
    return Finding(name="weights.dtype", status="PASS", message=f"tensors {desc}", values=values)


def check_d2t(vm: VocabMap, dims: Dims) -> Finding:
    n = dims.draft_vocab_effective
    if vm.targets is None:
        absent = {"present": False, "draft_vocab_size": n, "vocab_size": dims.vocab}
        if n == dims.vocab:
            return Finding(name="d2t.well_formed", status="PASS",
                           message="no d2t: draft vocab = target vocab (identity map)", values=absent)
        return Finding(name="d2t.well_formed", status="FAIL",
                       message=f"no d2t for a {_n(n)}-token draft vocab: draft ids would be used as target ids "
                               "(wrong tokens)", values=absent)
    tg = vm.targets
    out = int(np.count_nonzero((tg < 0) | (tg >= dims.vocab)))
    inr = tg[(tg >= 0) & (tg < dims.vocab)]
    dup = int(inr.size - np.unique(inr).size)
    values: dict[str, object] = {"present": True, "entries": int(tg.size), "dtype": vm.d2t.dtype if vm.d2t else None,
              "out_of_range": out, "duplicates": dup,
              "target_min": int(tg.min()) if tg.size else None, "target_max": int(tg.max()) if tg.size else None}
    if out or dup:
        raw = tg - np.arange(tg.size, dtype=np.int64)
        hint = ""
        if np.all((raw >= 0) & (raw < dims.vocab)) and np.unique(raw).size == raw.size:
            hint = "; its values look like absolute target ids, engines expect deltas (target id - draft id)"
        return Finding(name="d2t.well_formed", status="FAIL",
                       message=f"{_n(tg.size)} entries: {_n(out)} map outside [0, {_n(dims.vocab)}), "
                               f"{_n(dup)} duplicate targets{hint}", values=values)
    return Finding(name="d2t.well_formed", status="PASS",
                   message=f"{_n(tg.size)} entries, delta format: all targets in [0, {_n(dims.vocab)}), distinct",
                   values=values)


def check_t2d(vm: VocabMap, dims: Dims) -> Finding:
    if vm.t2d_mask is None:
        return Finding(name="t2d.consistent", status="PASS",
                       message="no t2d (SGLang and vLLM ignore it)", values={"present": False})
    raw = vm.t2d_mask
    if raw.dtype != np.bool_ and not np.all((raw == 0) | (raw == 1)):
        return Finding(name="t2d.consistent", status="WARN",
                       message="t2d holds values other than 0/1 (engines ignore t2d)",
                       values={"present": True, "non_binary": int(np.count_nonzero((raw != 0) & (raw != 1)))})
    mask = raw.astype(bool)
    marked = int(mask.sum())
    tg = valid_targets(vm, dims)
    missing = int(np.count_nonzero(~mask[tg]))
    extra = marked - (int(tg.size) - missing)
    values = {"present": True, "marked": marked, "draft_vocab_size": dims.draft_vocab_effective,
              "d2t_targets_not_marked": missing, "marked_not_in_d2t": extra}
    if missing or extra:
        return Finding(name="t2d.consistent", status="WARN",
                       message=f"t2d marks {_n(marked)} tokens; {_n(missing)} d2t targets unmarked, {_n(extra)} marked "
                               "tokens not in d2t (engines ignore t2d, but d2t and t2d come from different maps)",
                       values=values)
    return Finding(name="t2d.consistent", status="PASS",
                   message=f"t2d marks exactly the {_n(marked)} d2t targets", values=values)


# --- against a reference drafter ----------------------------------------------------------------

def check_reference_shapes(tensors: Mapping[str, TensorInfo], ref: Mapping[str, TensorInfo],
                           d: HFConfig, r: HFConfig) -> Finding:
    sig = {k: (v.dtype, v.shape) for k, v in tensors.items()}
    rsig = {k: (v.dtype, v.shape) for k, v in ref.items()}
    only_d, only_r = sorted(set(sig) - set(rsig)), sorted(set(rsig) - set(sig))
    differ = sorted(k for k in set(sig) & set(rsig) if sig[k] != rsig[k])
    fields = ("architectures", "hidden_size", "vocab_size", "draft_vocab_size", "num_hidden_layers",
              "max_position_embeddings")
    cfg_diff = [f for f in fields if d.get(f) != r.get(f)]
    if d.eagle_config.get("eagle_aux_hidden_state_layer_ids") != r.eagle_config.get("eagle_aux_hidden_state_layer_ids"):
        cfg_diff.append("eagle_aux_hidden_state_layer_ids")
    values = {"tensors": len(sig), "reference_tensors": len(rsig), "only_in_drafter": only_d[:20],
              "only_in_reference": only_r[:20], "shape_or_dtype_differs": differ[:20], "config_fields_differ": cfg_diff}
    if only_d or only_r or differ or cfg_diff:
        parts = [] if differ or only_d or only_r else [f"same {len(sig)} tensors, shapes and dtypes"]
        if differ:
            parts.append(f"{len(differ)} tensors differ in shape/dtype (e.g. {differ[0]})")
        if only_d or only_r:
            parts.append(f"{len(only_d)} tensors only in the drafter, {len(only_r)} only in the reference")
        if cfg_diff:
            parts.append(f"config differs in {', '.join(cfg_diff)}")
        return Finding(name="reference.shapes", status="WARN", message="; ".join(parts), values=values)
    return Finding(name="reference.shapes", status="PASS",
                   message=f"same {len(sig)} tensors, shapes, dtypes and config as the reference "
                           "(shapes alone do not make it compatible: see d2t)", values=values)


def check_reference_d2t(vm: VocabMap, rvm: VocabMap, dims: Dims, rdims: Dims) -> list[Finding]:
    """Slots whose target id differs, and the overlap of the two draft vocabs (as target-id sets)."""
    a = vm.targets if vm.targets is not None else np.arange(dims.draft_vocab_effective, dtype=np.int64)
    b = rvm.targets if rvm.targets is not None else np.arange(rdims.draft_vocab_effective, dtype=np.int64)
    n = min(a.size, b.size)
    differ = int(np.count_nonzero(a[:n] != b[:n])) + abs(int(a.size) - int(b.size))
    slots = max(int(a.size), int(b.size))
    share = differ / slots if slots else 0.0
    va, vb = valid_targets(vm, dims), valid_targets(rvm, rdims)
    common = int(np.intersect1d(va, vb, assume_unique=True).size)
    overlap = common / vb.size if vb.size else 0.0
    mv = {"slots": slots, "slots_differ": differ, "share_differ": share,
          "drafter_entries": int(a.size), "reference_entries": int(b.size)}
    if differ == 0:
        mismatch = Finding(name="d2t.reference_mismatch", status="PASS",
                           message=f"d2t identical to the reference's ({_n(slots)} slots)", values=mv)
    else:
        status = "WARN" if share <= MISMATCH_WARN_MAX else "FAIL"
        # cite this drafter's own figures: a published case is not evidence about this checkpoint
        tail = ("" if status == "WARN" else
                f": {_n(differ)} of this drafter's {_n(slots)} lm_head rows stand for other target tokens than the "
                "reference's; it was built for another target/vocab, so most of its drafts would be rejected")
        mismatch = Finding(name="d2t.reference_mismatch", status=status,
                           message=f"{_n(differ)} of {_n(slots)} d2t slots differ from the reference ({_pct(share)}){tail}",
                           values=mv)
    ov = {"common_tokens": common, "drafter_vocab": int(va.size), "reference_vocab": int(vb.size), "overlap": overlap}
    status = "PASS" if overlap >= OVERLAP_PASS_MIN else "WARN" if overlap >= OVERLAP_WARN_MIN else "FAIL"
    overlap_f = Finding(name="d2t.reference_overlap", status=status,
                        message=f"draft vocabs share {_n(common)} of the reference's {_n(int(vb.size))} target tokens "
                                f"({_pct(overlap)})", values=ov)
    return [mismatch, overlap_f]


# --- against the user's traffic -----------------------------------------------------------------

def check_coverage(vm: VocabMap, dims: Dims, ids: np.ndarray, counts: np.ndarray, source: str) -> tuple[Finding, float]:
    vocab = valid_targets(vm, dims)
    covered = np.isin(ids, vocab)
    total = float(counts.sum())
    cov = min(1.0, float(counts[covered].sum()) / total)
    ceil = {str(k): accept_ceiling_tokens(cov, k) for k in CEILING_STEPS}
    order = np.argsort(-counts[~covered], kind="stable")[:10]
    top = [[int(i), float(c)] for i, c in zip(ids[~covered][order], counts[~covered][order], strict=True)]
    values = {"coverage": cov, "total_count": total, "distinct_tokens": int(ids.size),
              "distinct_covered": int(np.count_nonzero(covered)), "ceiling_tokens_per_step": ceil,
              "top_uncovered": top, "token_freq": source}
    status = "PASS" if cov >= COVERAGE_PASS_MIN else "WARN" if cov >= COVERAGE_WARN_MIN else "FAIL"
    msg = (f"draft vocab covers {_pct(cov)} of {total:,.0f} target tokens ({_n(int(ids.size))} distinct): per-token "
           f"acceptance <= {cov:.3f}, <= {ceil['3']:.2f} tokens/step at 3 steps, {ceil['5']:.2f} at 5")
    return Finding(name="vocab.coverage", status=status, message=msg, values=values), cov


def _looks_like_drafter(cfg: HFConfig) -> bool:
    """An EAGLE drafter's config (a target's never has these): draft_vocab_size, or an Eagle architecture."""
    archs = cfg.get("architectures")
    names = archs if isinstance(archs, list) else []
    return cfg.get("draft_vocab_size") is not None or any(isinstance(a, str) and "eagle" in a.lower() for a in names)


def _swap_hint(drafter_dir: str | Path, target_dir: str | Path, tcfg: HFConfig) -> str:
    """What to do when the drafter directory holds no weights: most often the two inputs are swapped
    (``{drafter}`` / ``{target}``: the inputs' names, spelled by whoever prints the error)."""
    if not any(Path(drafter_dir).glob("*.safetensors*")) and (
            _looks_like_drafter(tcfg) or any(Path(target_dir).glob("*.safetensors"))):
        why = "an EAGLE drafter's config.json" if _looks_like_drafter(tcfg) else "the *.safetensors"
        return (f"; {{drafter}} and {{target}} look swapped ({target_dir} holds {why}): "
                f"try {{drafter}} {target_dir} {{target}} {drafter_dir}")
    return " ({drafter} is the EAGLE-3 checkpoint directory with its weights; {target} needs only config.json)"


def check_drafter(*, drafter_dir: str | Path, target_dir: str | Path,
                  reference_dir: str | Path | None = None, token_freq: str | Path | None = None) -> DrafterReport:
    """Run every check; bad input (missing files, unreadable headers, a d2t/t2d of the wrong
    dtype or shape, a bad token-frequency file) raises :class:`~specmodel.errors.SpecmodelError`."""
    dcfg = load_config(drafter_dir, "drafter")
    tcfg = load_config(target_dir, "target")
    dims = read_dims(dcfg, tcfg)
    try:
        tensors = read_checkpoint_headers(drafter_dir)
    except SpecmodelError as exc:
        raise FieldError(None, f"{exc}{_swap_hint(drafter_dir, target_dir, tcfg)}") from None
    vm = load_vocab_map(tensors, dims, "drafter")

    findings: list[Finding] = [
        check_architecture(dcfg),
        check_hidden_size(dcfg, dims),
        check_vocab_size(dims),
        check_draft_vocab_size(dims),
        check_heads(dcfg, tcfg, dims),
        check_dtype(dcfg, tcfg),
        check_aux_layer_ids(dcfg, dims),
        check_context_length(dcfg, tcfg),
        check_layout(tensors, dims),
        check_embed_tokens(tensors, dims),
        check_fc(dcfg, tensors, dims),
        check_lm_head(dcfg, tensors, dims),
    ]
    attn = check_attention(tensors, dcfg, dims)
    if attn is not None:
        findings.append(attn)
    findings += [check_weight_dtypes(dcfg, tensors), check_d2t(vm, dims), check_t2d(vm, dims)]

    if reference_dir is not None:
        rcfg = load_config(reference_dir, "reference-drafter")
        # the reference is read against its own config; its target is assumed to be ours
        rdims = read_dims(rcfg, tcfg)
        rtensors = read_checkpoint_headers(reference_dir)
        rvm = load_vocab_map(rtensors, rdims, "reference drafter")
        findings.append(check_reference_shapes(tensors, rtensors, dcfg, rcfg))
        findings += check_reference_d2t(vm, rvm, dims, rdims)

    ceiling = None
    if token_freq is not None:
        ids, counts = read_token_freq(token_freq, dims.target_vocab)
        cov_finding, ceiling = check_coverage(vm, dims, ids, counts, str(token_freq))
        findings.append(cov_finding)

    return DrafterReport(drafter_dir=str(drafter_dir), target_dir=str(target_dir),
                         reference_dir=None if reference_dir is None else str(reference_dir),
                         findings=tuple(findings), acceptance_ceiling=ceiling)
