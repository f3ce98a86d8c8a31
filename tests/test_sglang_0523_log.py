"""SGLang 0.5.23's HiSparse decode line (``#gpu token:`` / ``#cpu token:`` instead of ``#token:``),
built from the format strings in the real 0.5.23 source (parsed, not imported)."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from specmodel.engines.sglang import log as sglog
from tests.sglang_source import function, sglang_module

OBSERVER = "srt/managers/scheduler_components/pool_stats_observer.py"


def _render(js: ast.JoinedStr, values: dict[str, Any]) -> str:
    """An f-string of the source with ``self.<name>`` replaced by ``values[name]`` (format spec kept)."""
    out = []
    for part in js.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
            continue
        assert isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Attribute)
        spec = ast.unparse(part.format_spec)[2:-1] if part.format_spec is not None else ""
        out.append(format(values[part.value.attr], spec))
    return "".join(out)


def _hisparse_parts(values: dict[str, Any]) -> list[str]:
    """The ``if self.is_hisparse:`` branch of ``get_decode_usage_msg_parts``, rendered."""
    fn = function(sglang_module("0.5.23", OBSERVER), "get_decode_usage_msg_parts")
    branch = next(n for n in ast.walk(fn) if isinstance(n, ast.If) and ast.unparse(n.test) == "self.is_hisparse")
    strs = [e for n in ast.walk(branch) if isinstance(n, ast.List) for e in n.elts if isinstance(e, ast.JoinedStr)]
    assert len(strs) == 4, ast.unparse(branch)
    return [_render(js, values) for js in strs]


def _line(parts: list[str], running: int) -> str:
    # metrics_reporter.py: f"Decode batch{iter_msg}, #running-req: {n}, {token_usage_msg}" with
    # token_usage_msg = ", ".join(parts) + ", ", then the accept and graph fields (0.5.23: no trailing ", ")
    return (f"[2026-11-30 04:32:10 TP0] Decode batch, #running-req: {running}, " + ", ".join(parts) +
            ", accept len: 2.90, accept rate: 0.63, cuda graph: True, gen throughput (token/s): 245.31, #queue-req: 0")


def test_hisparse_line_gives_the_kv_tokens_per_request_from_the_host_pool() -> None:
    vals = {"hisparse_device_tokens": 4096, "hisparse_device_token_usage": 0.5,
            "hisparse_host_tokens": 36_000, "hisparse_host_token_usage": 0.28}
    parts = _hisparse_parts(vals)
    assert parts[0] == "#gpu token: 4096"  # the real format: no "#token:" on a HiSparse server
    line = _line(parts, running=4)
    d = sglog.parse_line(line)
    assert d is not None and "tokens" not in d and d["gpu_tokens"] == "4096"
    lf = sglog.parse("s.log", [line], False)
    (w,) = lf.windows
    # every request's whole KV sits in the host pool: 36000 tokens over 4 requests
    assert w.context_tokens == pytest.approx(9000.0)
    assert w.accept_len == pytest.approx(2.90) and w.batch == 4


def test_hisparse_line_without_the_host_figure_falls_back_to_the_device_tokens() -> None:
    line = _line(["#gpu token: 4000", "gpu token usage: 0.50"], running=2)
    (w,) = sglog.parse("s.log", [line], False).windows
    assert w.context_tokens == pytest.approx(2000.0)
