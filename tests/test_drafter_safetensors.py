"""Safetensors header reading, plus the drafter/target directory builders the other
``test_drafter_*`` modules import (real config.json, real files written by ``safetensors``)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from specmodel.drafter.safetensors_io import load_tensor, read_checkpoint_headers, read_header
from specmodel.errors import SpecmodelError

# --- builders ---------------------------------------------------------------------------------

#: the published AQ-MedAI K2 drafter / Kimi-K2.5 target, hidden sizes scaled down
SMALL = {"hidden": 32, "vocab": 4096, "draft_vocab": 512, "heads": 8, "kv": 8, "head_dim": 16, "layers": 61}


def draft_targets(vocab: int, draft_vocab: int, seed: int = 0) -> np.ndarray:
    """A plausible draft vocab: ``draft_vocab`` distinct target ids, ascending (how trainers build it)."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(vocab, size=draft_vocab, replace=False)).astype(np.int64)


def deltas(targets: np.ndarray) -> np.ndarray:
    """d2t in SGLang/vLLM's delta format: target id - draft id."""
    return (targets - np.arange(targets.size, dtype=np.int64)).astype(np.int64)


def write_config(d: Path, cfg: dict[str, Any]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))


def drafter_config(*, hidden: int = SMALL["hidden"], vocab: int = SMALL["vocab"],
                   draft_vocab: int | None = SMALL["draft_vocab"], heads: int = SMALL["heads"], kv: int = SMALL["kv"],
                   head_dim: int = SMALL["head_dim"], layer_ids: list[int] | None = None,
                   max_pos: int = 262144, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": 2 * hidden, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
        "num_hidden_layers": 1, "vocab_size": vocab, "max_position_embeddings": max_pos, "torch_dtype": "float16",
        "tie_word_embeddings": False, "eagle_config": {"eagle_aux_hidden_state_layer_ids": layer_ids or [2, 30, 58],
                                                       "use_aux_hidden_state": True},
        "rms_norm_eps": 1e-5, "bos_token_id": 163584, "eos_token_id": 163585,
    }
    if draft_vocab is not None:
        cfg["draft_vocab_size"] = draft_vocab
    cfg.update(extra)
    return cfg


def drafter_tensors(*, hidden: int = SMALL["hidden"], vocab: int = SMALL["vocab"], draft_vocab: int = SMALL["draft_vocab"],
                    heads: int = SMALL["heads"], kv: int = SMALL["kv"], head_dim: int = SMALL["head_dim"],
                    n_aux: int = 3, prefix: str = "midlayer", embed: bool = False,
                    d2t: np.ndarray | None = None, t2d: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    """An EAGLE-3 Llama drafter's tensors (AQ-MedAI key names), float16, scaled down."""
    f = np.float16
    z = np.zeros
    t: dict[str, np.ndarray] = {
        f"{prefix}.input_layernorm.weight": np.ones(hidden, f),
        f"{prefix}.hidden_norm.weight": np.ones(hidden, f),
        f"{prefix}.post_attention_layernorm.weight": np.ones(hidden, f),
        f"{prefix}.self_attn.q_proj.weight": z((heads * head_dim, 2 * hidden), f),
        f"{prefix}.self_attn.k_proj.weight": z((kv * head_dim, 2 * hidden), f),
        f"{prefix}.self_attn.v_proj.weight": z((kv * head_dim, 2 * hidden), f),
        f"{prefix}.self_attn.o_proj.weight": z((hidden, heads * head_dim), f),
        f"{prefix}.mlp.gate_proj.weight": z((2 * hidden, hidden), f),
        f"{prefix}.mlp.up_proj.weight": z((2 * hidden, hidden), f),
        f"{prefix}.mlp.down_proj.weight": z((hidden, 2 * hidden), f),
        "fc.weight": z((hidden, n_aux * hidden), f),
        "norm.weight": np.ones(hidden, f),
        "lm_head.weight": z((draft_vocab, hidden), f),
    }
    if embed:
        t["embed_tokens.weight"] = z((vocab, hidden), f)
    if draft_vocab < vocab or d2t is not None:
        targets = draft_targets(vocab, draft_vocab, seed) if d2t is None else d2t + np.arange(d2t.size)
        t["d2t"] = deltas(targets) if d2t is None else d2t
        if t2d:
            mask = np.zeros(vocab, dtype=bool)
            mask[targets[(targets >= 0) & (targets < vocab)]] = True
            t["t2d"] = mask
    return t


def write_drafter(d: Path, cfg: dict[str, Any] | None = None, tensors: dict[str, np.ndarray] | None = None,
                  *, shards: int = 1) -> Path:
    """config.json + model.safetensors, or ``shards`` files + model.safetensors.index.json."""
    write_config(d, cfg if cfg is not None else drafter_config())
    t = tensors if tensors is not None else drafter_tensors()
    if shards == 1:
        save_file(t, str(d / "model.safetensors"))
        return d
    names = sorted(t)
    weight_map: dict[str, str] = {}
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: t[n] for n in names[i::shards]}
        save_file(part, str(d / fname))
        weight_map.update({n: fname for n in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return d


def write_target(d: Path, *, hidden: int = SMALL["hidden"], vocab: int = SMALL["vocab"], layers: int = SMALL["layers"],
                 heads: int = 64, max_pos: int = 262144, nested: bool = True, **extra: Any) -> Path:
    """A Kimi-K2.5-style target: config.json only (the real one is ~600 GB of shards, never read).

    ``nested`` puts the language model under ``text_config`` as Kimi-K2.5's config does.
    """
    text = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": hidden,
            "num_hidden_layers": layers, "vocab_size": vocab, "num_attention_heads": heads,
            "num_key_value_heads": heads, "max_position_embeddings": max_pos, "torch_dtype": "float16",
            "kv_lora_rank": 512, "q_lora_rank": 1536,
            "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096}}
    text.update(extra)
    cfg: dict[str, Any] = ({"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                            "text_config": text, "vision_config": {"hidden_size": 1152}} if nested else text)
    write_config(d, cfg)
    return d


# --- tests --------------------------------------------------------------------------------------

def test_header_matches_safetensors_library(tmp_path: Path) -> None:
    d = write_drafter(tmp_path / "drafter")
    ours = read_header(d / "model.safetensors")
    with safe_open(str(d / "model.safetensors"), framework="numpy") as fh:
        keys = set(fh.keys())
        for name in keys:
            arr = fh.get_tensor(name)
            assert ours[name].shape == arr.shape, name
            assert ours[name].numel == arr.size
    assert set(ours) == keys
    assert ours["d2t"].dtype == "I64" and ours["t2d"].dtype == "BOOL" and ours["fc.weight"].dtype == "F16"


def test_sharded_checkpoint_via_index(tmp_path: Path) -> None:
    t = drafter_tensors()
    d = write_drafter(tmp_path / "sharded", tensors=t, shards=3)
    (d / "stray.safetensors").write_bytes(b"junk")  # not in the index: ignored
    infos = read_checkpoint_headers(d)
    assert set(infos) == set(t)
    assert len({i.file.name for i in infos.values()}) == 3
    np.testing.assert_array_equal(load_tensor(infos["d2t"]), t["d2t"])


def test_index_naming_a_missing_shard(tmp_path: Path) -> None:
    d = write_drafter(tmp_path / "sharded", shards=2)
    next(d.glob("model-00002-*.safetensors")).unlink()
    with pytest.raises(SpecmodelError, match="weight_map names 'model-00002-of-00002.safetensors'"):
        read_checkpoint_headers(d)


def test_index_tensor_missing_from_header(tmp_path: Path) -> None:
    d = write_drafter(tmp_path / "sharded", shards=2)
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(SpecmodelError, match="'ghost.weight'.*no such tensor"):
        read_checkpoint_headers(d)


def test_no_safetensors_files(tmp_path: Path) -> None:
    write_config(tmp_path / "d", drafter_config())
    with pytest.raises(SpecmodelError, match="no \\*.safetensors files"):
        read_checkpoint_headers(tmp_path / "d")


def _raw(header: bytes, data: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


@pytest.mark.parametrize(("blob", "why"), [
    (b"\x01\x02", "shorter than the 8-byte length"),
    (_raw(b"{}", length=10**6), "declared length 1000000"),
    (_raw(b"not json"), "not JSON"),
    (_raw(b"[1, 2]"), "expected a JSON object"),
    (_raw(json.dumps({"w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}).encode(), b"\0"), "unknown dtype 'Q7'"),
    (_raw(json.dumps({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}).encode(), b"\0" * 4), "shape must be"),
    (_raw(json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode(), b"\0" * 8), "truncated file"),
    (_raw(json.dumps({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}).encode(), b"\0" * 8), "span 8 bytes, F32\\[3\\] needs 12"),
    (_raw(json.dumps({"w": {"dtype": "F32", "shape": [2]}}).encode(), b"\0" * 8), "data_offsets must be"),
])
def test_unreadable_headers(tmp_path: Path, blob: bytes, why: str) -> None:
    p = tmp_path / "model.safetensors"
    p.write_bytes(blob)
    with pytest.raises(SpecmodelError, match="model.safetensors: unreadable safetensors header") as ei:
        read_header(p)
    assert ei.match(why)
    assert "\n" not in str(ei.value)


def test_dtypes_beyond_the_old_table_are_read(tmp_path: Path) -> None:
    """C64 and the packed F4/F6 dtypes are valid safetensors (0.8): their headers are read, not refused."""
    header = {"c": {"dtype": "C64", "shape": [2], "data_offsets": [0, 16]},
              "f4": {"dtype": "F4", "shape": [4], "data_offsets": [16, 18]},
              "f6": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [18, 21]},
              "w": {"dtype": "F32", "shape": [2], "data_offsets": [21, 29]}}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    p = tmp_path / "model.safetensors"
    p.write_bytes(_raw(h, b"\0" * 29))
    got = {n: (t.dtype, t.shape) for n, t in read_header(p).items()}
    assert got == {"c": ("C64", (2,)), "f4": ("F4", (4,)), "f6": ("F6_E2M3", (4,)), "w": ("F32", (2,))}


def test_packed_dtype_off_a_byte_boundary_is_named(tmp_path: Path) -> None:
    h = json.dumps({"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}).encode()
    p = tmp_path / "model.safetensors"
    p.write_bytes(_raw(h, b"\0" * 2))
    with pytest.raises(SpecmodelError, match=r"tensor 'w'.*F4\[3\] is 12 bits"):
        read_header(p)
