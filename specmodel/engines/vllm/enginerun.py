"""What a ``specmodel vllm`` run of a server kept for its engine log: the command it ran (with the flags
added for the log, :func:`engine_args`), recorded in ``engine_run.json`` (:func:`write_run`), and the
server's output, ``server.log``, whose ``Iteration(N): ...`` lines (``--enable-logging-iteration-details``;
``vllm/v1/metrics/loggers.py:200``, identical in 0.32.0 CPU, 0.33.0 and 0.34.0) are parsed here
(:func:`parse_lines`). What those lines time and the rows a profile builds from them:
:mod:`specmodel.engines.vllm.enginelog`. Runs anywhere: no vLLM, no torch.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_BATCH, MAX_STEP_TOKENS
from specmodel.units import from_ms

#: the server's output kept by ``specmodel vllm`` (stdout and stderr, as the terminal saw them)
SERVER_LOG = "server.log"
#: what ``specmodel vllm`` ran (the command after its additions) -- the log does not say TP or method
RUN_FILE = "engine_run.json"
#: the server flag that turns the lines on (``vllm/engine/arg_utils.py`` 0.32.0:1684, 0.34.0:1740)
ITERATION_FLAG = "--enable-logging-iteration-details"
EXECUTOR_FLAG = "--distributed-executor-backend"
#: the clock of an engine-log row (vs the hook's: its rows' ``step_clock``)
CLOCK = "engine_log"
#: where the format string is (cited in errors, so a changed line names its source)
FORMAT_SOURCE = "vllm/v1/metrics/loggers.py:200"

_ITER = re.compile(
    r"(?:Engine (?P<engine>\d+): )?Iteration\((?P<n>\d+)\): (?P<C>\d+) context requests, (?P<T>\d+) context tokens, "
    r"(?P<G>\d+) generation requests, (?P<g>\d+) generation tokens, iteration elapsed time: "
    r"(?P<ms>\d+(?:\.\d+)?) ms(?P<dummy> \(dummy\))?, (?P<device>\S*) ?KV cache usage")


@dataclass(frozen=True, kw_only=True)
class Iteration:
    """One logged engine step."""

    index: int
    engine: int
    ctx_requests: int
    ctx_tokens: int
    gen_requests: int
    gen_tokens: int
    elapsed_s: float
    dummy: bool = False
    #: vLLM's ``kv_cache_device`` as the line prints it ("CPU", "GPU", ...; "" when empty)
    device: str = ""

    def __post_init__(self) -> None:
        if self.gen_tokens < self.gen_requests or self.ctx_tokens < self.ctx_requests:
            raise ValueError("fewer tokens than requests")
        if max(self.ctx_requests, self.gen_requests) > MAX_BATCH or self.ctx_tokens + self.gen_tokens > MAX_STEP_TOKENS:
            raise ValueError("a step larger than specmodel's bounds")


def parse_lines(lines: Iterable[str], where: str) -> list[Iteration]:
    """The ``Iteration(N)`` lines among a server's output. A line that names ``Iteration(`` and
    ``iteration elapsed time`` but does not parse is one error naming ``where:line`` and the
    format's source; none at all is one error saying how to turn them on."""
    out: list[Iteration] = []
    for i, line in enumerate(lines, 1):
        if "iteration elapsed time" not in line:
            continue
        m = _ITER.search(line)
        try:
            if m is None:
                raise ValueError("not the format")
            out.append(Iteration(index=int(m["n"]), engine=int(m["engine"] or 0), ctx_requests=int(m["C"]),
                                 ctx_tokens=int(m["T"]), gen_requests=int(m["G"]), gen_tokens=int(m["g"]),
                                 elapsed_s=from_ms(float(m["ms"])), dummy=bool(m["dummy"]),
                                 device=m["device"] or ""))
        except ValueError as exc:
            raise SpecmodelError(f"{where}:{i}: not a vLLM iteration line ({exc}; the format of {FORMAT_SOURCE}): "
                                 f"{line.strip()[:160]!r}") from None
    if not out:
        raise SpecmodelError(f"{where}: no 'Iteration(N): ...' lines (the server needs {ITERATION_FLAG}; "
                             "`specmodel vllm` adds it; were requests served?)")
    return out


def read_server_log(path: str | os.PathLike[str]) -> list[Iteration]:
    from specmodel.io import read_bytes

    body = read_bytes(path, "a vLLM server log", max_bytes=1 << 30, decompress=False)
    return parse_lines(body.decode("utf-8", errors="replace").splitlines(), str(path))


# --------------------------------------------------------------------------- the run file


def server_flag(command: Sequence[str], *flags: str) -> str | None:
    """The value a server command line gives the first of ``flags`` (``--flag value`` or
    ``--flag=value``); None where it gives none."""
    args = list(command)
    for i, a in enumerate(args):
        for f in flags:
            if a == f and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(f + "="):
                return a.split("=", 1)[1]
    return None


def spec_of(command: Sequence[str]) -> tuple[str | None, int | None, int]:
    """(method, k, TP) of a vLLM server command line (``--speculative-config`` JSON,
    ``--tensor-parallel-size`` / ``-tp``); (None, None, tp) without speculation."""
    tp_s = server_flag(command, "--tensor-parallel-size", "-tp")
    try:
        tp = int(tp_s) if tp_s is not None else 1
    except ValueError:
        raise SpecmodelError(f"server command: --tensor-parallel-size: expected an integer, got {tp_s!r}") from None
    raw = server_flag(command, "--speculative-config", "-sc")
    if raw is None:
        return None, None, tp
    try:
        cfg = json.loads(raw)
    except ValueError:
        raise SpecmodelError(f"server command: --speculative-config: not JSON: {raw[:80]!r}") from None
    if not isinstance(cfg, dict):
        raise SpecmodelError(f"server command: --speculative-config: expected a JSON object, got {raw[:80]!r}")
    method, k = cfg.get("method"), cfg.get("num_speculative_tokens")
    return (str(method) if method else None), (k if isinstance(k, int) and not isinstance(k, bool) else None), tp


def executor_of(command: Sequence[str]) -> str:
    """The executor the server ran: its ``--distributed-executor-backend``, else vLLM's default
    (``uni`` at world size 1, ``config/parallel.py:1079-1080``; ``mp`` otherwise)."""
    chosen = server_flag(command, EXECUTOR_FLAG)
    if chosen is not None:
        return chosen
    return "uni" if spec_of(command)[2] == 1 else "mp"


def engine_args(command: Sequence[str], *, hook: bool = True) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the command with what the engine log needs added, the flags added): ``--enable-logging-
    iteration-details`` unless given; for a hook-free run (``hook`` False) also
    ``--distributed-executor-backend mp`` at TP 1 unless an executor was chosen (under ``uni`` a
    CPU forward ends before the timed block: module docstring). Both are server flags, so they go
    at the end of the command."""
    cmd = list(command)
    added: list[str] = []
    flag_given = any(a == ITERATION_FLAG or a.startswith(ITERATION_FLAG + "=") or a == "--no-enable-logging-iteration-details"
                     for a in cmd)
    if not flag_given:
        added.append(ITERATION_FLAG)
    _, _, tp = spec_of(cmd)
    if not hook and tp == 1 and not any(a == EXECUTOR_FLAG or a.startswith(EXECUTOR_FLAG + "=") for a in cmd):
        added += [EXECUTOR_FLAG, "mp"]
    return tuple(cmd + added), tuple(added)


def write_run(out_dir: Path, command: Sequence[str], *, hook: bool, added: Sequence[str]) -> None:
    from specmodel.io import atomic_write_text
    from specmodel.schema.formats import VLLM_ENGINE_RUN

    doc = VLLM_ENGINE_RUN.stamp({"command": list(command), "hook": hook, "added": list(added), "log": SERVER_LOG})
    atomic_write_text(out_dir / RUN_FILE, json.dumps(doc, indent=1) + "\n")


@dataclass(frozen=True, kw_only=True)
class EngineRun:
    """One directory's engine-log recording: what ran, and its steps."""

    dir: str
    hook: bool
    method: str | None
    k: int | None
    tp: int
    iterations: tuple[Iteration, ...]
    command: tuple[str, ...] = ()

    @property
    def forward_outside(self) -> bool:
        """A CPU server under the ``uni`` executor: the forward ended before vLLM's timer started."""
        return executor_of(self.command) == "uni" and any(i.device.upper() == "CPU" for i in self.iterations)


def read_run(d: str | os.PathLike[str]) -> EngineRun | None:
    """The directory's ``engine_run.json`` and ``server.log`` (None when the run kept no log: an
    older ``specmodel vllm``). A run file without its log, or a log without a line, is one error."""
    from specmodel.io import read_bytes
    from specmodel.schema.formats import VLLM_ENGINE_RUN

    run_path, log_path = Path(d) / RUN_FILE, Path(d) / SERVER_LOG
    if not run_path.exists():
        return None
    where = str(run_path)
    try:
        doc = json.loads(read_bytes(run_path, "a specmodel vllm run file", max_bytes=1 << 20, decompress=False))
    except ValueError as exc:
        raise SpecmodelError(f"{where}: not JSON ({exc})") from None
    VLLM_ENGINE_RUN.check(doc, where)
    cmd = doc.get("command")
    if not isinstance(cmd, list) or not all(isinstance(a, str) for a in cmd) or not isinstance(doc.get("hook"), bool):
        raise SpecmodelError(f"{where}: command: expected a list of strings and hook a boolean")
    if not log_path.exists():
        raise SpecmodelError(f"{log_path}: missing (the server's output {RUN_FILE} names)")
    method, k, tp = spec_of(cmd)
    return EngineRun(dir=str(d), hook=bool(doc["hook"]), method=method, k=k, tp=tp,
                     iterations=tuple(read_server_log(log_path)), command=tuple(cmd))


_VERSION = re.compile(r"Initializing a V1 LLM engine \(v(?P<v>[^)\s]+)\)")


def engine_version(run: EngineRun) -> str:
    """The vLLM version the server printed at start (``v1/engine/core.py:134``), "" when absent."""
    try:
        with open(Path(run.dir) / SERVER_LOG, encoding="utf-8", errors="replace") as fh:
            for _, line in zip(range(5000), fh, strict=False):
                m = _VERSION.search(line)
                if m:
                    return m["v"]
    except OSError:
        pass
    return ""


def model_of(command: Sequence[str]) -> str | None:
    return server_flag(command, "--model")
