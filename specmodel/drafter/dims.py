"""What every drafter check needs: the two configs' dimensions (:class:`Dims`), a tensor found by
its short name, and the number formats the findings quote."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specmodel.drafter.safetensors_io import TensorInfo
from specmodel.hfconfig import HFConfig

#: config dtype name -> safetensors dtype
CONFIG_TO_ST_DTYPE = {"bfloat16": "BF16", "float16": "F16", "half": "F16", "float32": "F32", "float": "F32"}


def count_text(x: int) -> str:
    """12,345: a count with thousands separators."""
    return f"{x:,}"


def share_text(x: float) -> str:
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
