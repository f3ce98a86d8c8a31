"""The benchmark client's pairing (tests/vllm_engine.measure_pair) against stand-in servers: rounds
alternate A B B A ..., so a slow stretch of the box lands on both servers, and each server's
counters are read over its own rounds only."""

from __future__ import annotations

import itertools
from typing import Any

from tests import vllm_engine as ve


class _Fake:
    """complete() logs the call order; /metrics counts drafts as a spec server would."""

    def __init__(self, name: str, log: list[str], *, spec: bool) -> None:
        self.name, self.log, self.spec = name, log, spec
        self.n = 0

    def complete(self, prompt: str = "", *, max_tokens: int = 32, timeout_s: float = 1.0) -> dict[str, Any]:
        self.log.append(self.name)
        self.n += 1
        return {"usage": {"completion_tokens": max_tokens}}

    def get(self, path: str, timeout_s: float = 1.0) -> str:
        assert path == "/metrics"
        if not self.spec:
            return ""
        # 2 accepted tokens per draft, one draft per 3 generated tokens
        return (f"vllm:spec_decode_num_drafts_total {self.n * 10}\n"
                f"vllm:spec_decode_num_accepted_tokens_total {self.n * 20}\n"
                f"vllm:generation_tokens_total {self.n * 30}\n")


def test_rounds_alternate_and_counters_are_per_server(monkeypatch: Any) -> None:
    monkeypatch.setattr(ve.time, "sleep", lambda s: None)
    log: list[str] = []
    a, b = _Fake("A", log, spec=False), _Fake("B", log, spec=True)
    ta, tb = ve.measure_pair(a, b, batch=1, tokens=16, reps=4, pause_s=0.0)  # type: ignore[arg-type]
    rounds = [k for k, _ in itertools.groupby(log)]
    # warm-up A, B; then A B | B A | A B | B A
    assert log == ["A", "B", "A", "B", "B", "A", "A", "B", "B", "A"]
    assert rounds[:2] == ["A", "B"]
    assert len(ta.tokens_per_s) == len(tb.tokens_per_s) == 4
    assert ta.accept_tokens is None  # no drafts on the baseline
    # E[A] = 1 + accepted/drafts = 3; r = drafts / (generated - accepted) = 10 / (30 - 20) = 1
    assert tb.accept_tokens == 3.0 and tb.proposal_rate == 1.0
