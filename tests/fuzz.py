"""A small mutation fuzzer for specmodel's readers (used by tests/test_fuzz.py and `make fuzz`).

Each target takes a seed file (real data from tests/data) and a reader; the fuzzer mutates the
seed's bytes (byte flips, cuts, duplicated spans, interesting tokens such as 5,000-digit and
1e400 numbers, deep nesting, NUL bytes, lists where scalars go, gzip wrapping and corruption)
and calls the reader. The promise under test: a reader either returns or raises
:class:`SpecmodelError` - any other exception is a crash a user would see as a traceback.
"""

from __future__ import annotations

import gzip
import random
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specmodel.errors import SpecmodelError

INTERESTING = [b"9" * 5000, b"9" * 400, b"1e400", b"-1e400", b"NaN", b"Infinity", b"-1", b"0", b"1e9",
               b"4294967297", b"[" * 3000, b"{" * 100, b"[]", b"{}", b'"x"', b"null", b"true", b"[1,2]",
               b'{"a":1}', b"\x00", b"\xff\xfe", b"\n", b",", b":", b"\"", b"0" * 60, b"1" * 40000,
               b".", b"e", b"-", b"#", b"  ", b"nan", b"inf"]
_NUM = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits of ``data``."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        n = len(out)
        pos = rng.randrange(n + 1)
        if op == 0 and n:  # flip a byte
            out[rng.randrange(n)] = rng.randrange(256)
        elif op == 1 and n:  # delete a span
            out[pos:pos + rng.randint(1, 64)] = b""
        elif op == 2 and n:  # duplicate a span
            a = rng.randrange(n)
            out[pos:pos] = out[a:a + rng.randint(1, 256)]
        elif op == 3:  # insert an interesting token
            out[pos:pos] = rng.choice(INTERESTING)
        elif op in (4, 5):  # replace a number with an interesting one (keeps the structure valid)
            nums = list(_NUM.finditer(bytes(out[:200_000])))
            if nums:
                m = rng.choice(nums)
                out[m.start():m.end()] = rng.choice(INTERESTING[:14])
        elif op == 6:  # truncate
            del out[pos:]
        elif op == 7:  # gzip, sometimes broken
            z = gzip.compress(bytes(out), compresslevel=1)
            out = bytearray(z if rng.random() < 0.5 else z[: rng.randrange(len(z) + 1)])
        elif op == 8 and n:  # swap a value-like token for a container
            nums = list(_NUM.finditer(bytes(out[:200_000])))
            if nums:
                m = rng.choice(nums)
                out[m.start():m.end()] = rng.choice([b"[1,2]", b'{"a":1}', b'"s"', b"null", b"[]"])
    return bytes(out)


@dataclass
class Crash:
    target: str
    seed_file: str
    example: int
    error: str
    input_path: str


@dataclass
class FuzzResult:
    target: str
    examples: int = 0
    seconds: float = 0.0
    rejected: int = 0  # SpecmodelError: the reader refused the input cleanly
    crashes: list[Crash] = field(default_factory=list)
    slowest_s: float = 0.0


def fuzz(name: str, seeds: list[Path], reader: Callable[[Path], object], *, seconds: float, work: Path,
         seed: int = 0, suffix: str = "", max_crashes: int = 5) -> FuzzResult:
    """Mutate ``seeds`` for ``seconds`` (deterministic sequence for a given ``seed``)."""
    rng = random.Random(f"{name}:{seed}")
    datas = [(s, s.read_bytes()) for s in seeds]
    if any(s.suffix == ".gz" for s in seeds):
        datas = [(s, gzip.decompress(d) if d[:2] == b"\x1f\x8b" else d) for s, d in datas]
    res = FuzzResult(target=name)
    work.mkdir(parents=True, exist_ok=True)
    t_end = time.monotonic() + seconds
    t0 = time.monotonic()
    while time.monotonic() < t_end and len(res.crashes) < max_crashes:
        src, data = datas[res.examples % len(datas)]
        inp = mutate(data, rng)
        f = work / f"input{suffix or ''.join(src.suffixes[-1:])}"
        f.write_bytes(inp)
        t = time.monotonic()
        try:
            reader(f)
        except SpecmodelError:
            res.rejected += 1
        except Exception:  # noqa: BLE001 - the crash we hunt
            keep = work / f"crash-{len(res.crashes)}{f.suffix}"
            keep.write_bytes(inp)
            res.crashes.append(Crash(target=name, seed_file=src.name, example=res.examples,
                                     error=traceback.format_exc(limit=-3), input_path=str(keep)))
        res.slowest_s = max(res.slowest_s, time.monotonic() - t)
        res.examples += 1
    res.seconds = time.monotonic() - t0
    return res
