"""check_drafter on small real drafter/target directories: every check, PASS and non-PASS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from specmodel.drafter import DrafterReport, accept_ceiling_tokens, check_drafter
from specmodel.drafter.dims import Dims
from specmodel.drafter.weight_checks import VocabMap, check_d2t, valid_targets
from specmodel.errors import SpecmodelError
from specmodel.model.accept import chain_mean
from tests.test_drafter_safetensors import (
    SMALL,
    deltas,
    draft_targets,
    drafter_config,
    drafter_tensors,
    write_drafter,
    write_target,
)

BASE_NAMES = [
    "config.architecture", "config.hidden_size", "config.vocab_size", "config.draft_vocab_size", "config.heads",
    "config.dtype", "eagle.aux_layer_ids", "config.max_position_embeddings", "weights.layout",
    "weights.embed_tokens", "weights.fc", "weights.lm_head", "weights.attention", "weights.dtype",
    "d2t.well_formed", "t2d.consistent",
]


def run(tmp_path: Path, cfg: dict[str, Any] | None = None, tensors: dict[str, np.ndarray] | None = None,
        target: dict[str, Any] | None = None, **kw: Any) -> DrafterReport:
    d = write_drafter(tmp_path / "drafter", cfg, tensors)
    t = write_target(tmp_path / "target", **(target or {}))
    return check_drafter(drafter_dir=d, target_dir=t, **kw)


def status(rep: DrafterReport, name: str) -> str:
    f = rep.finding(name)
    assert f is not None, f"no finding {name}: {[x.name for x in rep.findings]}"
    return f.status


def msg(rep: DrafterReport, name: str) -> str:
    f = rep.finding(name)
    assert f is not None
    return f.message


def test_good_drafter_all_pass(tmp_path: Path) -> None:
    rep = run(tmp_path)
    assert [f.name for f in rep.findings] == BASE_NAMES
    assert rep.status == "PASS", [(f.name, f.status, f.message) for f in rep.findings if f.status != "PASS"]
    assert rep.acceptance_ceiling is None
    d = json.loads(json.dumps(rep.to_dict(), allow_nan=False))
    assert d["status"] == "PASS" and d["counts"] == {"PASS": len(BASE_NAMES), "WARN": 0, "FAIL": 0}
    assert rep.finding("d2t.well_formed").values["entries"] == SMALL["draft_vocab"]  # type: ignore[union-attr]


def test_target_dir_shards_are_never_read(tmp_path: Path) -> None:
    t = write_target(tmp_path / "target")
    (t / "model-00001-of-00064.safetensors").write_bytes(b"\xff" * 16)  # unreadable: must not matter
    (t / "model.safetensors.index.json").write_text("{broken")
    d = write_drafter(tmp_path / "drafter")
    assert check_drafter(drafter_dir=d, target_dir=t).status == "PASS"


def test_flat_target_config(tmp_path: Path) -> None:
    rep = run(tmp_path, target={"nested": False})
    assert rep.status == "PASS"
    assert rep.finding("eagle.aux_layer_ids").values["target_num_hidden_layers"] == 61  # type: ignore[union-attr]


@pytest.mark.parametrize(("arch", "expected", "sglang", "vllm"), [
    ("LlamaForCausalLMEagle3", "PASS", True, True),
    ("Eagle3DeepseekV2ForCausalLM", "PASS", True, True),
    ("Eagle3LlamaForCausalLM", "WARN", False, True),
    ("LlamaForCausalLM", "WARN", False, True),   # vLLM renames it Eagle3LlamaForCausalLM
    ("DeepseekV3ForCausalLM", "WARN", False, True),
    ("MedusaModel", "FAIL", False, False),
])
def test_architecture(tmp_path: Path, arch: str, expected: str, sglang: bool, vllm: bool) -> None:
    rep = run(tmp_path, drafter_config(architectures=[arch]))
    f = rep.finding("config.architecture")
    assert f is not None and f.status == expected
    assert (f.values["sglang"], f.values["vllm"]) == (sglang, vllm)


def test_missing_architectures(tmp_path: Path) -> None:
    cfg = drafter_config()
    del cfg["architectures"]
    assert status(run(tmp_path, cfg), "config.architecture") == "FAIL"


def test_hidden_size_mismatch(tmp_path: Path) -> None:
    rep = run(tmp_path, target={"hidden": 48})
    assert status(rep, "config.hidden_size") == "FAIL"
    assert "32" in msg(rep, "config.hidden_size") and "48" in msg(rep, "config.hidden_size")
    assert status(rep, "weights.fc") == "FAIL"  # fc expects 3 x 48 inputs now
    assert status(rep, "weights.embed_tokens") == "FAIL"  # cannot share a 48-wide embedding


def test_target_hidden_size_declared(tmp_path: Path) -> None:
    # a narrower drafter over a 48-wide target: legal if declared, fc takes 3 x 48, needs its own embedding
    cfg = drafter_config(target_hidden_size=48)
    t = drafter_tensors(embed=True)
    t["fc.weight"] = np.zeros((SMALL["hidden"], 3 * 48), np.float16)
    rep = run(tmp_path, cfg, t, target={"hidden": 48})
    assert status(rep, "config.hidden_size") == "WARN"
    assert status(rep, "weights.fc") == "PASS"
    assert status(rep, "weights.embed_tokens") == "PASS"


def test_vocab_mismatch(tmp_path: Path) -> None:
    rep = run(tmp_path, target={"vocab": 8192})
    assert status(rep, "config.vocab_size") == "FAIL"


def test_draft_vocab_larger_than_vocab(tmp_path: Path) -> None:
    cfg = drafter_config(draft_vocab=8192)
    t = drafter_tensors(draft_vocab=8192, d2t=np.zeros(8192, np.int64))
    rep = run(tmp_path, cfg, t)
    assert status(rep, "config.draft_vocab_size") == "FAIL"
    assert status(rep, "d2t.well_formed") == "FAIL"


def test_full_vocab_drafter_without_d2t(tmp_path: Path) -> None:
    cfg = drafter_config(draft_vocab=None)
    t = drafter_tensors(draft_vocab=SMALL["vocab"])
    assert "d2t" not in t
    rep = run(tmp_path, cfg, t)
    assert status(rep, "d2t.well_formed") == "PASS" and "identity" in msg(rep, "d2t.well_formed")
    assert status(rep, "config.draft_vocab_size") == "PASS"


def test_heads(tmp_path: Path) -> None:
    bad_kv = run(tmp_path / "a", drafter_config(heads=8, kv=3), drafter_tensors(heads=8, kv=3))
    assert status(bad_kv, "config.heads") == "FAIL"
    # 6 heads cannot shard over TP 4/8 although the target's 64 can
    tp = run(tmp_path / "b", drafter_config(heads=6, kv=6), drafter_tensors(heads=6, kv=6))
    f = tp.finding("config.heads")
    assert f is not None and f.status == "WARN" and f.values["tp_sizes_not_splitting"] == [4, 8]


def test_dtype_mismatch(tmp_path: Path) -> None:
    rep = run(tmp_path, drafter_config(torch_dtype="bfloat16"))
    assert status(rep, "config.dtype") == "WARN"
    assert status(rep, "weights.dtype") == "WARN"  # config says bfloat16, tensors are F16
    f = rep.finding("weights.dtype")
    assert f is not None and f.values["float_dtypes"] == {"F16": 13}


def test_quantized_target_dtype_named(tmp_path: Path) -> None:
    rep = run(tmp_path, target={"quantization_config": {"quant_method": "compressed-tensors"}})
    assert status(rep, "config.dtype") == "PASS"
    assert "compressed-tensors" in msg(rep, "config.dtype")


@pytest.mark.parametrize(("ids", "expected", "needle"), [
    ([2, 30, 58], "PASS", "within the target's 61 layers"),
    ([2, 30, 61], "FAIL", "[61] outside"),
    ([-1, 30, 58], "FAIL", "outside"),
    ([2, 30, 30], "FAIL", "repeated"),
    ([58, 30, 2], "WARN", "not ascending"),
    ([2, 16, 29], "WARN", "defaults for a 32-layer target"),
])
def test_aux_layer_ids(tmp_path: Path, ids: list[int], expected: str, needle: str) -> None:
    rep = run(tmp_path, drafter_config(layer_ids=ids))
    assert status(rep, "eagle.aux_layer_ids") == expected
    assert needle in msg(rep, "eagle.aux_layer_ids")


def test_aux_layer_ids_absent_uses_defaults(tmp_path: Path) -> None:
    cfg = drafter_config()
    cfg["eagle_config"] = {}
    rep = run(tmp_path, cfg)
    f = rep.finding("eagle.aux_layer_ids")
    assert f is not None and f.status == "PASS" and f.values["default_layer_ids"] == [2, 30, 58]


def test_aux_layer_ids_malformed_is_bad_input(tmp_path: Path) -> None:
    cfg = drafter_config()
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = "2,30,58"
    with pytest.raises(SpecmodelError, match="eagle_aux_hidden_state_layer_ids must be"):
        run(tmp_path, cfg)


def test_context_length_published_case(tmp_path: Path) -> None:
    rep = run(tmp_path, drafter_config(max_pos=131072))
    f = rep.finding("config.max_position_embeddings")
    assert f is not None and f.status == "FAIL"
    assert "131,072 < target 262,144" in f.message and "max_position_embeddings to 262144" in f.message
    assert rep.status == "FAIL"


def test_context_length_rope_scaling(tmp_path: Path) -> None:
    # SGLang multiplies by a plain rope factor, but not when original_max_position_embeddings is given
    scaled = run(tmp_path / "a", drafter_config(max_pos=131072, rope_scaling={"rope_type": "dynamic", "factor": 2.0}))
    assert status(scaled, "config.max_position_embeddings") == "PASS"
    yarn = run(tmp_path / "b", drafter_config(max_pos=131072, rope_scaling={
        "rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4096}))
    assert status(yarn, "config.max_position_embeddings") == "FAIL"


def test_layout_layers0(tmp_path: Path) -> None:
    rep = run(tmp_path, tensors=drafter_tensors(prefix="layers.0"))
    assert status(rep, "weights.layout") == "WARN"
    assert "0.5.5" in msg(rep, "weights.layout")
    assert status(rep, "weights.attention") == "PASS"


def test_layout_mixed_and_missing(tmp_path: Path) -> None:
    t = drafter_tensors()
    t["layers.0.mlp.up_proj.weight"] = t["midlayer.mlp.up_proj.weight"]
    assert status(run(tmp_path / "a", tensors=t), "weights.layout") == "FAIL"
    t2 = {k: v for k, v in drafter_tensors().items() if not k.startswith("midlayer.")}
    rep = run(tmp_path / "b", tensors=t2)
    assert status(rep, "weights.layout") == "FAIL"
    assert rep.finding("weights.attention") is None  # nothing to check without q/k_proj


def test_layout_layer_count(tmp_path: Path) -> None:
    t = drafter_tensors(prefix="layers.0")
    t.update({k.replace("layers.0.", "layers.1."): v for k, v in t.items() if k.startswith("layers.0.")})
    assert status(run(tmp_path / "a", tensors=t), "weights.layout") == "FAIL"  # config says 1 layer
    assert status(run(tmp_path / "b", drafter_config(num_hidden_layers=2), t), "weights.layout") == "WARN"


def test_embed_tokens(tmp_path: Path) -> None:
    ok = run(tmp_path / "a", tensors=drafter_tensors(embed=True))
    assert status(ok, "weights.embed_tokens") == "PASS" and "present" in msg(ok, "weights.embed_tokens")
    t = drafter_tensors(embed=True)
    t["embed_tokens.weight"] = np.zeros((100, SMALL["hidden"]), np.float16)
    assert status(run(tmp_path / "b", tensors=t), "weights.embed_tokens") == "FAIL"


def test_fc(tmp_path: Path) -> None:
    t = drafter_tensors(n_aux=2)
    rep = run(tmp_path / "a", tensors=t)
    f = rep.finding("weights.fc")
    assert f is not None and f.status == "FAIL" and f.values["expected_shape"] == [32, 96]
    t = {k: v for k, v in drafter_tensors().items() if k != "fc.weight"}
    assert status(run(tmp_path / "b", tensors=t), "weights.fc") == "FAIL"
    # two aux layers in the config: fc takes 2 x hidden
    ok = run(tmp_path / "c", drafter_config(layer_ids=[2, 58]), drafter_tensors(n_aux=2))
    assert status(ok, "weights.fc") == "PASS"


def test_lm_head(tmp_path: Path) -> None:
    t = {k: v for k, v in drafter_tensors().items() if k != "lm_head.weight"}
    assert status(run(tmp_path / "a", tensors=t), "weights.lm_head") == "FAIL"
    t = drafter_tensors()
    t["lm_head.weight"] = np.zeros((SMALL["vocab"], SMALL["hidden"]), np.float16)
    assert status(run(tmp_path / "b", tensors=t), "weights.lm_head") == "FAIL"


def test_attention_input_width(tmp_path: Path) -> None:
    t = drafter_tensors()
    t["midlayer.self_attn.q_proj.weight"] = np.zeros((128, SMALL["hidden"]), np.float16)  # 1 x hidden: not EAGLE-3
    assert status(run(tmp_path, tensors=t), "weights.attention") == "FAIL"


# --- d2t / t2d -------------------------------------------------------------------------------------

def test_d2t_missing_with_small_draft_vocab(tmp_path: Path) -> None:
    t = {k: v for k, v in drafter_tensors().items() if k not in ("d2t", "t2d")}
    rep = run(tmp_path, tensors=t)
    assert status(rep, "d2t.well_formed") == "FAIL"
    assert "draft ids would be used as target ids" in msg(rep, "d2t.well_formed")


def test_d2t_absolute_ids_hint(tmp_path: Path) -> None:
    targets = draft_targets(SMALL["vocab"], SMALL["draft_vocab"])
    t = drafter_tensors(d2t=targets.copy(), t2d=False)  # absolute ids stored where deltas belong
    rep = run(tmp_path, tensors=t)
    f = rep.finding("d2t.well_formed")
    assert f is not None and f.status == "FAIL"
    assert "look like absolute target ids" in f.message and f.values["out_of_range"] > 0


def test_d2t_duplicates(tmp_path: Path) -> None:
    targets = draft_targets(SMALL["vocab"], SMALL["draft_vocab"])
    targets[10] = targets[11]
    targets[20] = targets[21]
    rep = run(tmp_path, tensors=drafter_tensors(d2t=deltas(targets)))
    f = rep.finding("d2t.well_formed")
    assert f is not None and f.status == "FAIL" and f.values["duplicates"] == 2 and f.values["out_of_range"] == 0


@pytest.mark.parametrize(("value", "match"), [
    (np.zeros(SMALL["draft_vocab"], np.float32), "d2t: dtype F32, expected an integer tensor"),
    (np.zeros((SMALL["draft_vocab"], 1), np.int64), r"d2t: shape \[512, 1\], expected \[512\]"),
    (np.zeros(SMALL["draft_vocab"] - 1, np.int64), r"d2t: shape \[511\], expected \[512\] \(draft_vocab_size"),
])
def test_d2t_wrong_dtype_or_shape_is_bad_input(tmp_path: Path, value: np.ndarray, match: str) -> None:
    t = drafter_tensors()
    t["d2t"] = value
    with pytest.raises(SpecmodelError, match=match):
        run(tmp_path, tensors=t)


def test_t2d_wrong_shape_is_bad_input(tmp_path: Path) -> None:
    t = drafter_tensors()
    t["t2d"] = np.zeros(100, bool)
    with pytest.raises(SpecmodelError, match=r"t2d: shape \[100\], expected \[4096\]"):
        run(tmp_path, tensors=t)
    t["t2d"] = np.zeros(SMALL["vocab"], np.float32)
    with pytest.raises(SpecmodelError, match="t2d: dtype F32"):
        run(tmp_path, tensors=t)


def test_t2d_inconsistent_with_d2t(tmp_path: Path) -> None:
    t = drafter_tensors()
    t["t2d"] = drafter_tensors(seed=5)["t2d"]  # another map's mask
    rep = run(tmp_path, tensors=t)
    f = rep.finding("t2d.consistent")
    assert f is not None and f.status == "WARN" and f.values["d2t_targets_not_marked"] > 0
    assert f.values["marked"] == SMALL["draft_vocab"]


def test_t2d_absent_and_int_mask(tmp_path: Path) -> None:
    rep = run(tmp_path / "a", tensors=drafter_tensors(t2d=False))
    assert status(rep, "t2d.consistent") == "PASS" and "no t2d" in msg(rep, "t2d.consistent")
    t = drafter_tensors()
    t["t2d"] = t["t2d"].astype(np.int64)
    assert status(run(tmp_path / "b", tensors=t), "t2d.consistent") == "PASS"


@settings(max_examples=40, deadline=None)
@given(data=st.data(), vocab=st.integers(2, 300))
def test_any_permuted_target_set_round_trips(data: st.DataObject, vocab: int) -> None:
    """Any set of distinct target ids, in any slot order, written as deltas passes and reads back as that set."""
    ids = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=vocab, unique=True))
    targets = np.asarray(ids, dtype=np.int64)
    dims = Dims(hidden=8, target_hidden=8, vocab=vocab, draft_vocab=targets.size, layers=1, target_layers=4,
                target_vocab=vocab, target_model_hidden=8)
    vm = VocabMap(d2t=None, targets=deltas(targets) + np.arange(targets.size), t2d=None, t2d_mask=None)
    assert check_d2t(vm, dims).status == "PASS"
    np.testing.assert_array_equal(valid_targets(vm, dims), np.sort(targets))
    if targets.size >= 2:  # a repeated target in any slot is caught
        i, j = data.draw(st.tuples(st.integers(0, targets.size - 1), st.integers(0, targets.size - 1))
                         .filter(lambda p: p[0] != p[1]))
        dup = targets.copy()
        dup[i] = dup[j]
        bad = VocabMap(d2t=None, targets=dup, t2d=None, t2d_mask=None)
        f = check_d2t(bad, dims)
        assert f.status == "FAIL" and f.values["duplicates"] == 1


# --- reference drafter --------------------------------------------------------------------------

FULL_VOCAB, FULL_DRAFT_VOCAB = 163840, 32000


def published_pair(tmp_path: Path) -> tuple[Path, Path, Path, np.ndarray, np.ndarray]:
    """Full-scale vocab maps (32,000 draft slots over Kimi's 163,840 tokens), tiny hidden size.

    The K2 drafter's draft vocab has one extra token early (slot 252) and drops the last one, so
    every later slot shifts: 31,748 of 32,000 slots differ while the vocabs overlap 31,999 tokens.
    Same tensor names, shapes and dtypes as the reference: the published "identical shapes".
    """
    ref = draft_targets(FULL_VOCAB, FULL_DRAFT_VOCAB, seed=7)
    gap = next(i for i in range(252, FULL_DRAFT_VOCAB) if ref[i] - ref[i - 1] > 1)
    assert gap == 252 or ref[251] + 1 < ref[252]  # fixed seed: the extra id fits right before slot 252
    extra = ref[gap - 1] + 1
    k2 = np.concatenate([ref[:gap], [extra], ref[gap:-1]]).astype(np.int64)
    cfg = drafter_config(hidden=16, vocab=FULL_VOCAB, draft_vocab=FULL_DRAFT_VOCAB, heads=8, kv=8, head_dim=2)
    tgt = write_target(tmp_path / "kimi-k2.5", hidden=16, vocab=FULL_VOCAB)

    def tensors(targets: np.ndarray) -> dict[str, np.ndarray]:
        return drafter_tensors(hidden=16, vocab=FULL_VOCAB, draft_vocab=FULL_DRAFT_VOCAB, heads=8, kv=8, head_dim=2,
                               d2t=deltas(targets))

    r = write_drafter(tmp_path / "k25-drafter", cfg, tensors(ref))
    d = write_drafter(tmp_path / "k2-drafter", cfg, tensors(k2))
    return d, tgt, r, k2, ref


def test_published_case_31748_of_32000(tmp_path: Path) -> None:
    d, tgt, r, k2, ref = published_pair(tmp_path)
    assert int(np.count_nonzero(k2 != ref)) == 31748
    rep = check_drafter(drafter_dir=d, target_dir=tgt, reference_dir=r)
    assert [f.name for f in rep.findings if f.status != "PASS"] == ["d2t.reference_mismatch"]
    assert status(rep, "reference.shapes") == "PASS"  # identical shapes ...
    assert status(rep, "d2t.well_formed") == "PASS"   # ... a well-formed map ...
    f = rep.finding("d2t.reference_mismatch")         # ... and still the wrong one
    assert f is not None and f.status == "FAIL"
    assert f.values["slots_differ"] == 31748 and f.values["slots"] == 32000
    assert f.message.startswith("31,748 of 32,000 d2t slots differ from the reference (99.2%)")
    o = rep.finding("d2t.reference_overlap")
    assert o is not None and o.values["common_tokens"] == 31999 and o.status == "PASS"
    assert "31,999 of the reference's 32,000 target tokens (99.997%)" in o.message
    assert rep.status == "FAIL"


def test_reference_identical_and_small_mismatch(tmp_path: Path) -> None:
    d = write_drafter(tmp_path / "d")
    r = write_drafter(tmp_path / "r")
    t = write_target(tmp_path / "t")
    rep = check_drafter(drafter_dir=d, target_dir=t, reference_dir=r)
    assert [f.name for f in rep.findings][-3:] == ["reference.shapes", "d2t.reference_mismatch", "d2t.reference_overlap"]
    assert rep.status == "PASS"
    # swap two slots: 2 of 512 differ (0.4%) -> WARN, same vocab -> overlap 100%
    targets = draft_targets(SMALL["vocab"], SMALL["draft_vocab"])
    targets[[3, 4]] = targets[[4, 3]]
    d2 = write_drafter(tmp_path / "d2", tensors=drafter_tensors(d2t=deltas(targets)))
    rep2 = check_drafter(drafter_dir=d2, target_dir=t, reference_dir=r)
    assert status(rep2, "d2t.reference_mismatch") == "WARN"
    o = rep2.finding("d2t.reference_overlap")
    assert o is not None and o.values["overlap"] == 1.0


def test_reference_low_overlap_and_shape_diff(tmp_path: Path) -> None:
    t = write_target(tmp_path / "t")
    r = write_drafter(tmp_path / "r")
    d = write_drafter(tmp_path / "d", drafter_config(layer_ids=[3, 30, 57]), drafter_tensors(seed=3, embed=True))
    rep = check_drafter(drafter_dir=d, target_dir=t, reference_dir=r)
    assert status(rep, "d2t.reference_overlap") == "FAIL"
    f = rep.finding("reference.shapes")
    assert f is not None and f.status == "WARN"
    assert f.values["only_in_drafter"] == ["embed_tokens.weight"]
    assert f.values["config_fields_differ"] == ["eagle_aux_hidden_state_layer_ids"]


def test_reference_with_bad_d2t_is_bad_input(tmp_path: Path) -> None:
    t = drafter_tensors()
    t["d2t"] = t["d2t"].astype(np.float64)
    r = write_drafter(tmp_path / "r", tensors=t)
    with pytest.raises(SpecmodelError, match=r"d2t: dtype F64.*\[reference drafter\]"):
        run(tmp_path, reference_dir=r)


# --- token frequencies --------------------------------------------------------------------------

def test_coverage_and_ceiling(tmp_path: Path) -> None:
    targets = draft_targets(SMALL["vocab"], SMALL["draft_vocab"])
    outside = np.setdiff1d(np.arange(SMALL["vocab"]), targets)
    freq = {str(int(targets[0])): 600, str(int(targets[1])): 300, str(int(outside[0])): 75, str(int(outside[1])): 25}
    p = tmp_path / "freq.json"
    p.write_text(json.dumps(freq))
    rep = run(tmp_path, token_freq=p)
    assert rep.acceptance_ceiling == pytest.approx(0.9)
    f = rep.finding("vocab.coverage")
    assert f is not None and f.status == "PASS"
    assert f.values["ceiling_tokens_per_step"]["3"] == pytest.approx(chain_mean(0.9, 3))
    assert f.values["top_uncovered"] == [[int(outside[0]), 75.0], [int(outside[1]), 25.0]]
    assert "90.0%" in f.message and f"{chain_mean(0.9, 3):.2f} tokens/step at 3 steps" in f.message


def test_coverage_csv_and_thresholds(tmp_path: Path) -> None:
    targets = draft_targets(SMALL["vocab"], SMALL["draft_vocab"])
    outside = np.setdiff1d(np.arange(SMALL["vocab"]), targets)
    p = tmp_path / "freq.tsv"
    p.write_text(f"token_id\tcount\n# sample of 1000 tokens\n{targets[5]}\t300\n{outside[3]}\t700\n")
    rep = run(tmp_path / "a", token_freq=p)
    assert rep.acceptance_ceiling == pytest.approx(0.3)
    assert status(rep, "vocab.coverage") == "FAIL"
    p.write_text(f"{targets[5]},700\n{outside[3]},300\n")
    assert status(run(tmp_path / "b", token_freq=p), "vocab.coverage") == "WARN"


@pytest.mark.parametrize(("content", "match"), [
    ('{"99999": 5}', "token id 99999 outside the target vocab \\[0, 4096\\)"),
    ('{"abc": 5}', "token id must be an integer"),
    ('{"1": -5}', "count must be a finite number >= 0"),
    ('{"1": 0}', "all counts are zero"),
    ("1,5\n1,6\n", "line 2: token id 1 repeated"),
    ("1,5,7\n", "line 1: expected 'token_id,count'"),
    ("", "no token counts"),
    ("[1, 2]", "expected a JSON object"),
])
def test_bad_token_freq(tmp_path: Path, content: str, match: str) -> None:
    p = tmp_path / "freq.txt"
    p.write_text(content)
    with pytest.raises(SpecmodelError, match=match):
        run(tmp_path, token_freq=p)


def test_accept_ceiling_tokens() -> None:
    assert accept_ceiling_tokens(1.0, 3) == 4.0
    assert accept_ceiling_tokens(0.0, 3) == 1.0
    assert accept_ceiling_tokens(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25


@settings(max_examples=50, deadline=None)
@given(a=st.floats(0, 1), b=st.floats(0, 1), steps=st.integers(0, 8))
def test_accept_ceiling_monotone_in_coverage(a: float, b: float, steps: int) -> None:
    lo, hi = sorted((a, b))
    assert 1.0 <= accept_ceiling_tokens(lo, steps) <= accept_ceiling_tokens(hi, steps) + 1e-12 <= steps + 1 + 1e-9


# --- bad input ------------------------------------------------------------------------------------

def test_missing_dirs_and_configs(tmp_path: Path) -> None:
    t = write_target(tmp_path / "t")
    with pytest.raises(SpecmodelError, match="nope: drafter directory not found"):
        check_drafter(drafter_dir=tmp_path / "nope", target_dir=t)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecmodelError, match="empty/config.json: file not found"):
        check_drafter(drafter_dir=tmp_path / "empty", target_dir=t)
    d = write_drafter(tmp_path / "d")
    with pytest.raises(SpecmodelError, match="target directory not found"):
        check_drafter(drafter_dir=d, target_dir=tmp_path / "nope")
    cfg = json.loads((t / "config.json").read_text())
    del cfg["text_config"]["num_hidden_layers"]
    (t / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SpecmodelError, match="missing 'num_hidden_layers'"):
        check_drafter(drafter_dir=d, target_dir=t)


def test_unreadable_drafter_shard(tmp_path: Path) -> None:
    d = write_drafter(tmp_path / "d")
    (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(SpecmodelError, match="model.safetensors: unreadable safetensors header"):
        check_drafter(drafter_dir=d, target_dir=write_target(tmp_path / "t"))


def test_sharded_drafter_checks_like_single(tmp_path: Path) -> None:
    t = write_target(tmp_path / "t")
    single = check_drafter(drafter_dir=write_drafter(tmp_path / "a"), target_dir=t)
    sharded = check_drafter(drafter_dir=write_drafter(tmp_path / "b", shards=4), target_dir=t)
    assert [(f.name, f.status, f.values) for f in single.findings] == [(f.name, f.status, f.values) for f in sharded.findings]


def test_bf16_checkpoint_header_only(tmp_path: Path) -> None:
    """BF16 weights (what real drafters ship) are only looked at through the header."""
    d = write_drafter(tmp_path / "d", drafter_config(torch_dtype="bfloat16"))
    t = drafter_tensors()
    # rewrite the float tensors as BF16 by hand: numpy has no bfloat16
    floats = {k: v for k, v in t.items() if v.dtype == np.float16}
    save_file({k: v for k, v in t.items() if k not in floats}, str(d / "model.safetensors"))
    raw = (d / "model.safetensors").read_bytes()
    import struct
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    off = len(data)
    for k, v in floats.items():
        header[k] = {"dtype": "BF16", "shape": list(v.shape), "data_offsets": [off, off + v.size * 2]}
        data += b"\0" * (v.size * 2)
        off += v.size * 2
    hb = json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(hb)) + hb + data)
    rep = check_drafter(drafter_dir=d, target_dir=write_target(tmp_path / "t", torch_dtype="bfloat16"))
    assert rep.status == "PASS", [(f.name, f.message) for f in rep.findings if f.status != "PASS"]
    assert rep.finding("weights.dtype").values["float_dtypes"] == {"BF16": 13}  # type: ignore[union-attr]


def test_declared_target_hidden_size_must_match(tmp_path: Path) -> None:
    rep = run(tmp_path, drafter_config(target_hidden_size=64))
    f = rep.finding("config.hidden_size")
    assert f is not None and f.status == "FAIL" and "64" in f.message and f.values["drafter_target_hidden_size"] == 64


def test_findings_are_json_safe() -> None:
    from specmodel.drafter import Finding

    with pytest.raises(ValueError):
        Finding(name="x", status="MAYBE", message="m", values={})
    with pytest.raises((TypeError, ValueError)):
        Finding(name="x", status="PASS", message="m", values={"n": np.int64(3)})  # numpy scalars would break --json
    with pytest.raises(ValueError):
        Finding(name="x", status="PASS", message="m", values={"n": float("nan")})
    rep = DrafterReport(drafter_dir="d", target_dir="t", reference_dir=None, acceptance_ceiling=None, findings=(
        Finding(name="a", status="PASS", message="ok", values={}),
        Finding(name="b", status="WARN", message="hm", values={"n": 1})))
    assert rep.status == "WARN" and rep.to_dict()["counts"] == {"PASS": 1, "WARN": 1, "FAIL": 0}
    with pytest.raises(SpecmodelError):
        DrafterReport(drafter_dir="d", target_dir="t", reference_dir=None, findings=(), acceptance_ceiling=1.5)
