"""Hugging Face ``config.json`` reading for drafters and (possibly multimodal) targets, shared by
the drafter checks and the profiler's model shapes.

Multimodal targets nest the language model's config: Kimi-K2.5
(``KimiK25ForConditionalGeneration``) under ``text_config``, others under
``language_config`` / ``llm_config``. The nested value wins over a top-level one, because it is
what the language model (and so the drafter) sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.io import read_json

NESTED_KEYS = ("text_config", "language_config", "llm_config")

#: Keys SGLang reads for a context length, in order (sglang/srt/utils/hf_transformers/common.py,
#: ``CONTEXT_LENGTH_KEYS``, 0.5.23).
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")

#: EAGLE-3 drafter architectures each engine can load, read from their sources.
#: SGLang builds its registry from each models/*.py ``EntryClass``: llama_eagle3.py
#: (LlamaForCausalLMEagle3, 0.5.5 and 0.5.23) and kimi_k25_eagle3.py (Eagle3DeepseekV2ForCausalLM,
#: 0.5.23); the draft config's architecture is used as written.
SGLANG_EAGLE3_ARCHS = frozenset({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"})
#: vLLM 0.33.0 model_executor/models/registry.py speculative-decoding entries for EAGLE-3.
VLLM_EAGLE3_ARCHS = frozenset({
    "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "PEagleDraftModel", "PeagleLlamaForCausalLM",
    "Eagle3MiniMaxM2ForCausalLM", "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM",
    "Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM", "Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM",
})


def vllm_eagle3_name(arch: str) -> str:
    """vLLM's EAGLEConfig renames a draft architecture for method eagle3: ``X`` -> ``Eagle3X``
    unless it already starts or ends with ``Eagle3`` (transformers_utils/configs/eagle.py)."""
    return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"


@dataclass(frozen=True, kw_only=True)
class HFConfig:
    """A parsed config.json; ``get`` looks in the nested text config first."""

    path: Path
    raw: dict[str, Any]

    def _sections(self) -> list[dict[str, Any]]:
        nested = [self.raw[k] for k in NESTED_KEYS if isinstance(self.raw.get(k), dict)]
        return nested + [self.raw]

    def get(self, key: str, default: Any = None) -> Any:
        for sec in self._sections():
            if key in sec and sec[key] is not None:
                return sec[key]
        return default

    def get_int(self, key: str, *, required: bool = False, minimum: int = 0) -> int | None:
        v = self.get(key)
        if v is None:
            if required:
                raise SpecmodelError(f"{self.path}: missing {key!r}")
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise SpecmodelError(f"{self.path}: {key} must be an integer >= {minimum}, got {v!r}")
        return v

    @property
    def architectures(self) -> list[str]:
        a = self.raw.get("architectures")
        if a is None:
            return []
        if not isinstance(a, list) or not all(isinstance(x, str) for x in a):
            raise SpecmodelError(f"{self.path}: architectures must be a list of strings, got {a!r}")
        return list(a)

    @property
    def dtype(self) -> str | None:
        """``torch_dtype`` (transformers < 4.56) or ``dtype`` (newer), normalised to e.g. 'bfloat16'."""
        v = self.get("torch_dtype", self.get("dtype"))
        if v is None:
            return None
        if not isinstance(v, str):
            raise SpecmodelError(f"{self.path}: torch_dtype must be a string, got {v!r}")
        return v.removeprefix("torch.")

    @property
    def eagle_config(self) -> dict[str, Any]:
        ec = self.raw.get("eagle_config")
        if ec is None:
            return {}
        if not isinstance(ec, dict):
            raise SpecmodelError(f"{self.path}: eagle_config must be an object, got {ec!r}")
        return ec

    def context_length(self) -> int | None:
        """SGLang's derived context length (``get_context_length``): the first of
        :data:`CONTEXT_LENGTH_KEYS`, times the rope-scaling factor unless the scaling names
        ``original_max_position_embeddings`` or is ``llama3``."""
        factor = 1.0
        rs = self.get("rope_scaling")
        if isinstance(rs, dict) and rs:
            f = rs.get("factor", 1)
            factor = float(f) if isinstance(f, (int, float)) and not isinstance(f, bool) else 1.0
            if "original_max_position_embeddings" in rs or rs.get("rope_type") == "llama3":
                factor = 1.0
        for key in CONTEXT_LENGTH_KEYS:
            v = self.get(key)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                    raise SpecmodelError(f"{self.path}: {key} must be a positive integer, got {v!r}")
                return int(factor * v)
        return None


def load_config(directory: str | Path, role: str) -> HFConfig:
    """``<dir>/config.json`` as an :class:`HFConfig`; ``role`` ('drafter', 'target', ...) names the flag."""
    d = Path(directory)
    if not d.exists():
        raise SpecmodelError(f"{d}: {role} directory not found")
    if not d.is_dir():
        hint = f"; pass the directory holding it: --{role} {d.parent}" if d.suffix == ".json" else ""
        raise SpecmodelError(f"{d}: --{role} must be a model directory (with config.json), got a file{hint}")
    raw = read_json(d / "config.json")
    if not isinstance(raw, dict):
        raise SpecmodelError(f"{d / 'config.json'}: expected a JSON object")
    return HFConfig(path=d / "config.json", raw=raw)
