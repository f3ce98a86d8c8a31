"""Read safetensors *headers* and single small tensors, never a whole checkpoint.

Format (https://github.com/huggingface/safetensors, "Format"): 8 bytes little-endian u64 N,
then N bytes of UTF-8 JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
"__metadata__": {...}}``, then the raw byte buffer; offsets are relative to the buffer.
The header is read through the ``safetensors`` package (``safe_open(...).get_slice``: dtype and
shape, nothing loaded), so every dtype the library knows is accepted (C64, the packed F4/F6, the
FNUZ F8s). When the library refuses a file, the header is parsed here as well, only to name the
field that is wrong in a precise one-line error. Tensors (``d2t``, ``t2d``) are read with
``safe_open(..., framework="numpy")``, which maps only that tensor.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_SAFETENSORS_HEADER_BYTES

#: bits per element of each safetensors dtype (safetensors 0.8 ``Dtype``; F4/F6 are packed),
#: used only to word the error for a file the library refuses.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64,
    "I64": 64, "U64": 64, "F64": 64,
}
INT_DTYPES = frozenset({"U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64"})
FLOAT_DTYPES = frozenset({"F4", "F6_E2M3", "F6_E3M2", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ",
                          "F8_E5M2FNUZ", "F16", "BF16", "F32", "F64"})

INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True, kw_only=True)
class TensorInfo:
    """One tensor as its file's header describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def read_header(path: str | Path) -> dict[str, TensorInfo]:
    """Dtype and shape of every tensor in one file, via the safetensors library (nothing loaded).

    Any defect raises SpecmodelError naming the file (and the tensor, where one is at fault).
    """
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    try:
        with safe_open(str(p), framework="numpy") as fh:
            out: dict[str, TensorInfo] = {}
            for name in fh.keys():
                sl = fh.get_slice(name)
                out[name] = TensorInfo(name=name, dtype=str(sl.get_dtype()), shape=tuple(sl.get_shape()), file=p)
            return out
    except OSError as exc:
        raise SpecmodelError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except (SafetensorError, ValueError, TypeError, OverflowError) as exc:
        library = " ".join(str(exc).split())
    _diagnose(p)  # raises with the precise field when our own parse finds it
    raise SpecmodelError(f"{p}: unreadable safetensors header ({library})")


def _diagnose(p: Path) -> None:
    """Parse a refused file's header by hand to name what is wrong; returns if nothing is found."""
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise SpecmodelError(f"{p}: unreadable safetensors header (file is {size} bytes, shorter than the 8-byte length)")
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_SAFETENSORS_HEADER_BYTES or n > size - 8:
                raise SpecmodelError(f"{p}: unreadable safetensors header (declared length {n} bytes, file is {size} bytes)")
            raw = fh.read(n)
    except OSError as exc:
        raise SpecmodelError(f"{p}: cannot read ({exc.strerror or exc})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SpecmodelError(f"{p}: unreadable safetensors header (not JSON: {' '.join(str(exc).split())})") from None
    if not isinstance(header, dict):
        raise SpecmodelError(f"{p}: unreadable safetensors header (expected a JSON object)")
    buffer_len = size - 8 - n
    for name, entry in header.items():
        if name != "__metadata__":
            _check_entry(p, name, entry, buffer_len)


def _check_entry(p: Path, name: str, entry: Any, buffer_len: int) -> None:
    where = f"{p}: unreadable safetensors header: tensor {name!r}"
    if not isinstance(entry, dict):
        raise SpecmodelError(f"{where}: expected an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BITS:
        raise SpecmodelError(f"{where}: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise SpecmodelError(f"{where}: shape must be a list of non-negative integers, got {shape!r}")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise SpecmodelError(f"{where}: data_offsets must be [begin, end], got {offsets!r}")
    begin, end = offsets
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if not 0 <= begin <= end <= buffer_len:
        raise SpecmodelError(f"{where}: data_offsets {offsets} outside the {buffer_len}-byte data section (truncated file?)")
    if bits % 8:
        raise SpecmodelError(f"{where}: {dtype}{shape} is {bits} bits, not a whole number of bytes")
    if end - begin != bits // 8:
        raise SpecmodelError(f"{where}: data_offsets span {end - begin} bytes, {dtype}{shape} needs {bits // 8}")


def read_checkpoint_headers(directory: str | Path) -> dict[str, TensorInfo]:
    """All tensors of a checkpoint directory, from headers only.

    Sharded checkpoints: ``model.safetensors.index.json``'s ``weight_map`` says which file
    holds each tensor (the index is authoritative, stray files are ignored). Otherwise every
    ``*.safetensors`` file in the directory.
    """
    d = Path(directory)
    index = d / INDEX_NAME
    if not index.exists():
        candidates = sorted(d.glob("*.safetensors.index.json"))
        index = candidates[0] if len(candidates) == 1 else index
    if index.exists():
        return _from_index(d, index)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise SpecmodelError(f"{d}: no *.safetensors files (only safetensors checkpoints are supported)")
    out: dict[str, TensorInfo] = {}
    for f in files:
        for name, info in read_header(f).items():
            if name in out:
                raise SpecmodelError(f"{d}: tensor {name!r} is in both {out[name].file.name} and {f.name}")
            out[name] = info
    return out


def _from_index(d: Path, index: Path) -> dict[str, TensorInfo]:
    from specmodel.io import is_within, read_json

    doc = read_json(index)
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not wm or not all(isinstance(v, str) for v in wm.values()):
        raise SpecmodelError(f"{index}: weight_map must be a non-empty object of tensor name -> file name")
    headers: dict[str, dict[str, TensorInfo]] = {}
    out: dict[str, TensorInfo] = {}
    for name, fname in wm.items():
        if fname not in headers:
            # a shard is a file of this checkpoint: an absolute path, '..' or a symlink leading out
            # of the directory is refused (the index must not make us read /etc/passwd or a neighbour)
            if ("\x00" in fname or Path(fname).is_absolute() or ".." in Path(fname).parts or not fname.strip()
                    or any(len(os.fsencode(part)) > 255 for part in Path(fname).parts)):
                raise SpecmodelError(f"{index}: weight_map names {fname[:120]!r}, outside {d} (shards must be files "
                                     "in the checkpoint directory)")
            f = d / fname
            if not is_within(f, d):
                raise SpecmodelError(f"{index}: weight_map names {fname[:120]!r}, which resolves outside {d} "
                                     "(a symlink out of the checkpoint directory)")
            if not f.is_file():
                raise SpecmodelError(f"{index}: weight_map names {fname[:120]!r}, which is not in {d}")
            headers[fname] = read_header(f)
        info = headers[fname].get(name)
        if info is None:
            raise SpecmodelError(f"{index}: weight_map puts {name!r} in {fname}, but that file's header has no such tensor")
        out[name] = info
    return out


def load_tensor(info: TensorInfo) -> np.ndarray:
    """Read one tensor (only its bytes) as numpy; BF16/F8 are not needed here and not supported."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(info.file), framework="numpy") as fh:
            return np.asarray(fh.get_tensor(info.name))
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise SpecmodelError(f"{info.file}: cannot read tensor {info.name!r} ({exc})") from None
