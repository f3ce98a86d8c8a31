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

from pathlib import Path

from specmodel.drafter.dims import Dims, count_text, read_dims, share_text
from specmodel.drafter.findings import DrafterReport, Finding
from specmodel.drafter.safetensors_io import read_checkpoint_headers
from specmodel.drafter.token_freq import read_token_freq
from specmodel.drafter.weight_checks import (
    check_attention,
    check_coverage,
    check_d2t,
    check_embed_tokens,
    check_fc,
    check_layout,
    check_lm_head,
    check_reference_d2t,
    check_reference_shapes,
    check_t2d,
    check_weight_dtypes,
    load_vocab_map,
)
from specmodel.errors import FieldError, SpecmodelError
from specmodel.hfconfig import SGLANG_EAGLE3_ARCHS, VLLM_EAGLE3_ARCHS, HFConfig, load_config, vllm_eagle3_name

#: single-node TP sizes a drafter must split over whenever the target's heads do (the draft runs at the
#: target's TP, and attention heads are sharded, so heads % tp == 0).
TP_SIZES = (2, 4, 8)


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
                       message=f"drafter expects target hidden states of size {count_text(declared)} "
                               f"(target_hidden_size), the target's are {count_text(dims.target_model_hidden)}", values=values)
    if dims.hidden != dims.target_model_hidden:
        if declared is None:
            return Finding(name="config.hidden_size", status="FAIL",
                           message=f"drafter hidden_size {count_text(dims.hidden)} != target {count_text(dims.target_model_hidden)} "
                                   "(and no target_hidden_size): built for another target", values=values)
        return Finding(name="config.hidden_size", status="WARN",
                       message=f"drafter hidden {count_text(dims.hidden)} != target {count_text(dims.target_model_hidden)} (declared via "
                               "target_hidden_size): SGLang cannot share the target's embedding", values=values)
    return Finding(name="config.hidden_size", status="PASS",
                   message=f"hidden_size {count_text(dims.hidden)} = target's", values=values)


def check_vocab_size(dims: Dims) -> Finding:
    values = {"drafter_vocab_size": dims.vocab, "target_vocab_size": dims.target_vocab}
    if dims.vocab != dims.target_vocab:
        return Finding(name="config.vocab_size", status="FAIL",
                       message=f"drafter vocab_size {count_text(dims.vocab)} != target {count_text(dims.target_vocab)}: "
                               "d2t would map into another vocabulary", values=values)
    return Finding(name="config.vocab_size", status="PASS",
                   message=f"vocab_size {count_text(dims.vocab)} = target's", values=values)


def check_draft_vocab_size(dims: Dims) -> Finding:
    values = {"draft_vocab_size": dims.draft_vocab, "vocab_size": dims.vocab}
    if dims.draft_vocab is None:
        return Finding(name="config.draft_vocab_size", status="PASS",
                       message=f"no draft_vocab_size: full vocab ({count_text(dims.vocab)}), engines take the target's lm_head",
                       values=values)
    if dims.draft_vocab > dims.vocab:
        return Finding(name="config.draft_vocab_size", status="FAIL",
                       message=f"draft_vocab_size {count_text(dims.draft_vocab)} > vocab_size {count_text(dims.vocab)}", values=values)
    return Finding(name="config.draft_vocab_size", status="PASS",
                   message=f"draft_vocab_size {count_text(dims.draft_vocab)} of {count_text(dims.vocab)} target tokens "
                           f"({share_text(dims.draft_vocab / dims.vocab)})", values=values)


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
                       message=f"{desc}: hidden_size {count_text(dims.hidden)} not divisible by heads and no head_dim", values=values)
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
                       message=f"drafter context {count_text(dl)} < target {count_text(tl)}: SGLang refuses to start; set "
                               f"max_position_embeddings to {tl} in the drafter's config.json or serve "
                               f"--context-length {dl}", values=values)
    return Finding(name="config.max_position_embeddings", status="PASS",
                   message=f"drafter context {count_text(dl)} >= target {count_text(tl)}", values=values)


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
