"""Load and counters for a live vLLM server (the server itself: tests/vllm_engine.py, one at a
time on 127.0.0.1, stopped by its process group): bounded concurrent completions of one prompt
length, and the spec-decode counters of ``/metrics``."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.vllm_engine import PROMPT, EngineError, VllmServer

#: (about 12 tokens each with the tiny models' BPE) repeated to the asked-for prompt length:
#: repetitive text, so ngram drafting has n-grams to find, as in the fixture
_SENTENCE = PROMPT.split(".")[0].strip() + ". "


def prompt_text(prompt_words: int) -> str:
    words = (_SENTENCE * (prompt_words // len(_SENTENCE.split()) + 1)).split()[:prompt_words]
    return " ".join(words)


def start(python: Path, model: Path, *, spec: dict[str, Any] | None, max_num_seqs: int, max_model_len: int,
          tp: int = 1) -> tuple[VllmServer | None, str]:
    """(the started server, "") or (None, the engine's refusal: the last error line of its log)."""
    srv = VllmServer(python=python, model=model, tp=tp, spec=spec,
                     extra=["--max-num-seqs", str(max_num_seqs), "--max-model-len", str(max_model_len)])
    try:
        srv.start()
    except EngineError as e:
        text = str(e).splitlines()
        # pydantic puts the reason on the line after "ValidationError": "Value error, <why> [type=...]"
        why = [ln.strip() for ln in text if "Value error" in ln] or [ln.strip() for ln in text if "Error" in ln]
        return None, (why[-1] if why else text[-1].strip())[-400:]
    return srv, ""


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def run_load(url: str, *, concurrency: int, requests: int, prompt_words: int, max_tokens: int,
             timeout_s: float = 300.0) -> float:
    """``requests`` greedy completions of exactly ``max_tokens`` tokens (``ignore_eos``),
    ``concurrency`` in flight; total generated tok/s over the wall time."""
    lock = threading.Lock()
    todo = list(range(requests))
    tokens = [0]
    errors: list[str] = []
    prompt = prompt_text(prompt_words)

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                    "ignore_eos": True}
            try:
                r = _post(url + "/v1/completions", body, timeout_s)
                with lock:
                    tokens[0] += int(r["usage"]["completion_tokens"])
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
    return tokens[0] / wall



def complete_together(url: str, *, n: int, prompt_words: int, max_tokens: int, timeout_s: float = 600.0) -> None:
    """``n`` greedy completions of exactly ``max_tokens`` tokens in ONE request (a list of prompts):
    the engine receives them at once and runs them side by side to the same end. ``n`` concurrent
    HTTP requests leave the batch size to how a loaded box schedules the clients and the API server
    (seen: served one after another at batch 1)."""
    body = {"model": "tiny", "prompt": [prompt_text(prompt_words)] * n, "max_tokens": max_tokens,
            "temperature": 0.0, "ignore_eos": True}
    out = _post(url + "/v1/completions", body, timeout_s)
    if len(out.get("choices", ())) != n:
        raise RuntimeError(f"asked for {n} completions in one request, got {len(out.get('choices', ()))}")


COUNTERS = {"vllm:spec_decode_num_drafts_total": "drafts", "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
            "vllm:spec_decode_num_accepted_tokens_total": "accepted", "vllm:generation_tokens_total": "generated"}


def metrics_counters(url: str) -> dict[str, float]:
    """vLLM's cumulative spec-decode and generation counters (0 where the engine has none)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = dict.fromkeys(COUNTERS.values(), 0.0)
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in COUNTERS:
            out[COUNTERS[name]] += float(line.rsplit(" ", 1)[1])
    return out
