"""A small mutation fuzzer for specmodel's readers (used by tests/test_fuzz.py and `make fuzz`).

Each target takes a seed file (real data from tests/data) and a reader; the fuzzer mutates the
seed's bytes (byte flips, cuts, duplicated spans, interesting tokens such as 5,000-digit and
1e400 numbers, deep nesting, NUL bytes, lists where scalars go, gzip wrapping and corruption)
and calls the reader. The promise under test: a reader either returns or raises
:class:`SpecmodelError` - any other exception is a crash a user would see as a traceback.
"""

from __future__ import annotations

import contextlib
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
               b"4294967297", b"1e308", b"-1e308", b"1e-308",
               b"[" * 3000, b"{" * 100, b"[]", b"{}", b'"x"', b"null", b"true", b"[1,2]",
               b'{"a":1}', b"\x00", b"\xff\xfe", b"\n", b",", b":", b"\"", b"0" * 60, b"1" * 40000,
               b".", b"e", b"-", b"#", b"  ", b"nan", b"inf"]
#: INTERESTING's first entries: numbers and the containers that may stand where a number was (a
#: number replaced by one keeps the document parseable); 1e308 is finite but its square is not
NUMBERS = 17
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
                out[m.start():m.end()] = rng.choice(INTERESTING[:NUMBERS])
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


#: profile fields at extremes a corrupt or mutated file carries (the JSON token as written: the reader
#: takes Infinity / NaN tokens and must refuse them in one line), each written by
#: :func:`mutated_profile_text` from the shipped reference as tests/data/profile_mutated/<name>.json
PROFILE_MUTATIONS: tuple[tuple[str, tuple[str | int, ...], str], ...] = (
    ("spread_s_1e308", ("costs", 0, "spread_s"), "1e+308"),
    ("spread_s_-1e308", ("costs", 0, "spread_s"), "-1e+308"),
    ("spread_s_Infinity", ("costs", 0, "spread_s"), "Infinity"),
    ("spread_s_NaN", ("costs", 0, "spread_s"), "NaN"),
    ("skew_s_-Infinity", ("costs", 0, "skew_s"), "-Infinity"),
    ("total_s_1e308", ("costs", 0, "total_s"), "1e+308"),
    ("compute_s_1e308", ("costs", 2, "compute_s"), "1e+308"),
    ("ci95_rel_1e308", ("costs", 1, "ci95_rel"), "1e+308"),
    ("samples_1e308", ("costs", 0, "samples"), "1e+308"),
    ("alpha_s_1e308", ("allreduce_fit", "alpha_s"), "1e+308"),
    ("beta_bytes_per_s_1e-308", ("allreduce_fit", "beta_bytes_per_s"), "1e-308"),
    ("overhead_s_1e308", ("overhead_s",), "1e+308"),
)


def mutated_profile_text(reference_text: str, path: tuple[str | int, ...], token: str) -> str:
    """The reference profile with the field at ``path`` written as the JSON token ``token``."""
    import json

    d = json.loads(reference_text)
    obj = d
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = "@@token@@"
    return json.dumps(d, indent=2).replace('"@@token@@"', token) + "\n"


def write_profile_seeds(reference: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    text = reference.read_text()
    for name, path, token in PROFILE_MUTATIONS:
        (out / f"{name}.json").write_text(mutated_profile_text(text, path, token))


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
    #: CPU seconds of this process on its slowest input: the work an input costs, not how long a
    #: busy box kept the thread waiting (wall time once read 42 s beside three live servers on 2 cores)
    slowest_cpu_s: float = 0.0


def _write_input(work: Path, src: Path, data: bytes, suffix: str) -> Path:
    f = work / f"input{suffix or ''.join(src.suffixes[-1:])}"
    f.write_bytes(data)
    return f


def fuzz(name: str, seeds: list[Path], reader: Callable[[Path], object], *, seconds: float, work: Path,
         seed: int = 0, suffix: str = "", max_crashes: int = 5) -> FuzzResult:
    """Mutate ``seeds`` for ``seconds`` (deterministic sequence for a given ``seed``)."""
    rng = random.Random(f"{name}:{seed}")
    datas = [(s, s.read_bytes()) for s in seeds]
    if any(s.suffix == ".gz" for s in seeds):
        datas = [(s, gzip.decompress(d) if d[:2] == b"\x1f\x8b" else d) for s, d in datas]
    res = FuzzResult(target=name)
    work.mkdir(parents=True, exist_ok=True)
    # the first call pays the reader's imports: outside the clock, on an unmutated seed
    with contextlib.suppress(Exception):
        reader(_write_input(work, seeds[0], datas[0][1], suffix))
    t_end = time.monotonic() + seconds
    t0 = time.monotonic()
    while time.monotonic() < t_end and len(res.crashes) < max_crashes:
        src, data = datas[res.examples % len(datas)]
        inp = mutate(data, rng)
        f = _write_input(work, src, inp, suffix)
        t = time.process_time()
        try:
            reader(f)
        except SpecmodelError:
            res.rejected += 1
        except Exception:  # noqa: BLE001 - the crash we hunt
            keep = work / f"crash-{len(res.crashes)}{f.suffix}"
            keep.write_bytes(inp)
            res.crashes.append(Crash(target=name, seed_file=src.name, example=res.examples,
                                     error=traceback.format_exc(limit=-3), input_path=str(keep)))
        res.slowest_cpu_s = max(res.slowest_cpu_s, time.process_time() - t)
        res.examples += 1
    res.seconds = time.monotonic() - t0
    return res


if __name__ == "__main__":  # python -m tests.fuzz: rewrite the mutated-profile seeds from the reference
    _root = Path(__file__).resolve().parent
    write_profile_seeds(_root.parent / "specmodel" / "reference" / "kimi-k2.5-int4-tp8-pcie" / "profile.json",
                        _root / "data" / "profile_mutated")
