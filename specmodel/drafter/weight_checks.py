"""check-drafter's checks of the drafter's weights: its safetensors headers (layout, shapes, dtypes),
its vocabulary map (``d2t`` / ``t2d``), against a reference drafter and against the user's traffic
(token-frequency coverage). The engine behaviour they follow is cited in :mod:`specmodel.drafter.checks`."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from specmodel.drafter.dims import CONFIG_TO_ST_DTYPE, Dims, count_text, find_tensor, share_text
from specmodel.drafter.findings import Finding
from specmodel.drafter.safetensors_io import FLOAT_DTYPES, TensorInfo
from specmodel.errors import SpecmodelError
from specmodel.hfconfig import HFConfig
from specmodel.model.accept import chain_mean

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
                           message=f"no embed_tokens and drafter hidden {count_text(dims.hidden)} != target "
                                   f"{count_text(dims.target_model_hidden)}: the target's cannot be shared", values=values)
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
                       message=f"no lm_head.weight for a {count_text(dims.draft_vocab)}-token draft vocab: the head stays "
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
                       message=f"no d2t for a {count_text(n)}-token draft vocab: draft ids would be used as target ids "
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
                       message=f"{count_text(tg.size)} entries: {count_text(out)} map outside [0, {count_text(dims.vocab)}), "
                               f"{count_text(dup)} duplicate targets{hint}", values=values)
    return Finding(name="d2t.well_formed", status="PASS",
                   message=f"{count_text(tg.size)} entries, delta format: all targets in [0, {count_text(dims.vocab)}), distinct",
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
                       message=f"t2d marks {count_text(marked)} tokens; {count_text(missing)} d2t targets unmarked, {count_text(extra)} marked "
                               "tokens not in d2t (engines ignore t2d, but d2t and t2d come from different maps)",
                       values=values)
    return Finding(name="t2d.consistent", status="PASS",
                   message=f"t2d marks exactly the {count_text(marked)} d2t targets", values=values)


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
                           message=f"d2t identical to the reference's ({count_text(slots)} slots)", values=mv)
    else:
        status = "WARN" if share <= MISMATCH_WARN_MAX else "FAIL"
        # cite this drafter's own figures: a published case is not evidence about this checkpoint
        tail = ("" if status == "WARN" else
                f": {count_text(differ)} of this drafter's {count_text(slots)} lm_head rows stand for other target tokens than the "
                "reference's; it was built for another target/vocab, so most of its drafts would be rejected")
        mismatch = Finding(name="d2t.reference_mismatch", status=status,
                           message=f"{count_text(differ)} of {count_text(slots)} d2t slots differ from the reference ({share_text(share)}){tail}",
                           values=mv)
    ov = {"common_tokens": common, "drafter_vocab": int(va.size), "reference_vocab": int(vb.size), "overlap": overlap}
    status = "PASS" if overlap >= OVERLAP_PASS_MIN else "WARN" if overlap >= OVERLAP_WARN_MIN else "FAIL"
    overlap_f = Finding(name="d2t.reference_overlap", status=status,
                        message=f"draft vocabs share {count_text(common)} of the reference's {count_text(int(vb.size))} target tokens "
                                f"({share_text(overlap)})", values=ov)
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
    msg = (f"draft vocab covers {share_text(cov)} of {total:,.0f} target tokens ({count_text(int(ids.size))} distinct): per-token "
           f"acceptance <= {cov:.3f}, <= {ceil['3']:.2f} tokens/step at 3 steps, {ceil['5']:.2f} at 5")
    return Finding(name="vocab.coverage", status=status, message=msg, values=values), cov
