"""Accept length and observed throughput from inference-server logs.

Formats, read from the engines' own format strings (parse by key, never by position):

* **SGLang** decode-batch line (``scheduler_metrics_mixin.py`` in 0.5.5,
  ``scheduler_components/metrics_reporter.py`` in 0.5.23), logged every
  ``--decode-log-interval`` (default 40) decode batches::

    [2025-11-30 04:32:10 TP0] Decode batch, #running-req: 1, #token: 1187, token usage: 0.01,
    accept len: 3.12, accept rate: 0.78, cuda graph: True, gen throughput (token/s): 245.31, #queue-req: 0,

  0.5.5 ends with ``, ``; 0.5.23 does not and may add ``cap len:`` / ``block accept len:``; hybrid
  models log ``#full token:`` instead of ``#token:``. ``accept len`` = tokens per request per verify
  step including the bonus token, averaged over the window (accepted tokens / Σ batch sizes).
  ``gen throughput`` = all tokens generated in the window / window wall time.
* **vLLM V1** ``vllm/v1/spec_decode/metrics.py`` (0.33.0)::

    SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,
    Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens,
    Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%

  earlier: ``Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f, Accepted: %d tokens,
  Drafted: %d tokens, Per-position acceptance rate: %s`` and, oldest,
  ``Draft acceptance rate: %.1f%%, Accepted: %d tokens, Drafted: %d tokens``. The same
  ``log()`` call first prints ``Avg prompt throughput: … Avg generation throughput: %.1f tokens/s,
  Running: %d reqs, …`` (``vllm/v1/metrics/loggers.py``), which gives the tok/s series.
* **SGLang** ``scripts/playground/bench_speculative.py`` JSONL rows
  ``{"batch_size","steps","topk","num_draft_tokens","acc_length","step_time","speed","completion_tokens"}``
  (``speed`` = acc_length / step_time, tok/s *per request*).
* ``specmodel accept -o`` output (schema ``specmodel.accept``), so a saved distribution can be fed
  back through ``--accept-log``.

How a distribution is built (documented in docs/logs.md):

* SGLang gives only a window mean. The distribution is a mixture of ``from_mean(window mean, K)``
  (geometric shape: constant per-draft acceptance), each window weighted by its ``#running-req``
  (the window's verify steps are ≈ #running-req × decode-log-interval). ``samples`` =
  Σ #running-req × decode-log-interval, the verify steps the means were averaged over.
* vLLM: per-position rates averaged over windows weighted by their number of drafts
  (drafted tokens / number of positions) → ``from_per_position``; ``samples`` = number of drafts.
* bench_speculative: rows for the requested steps, equal weight per row → mixture of ``from_mean``.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.io import atomic_write_json, loads_json, read_text_lines
from specmodel.limits import MAX_BATCH, MAX_DRAFT_TOKENS, MAX_STEPS, MAX_TOPK, ROUND_SLACK
from specmodel.model import accept as acc
from specmodel.schema.formats import ACCEPT

ACCEPT_SCHEMA = ACCEPT.name
ACCEPT_SCHEMA_VERSION = ACCEPT.version
#: SGLang ``--decode-log-interval`` default (server_args.py, 0.5.5 and 0.5.23).
DEFAULT_DECODE_LOG_INTERVAL = 40
#: printed values carry 2 decimals: a window mean may exceed steps+1 by rounding only

# ---------------------------------------------------------------------------------------------
# regexes, one per key

# one way to match any digit string (``\d+\.?\d*`` splits n digits n ways: backtracking on a
# failed suffix such as " tokens/s" was quadratic in the number's length)
_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)"
_SG_MARK = re.compile(r"Decode batch(?: \[\d+\])?, ")
_SG_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)(?: ([^\]]*))?\] ")
_SG_KEYS: dict[str, re.Pattern[str]] = {
    "running_req": re.compile(r"#running-req: (\d+)"),
    # "block accept len:" must not match: the key is preceded by ", " or the start of the message
    "accept_len": re.compile(r"(?:^|, )accept len: " + _NUM),
    "accept_rate": re.compile(r"(?:^|, )accept rate: " + _NUM),
    "cap_len": re.compile(r"cap len: " + _NUM),
    "block_accept_len": re.compile(r"block accept len: " + _NUM),
    "gen_tokens_per_s": re.compile(r"gen throughput \(token/s\): " + _NUM),
    "queue_req": re.compile(r"#queue-req: (\d+)"),
    "tokens": re.compile(r"(?:^|, )#(?:full )?token: (\d+)"),
    "graph": re.compile(r"(?:cuda|cpu|npu|musa) graph: (True|False)"),
}
_VL_MARK = re.compile(r"SpecDecoding metrics: ")
_VL_PREFIX = re.compile(r"^(?:\((\w+) pid=(\d+)\) )?(?:[A-Z]+ )?(\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[([^\]]+)\] ")
_VL_KEYS: dict[str, re.Pattern[str]] = {
    "mean_accept_len": re.compile(r"Mean acceptance length: " + _NUM),
    "accepted_tokens_per_s": re.compile(r"Accepted throughput: " + _NUM + r" tokens/s"),
    "drafted_tokens_per_s": re.compile(r"Drafted throughput: " + _NUM + r" tokens/s"),
    "accepted": re.compile(r"(?:, |: )Accepted: (\d+) tokens"),
    "drafted": re.compile(r"(?:, |: )Drafted: (\d+) tokens"),
    "per_position": re.compile(r"Per-position acceptance rate: ((?:nan|[\d.]+)(?:, (?:nan|[\d.]+))*)"),
    "draft_accept_rate_pct": re.compile(r"Draft acceptance rate: " + _NUM + "%"),
}
_VL_TPUT = re.compile(r"Avg generation throughput: " + _NUM + r" tokens/s")
_VL_RUNNING = re.compile(r"Running: (\d+) reqs")
_VL_KV_USAGE = re.compile(r"GPU KV cache usage: " + _NUM + "%")
_VL_KV_SIZE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BENCH_KEYS = ("batch_size", "steps", "topk", "num_draft_tokens", "acc_length", "step_time", "speed")


# ---------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True, kw_only=True)
class DecodeWindow:
    """One logged window: SGLang decode line, vLLM stats pair, or a bench_speculative row.

    ``accept_len`` is tokens per request per verify step incl. the bonus token (None when the
    server ran without speculation). ``tokens_per_s`` is the total generated tok/s of the window.
    ``steps``/``topk``/``num_draft_tokens`` are known only for bench rows (0 = baseline run).
    """

    file: str
    line: int
    engine: str
    batch: int
    accept_len: float | None
    tokens_per_s: float
    timestamp: str = ""
    rank: str = ""
    steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    completion_tokens: float | None = None  # bench rows: mean output tokens per request
    #: mean KV tokens per running request in the window (None when the log does not say):
    #: SGLang ``#token`` (or ``#full token``) / ``#running-req`` — ``#token`` is the KV pool in use
    #: by running requests (max_total − available − evictable, scheduler._get_token_info), so a
    #: prefix shared by several requests counts once; vLLM ``GPU KV cache usage`` × the startup
    #: ``GPU KV cache size: N tokens`` / ``Running`` when the log has that startup line.
    context_tokens: float | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "engine": self.engine, "batch": self.batch,
                "accept_len": self.accept_len, "tokens_per_s": self.tokens_per_s, "timestamp": self.timestamp,
                "rank": self.rank, "steps": self.steps, "topk": self.topk, "num_draft_tokens": self.num_draft_tokens,
                "context_tokens": self.context_tokens}


@dataclass(frozen=True, kw_only=True)
class VllmSpecRecord:
    """One vLLM ``SpecDecoding metrics`` line, all keys optional except the counts."""

    file: str
    line: int
    fmt: str  # "new" (0.10+), "mid", "old"
    accepted: int
    drafted: int
    mean_accept_len: float | None = None
    per_position: tuple[float, ...] | None = None
    draft_accept_rate_pct: float | None = None

    def num_drafts(self, num_spec_tokens: int | None) -> float | None:
        """Verify steps (drafts) in the window: drafted tokens / positions per draft.

        vLLM's EAGLE/MTP proposers draft all ``num_speculative_tokens`` positions every step, so
        drafted / k is exact there; else fall back to accepted / (mean − 1).
        """
        k = len(self.per_position) if self.per_position else num_spec_tokens
        if k:
            return self.drafted / k
        if self.mean_accept_len is not None and self.mean_accept_len > 1.0:
            return self.accepted / (self.mean_accept_len - 1.0)
        return None


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """The server's own configuration as it logged it at start-up (None = not in the log).

    SGLang: ``server_args=ServerArgs(model_path='…', tp_size=8, …, speculative_num_steps=3, …)``
    (``logger.info(f"{server_args=}")`` in ``entrypoints/engine.py``, 0.5.5) or the dict form
    ``server_args={'model_path': '…', 'speculative_num_steps': 3, …}`` (0.5.23).
    vLLM: the engine start line ``… with config: model='…', speculative_config=SpeculativeConfig(
    method='eagle3', model='…', num_spec_tokens=3), …, tensor_parallel_size=4, …``
    (``VllmConfig.__str__`` + ``SpeculativeConfig.__repr__``) and the user's
    ``non-default args: {'model': …, 'tensor_parallel_size': 4, 'speculative_config': {…
    'num_speculative_tokens': 3}}`` (``log_non_default_args``). vLLM drafts a chain: topk 1.
    """

    engine: str
    where: str
    model: str | None = None
    tp: int | None = None
    algorithm: str | None = None
    draft_model: str | None = None
    steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    decode_log_interval: int | None = None

    def merged(self, other: EngineConfig) -> EngineConfig:
        """Fill this config's unknowns from ``other`` (a later line of the same log)."""
        vals = {f: getattr(self, f) if getattr(self, f) is not None else getattr(other, f)
                for f in ("model", "tp", "algorithm", "draft_model", "steps", "topk", "num_draft_tokens",
                          "decode_log_interval")}
        return EngineConfig(engine=self.engine, where=self.where, **vals)

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in (("model", self.model), ("TP", self.tp), ("steps", self.steps),
                                          ("topk", self.topk), ("draft tokens", self.num_draft_tokens))
                 if v is not None]
        return f"{', '.join(parts)} ({self.where})"


_VAL = r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[-+\w.]+)"
_SG_ARGS = re.compile(r"server_args=(ServerArgs\(|\{)")
_VL_SPEC_REPR = re.compile(r"speculative_config=SpeculativeConfig\(([^)]*)\)")
_VL_NONDEFAULT = re.compile(r"non-default args: (\{.*\})")
_VL_SPEC_DICT = re.compile(r"'speculative_config': (\{[^{}]*\})")


def _cfg_value(text: str, key: str, dict_form: bool) -> str | None:
    """The raw value of ``key`` in a dataclass repr (``key=v``) or dict repr (``'key': v``)."""
    rx = (r"'" + re.escape(key) + r"': " if dict_form else r"(?:^|[(,{ ])" + re.escape(key) + "=") + _VAL
    m = re.search(rx, text)
    if m is None:
        return None
    v = m.group(1)
    if v in ("None", "null"):
        return None
    return v[1:-1] if v[:1] in "'\"" else v


def _cfg_int(text: str, key: str, dict_form: bool, where: str) -> int | None:
    v = _cfg_value(text, key, dict_form)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        raise SpecmodelError(f"{where}: {key}: expected an integer, got {v!r}") from None


def parse_engine_config(line: str, where: str) -> EngineConfig | None:
    """The engine configuration logged on ``line``, or None when the line carries none."""
    m = _SG_ARGS.search(line)
    if m is not None:
        body = line[m.end():]
        d = m.group(1) == "{"
        return EngineConfig(engine="sglang", where=where, model=_cfg_value(body, "model_path", d),
                            tp=_cfg_int(body, "tp_size", d, where),
                            algorithm=_cfg_value(body, "speculative_algorithm", d),
                            draft_model=_cfg_value(body, "speculative_draft_model_path", d),
                            steps=_cfg_int(body, "speculative_num_steps", d, where),
                            topk=_cfg_int(body, "speculative_eagle_topk", d, where),
                            num_draft_tokens=_cfg_int(body, "speculative_num_draft_tokens", d, where),
                            decode_log_interval=_cfg_int(body, "decode_log_interval", d, where))
    m = _VL_SPEC_REPR.search(line)
    if m is not None:
        spec = m.group(1)
        rest = line[: m.start()] + line[m.end():]
        k = _cfg_int(spec, "num_spec_tokens", False, where)
        return EngineConfig(engine="vllm", where=where, model=_cfg_value(rest, "model", False),
                            tp=_cfg_int(rest, "tensor_parallel_size", False, where),
                            algorithm=_cfg_value(spec, "method", False), draft_model=_cfg_value(spec, "model", False),
                            steps=k, topk=1 if k else None, num_draft_tokens=k + 1 if k else None)
    m = _VL_NONDEFAULT.search(line)
    if m is not None:
        body = m.group(1)
        sm = _VL_SPEC_DICT.search(body)
        spec = sm.group(1) if sm else ""
        rest = body.replace(spec, "") if spec else body
        k = _cfg_int(spec, "num_speculative_tokens", True, where) if spec else None
        return EngineConfig(engine="vllm", where=where, model=_cfg_value(rest, "model", True),
                            tp=_cfg_int(rest, "tensor_parallel_size", True, where),
                            algorithm=_cfg_value(spec, "method", True) if spec else None,
                            draft_model=_cfg_value(spec, "model", True) if spec else None,
                            steps=k, topk=1 if k else None, num_draft_tokens=k + 1 if k else None)
    return None


@dataclass(frozen=True, kw_only=True)
class LogFile:
    """Everything matched in one file."""

    path: str
    engine: str  # sglang | vllm | bench_speculative | specmodel.accept
    fmt: str
    lines_read: int
    lines_matched: int
    windows: tuple[DecodeWindow, ...] = ()
    vllm: tuple[VllmSpecRecord, ...] = ()
    skipped: dict[str, int] = field(default_factory=dict)
    saved: dict[str, Any] | None = None  # a specmodel.accept document
    config: EngineConfig | None = None  # the server's logged start-up configuration

    @property
    def description(self) -> str:
        return {"sglang": "SGLang decode log", "vllm": "vLLM V1 log", "bench_speculative": "SGLang bench_speculative JSONL",
                "specmodel.accept": "specmodel accept JSON"}[self.engine] + (f" ({self.fmt})" if self.fmt else "")


# ---------------------------------------------------------------------------------------------
# parsing


def _read_lines(path: str) -> list[str]:
    # vLLM colours its prefix when stdout is a terminal (logging_utils/formatter.py)
    return [_ANSI.sub("", line) for line in read_text_lines(path, "a text log")]


def _count(text: str, where: str, key: str) -> int:
    """A count printed by the server; a number no server prints (beyond int64) is an error, not a hang."""
    if len(text) > 18:
        raise SpecmodelError(f"{where}: {key}: {len(text)}-digit number is not a plausible count")
    return int(text)


def _num(text: str, where: str, key: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise SpecmodelError(f"{where}: {key}: not a number: {text!r}") from None
    return v


def parse_sglang_line(line: str) -> dict[str, Any] | None:
    """Key → value for one SGLang decode-batch line, or None if the line is not one.

    Raises ValueError (message = the missing key) when the line is a decode line but lacks
    ``#running-req`` or ``gen throughput`` (a truncated or foreign line).
    """
    m = _SG_MARK.search(line)
    if m is None:
        return None
    out: dict[str, Any] = {}
    pm = _SG_PREFIX.search(line[: m.start()] if m.start() else line)
    if pm:
        out["timestamp"] = pm.group(1)
        out["rank"] = (pm.group(2) or "").strip()
    body = line[m.start():]
    for key, rx in _SG_KEYS.items():
        km = rx.search(body)
        if km:
            out[key] = km.group(1)
    for req in ("running_req", "gen_tokens_per_s"):
        if req not in out:
            raise ValueError({"running_req": "#running-req", "gen_tokens_per_s": "gen throughput (token/s)"}[req])
    out["trailing_comma"] = body.rstrip("\n").endswith(", ")
    return out


def parse_vllm_line(line: str) -> dict[str, Any] | None:
    """Key → value for one vLLM ``SpecDecoding metrics`` line, or None."""
    m = _VL_MARK.search(line)
    if m is None:
        return None
    out: dict[str, Any] = {}
    pm = _VL_PREFIX.search(line[: m.start()])
    if pm:
        out["process"] = pm.group(1) or ""
        out["pid"] = pm.group(2) or ""
        out["timestamp"] = pm.group(3)
    body = line[m.start():]
    for key, rx in _VL_KEYS.items():
        km = rx.search(body)
        if km:
            out[key] = km.group(1)
    for req, name in (("accepted", "Accepted: N tokens"), ("drafted", "Drafted: N tokens")):
        if req not in out:
            raise ValueError(name)
    return out


def _parse_text_log(path: str, lines: list[str]) -> LogFile:
    windows: list[DecodeWindow] = []
    vrecs: list[VllmSpecRecord] = []
    skipped: dict[str, int] = {}
    matched = 0
    trailing = {True: 0, False: 0}
    has_cap = False
    vfmt: set[str] = set()
    pending_tput: tuple[int, float, int, str, float | None] | None = None  # (line, tok/s, running, ts, ctx)
    kv_size_tokens: int | None = None  # vLLM startup line, for per-window context
    sg = vl = 0

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    config: EngineConfig | None = None
    for i, line in enumerate(lines, start=1):
        # cheap substring test first: most lines of a server log are neither
        if "Decode batch" not in line and "SpecDecoding" not in line and "generation throughput" not in line:
            if "KV cache size" in line and (km := _VL_KV_SIZE.search(line)) is not None:
                kv_size_tokens = _count(km.group(1).replace(",", ""), f"{path}:{i}", "GPU KV cache size")
            if "server_args=" in line or "speculative_config=" in line or "non-default args" in line:
                c = parse_engine_config(line, f"{path}:{i}")
                if c is not None:
                    config = c if config is None else config.merged(c)
            continue
        where = f"{path}:{i}"
        try:
            d = parse_sglang_line(line)
        except ValueError as exc:
            raise SpecmodelError(f"{where}: SGLang decode line without '{exc}' (truncated or unknown format)") from None
        if d is not None:
            matched += 1
            sg += 1
            trailing[bool(d["trailing_comma"])] += 1
            has_cap = has_cap or "cap_len" in d or "block_accept_len" in d
            batch = _count(d["running_req"], where, "#running-req")
            tput = _num(d["gen_tokens_per_s"], where, "gen throughput")
            a = _num(d["accept_len"], where, "accept len") if "accept_len" in d else None
            if not math.isfinite(tput) or tput < 0:
                raise SpecmodelError(f"{where}: gen throughput must be a finite number >= 0, got {d['gen_tokens_per_s']}")
            if a is not None and (not math.isfinite(a) or a < 1.0 - ROUND_SLACK):
                raise SpecmodelError(f"{where}: accept len {d['accept_len']} is not >= 1 token/step "
                                     "(SGLang counts the bonus token, so the minimum is 1)")
            ctx = _count(d["tokens"], where, "#token") / batch if "tokens" in d and batch > 0 else None
            windows.append(DecodeWindow(file=path, line=i, engine="sglang", batch=batch, accept_len=a,
                                        tokens_per_s=tput, timestamp=d.get("timestamp", ""), rank=d.get("rank", ""),
                                        context_tokens=ctx))
            continue
        tm = _VL_TPUT.search(line)
        if tm is not None:
            rm = _VL_RUNNING.search(line)
            if rm is None:
                raise SpecmodelError(f"{where}: vLLM throughput line without 'Running: N reqs'")
            pm = _VL_PREFIX.search(line)
            matched += 1
            running = _count(rm.group(1), where, "Running")
            um = _VL_KV_USAGE.search(line)
            vctx = None
            if um is not None and kv_size_tokens is not None and running > 0:
                usage = _num(um.group(1), where, "GPU KV cache usage")
                if math.isfinite(usage) and 0.0 <= usage <= 100.0:
                    vctx = usage / 100.0 * kv_size_tokens / running
            pending_tput = (i, _num(tm.group(1), where, "Avg generation throughput"), running,
                            pm.group(3) if pm else "", vctx)
            continue
        try:
            v = parse_vllm_line(line)
        except ValueError as exc:
            raise SpecmodelError(f"{where}: vLLM 'SpecDecoding metrics' line without '{exc}' "
                                 "(truncated or unknown format)") from None
        if v is None:
            continue
        matched += 1
        vl += 1
        fmt = "new" if "accepted_tokens_per_s" in v else ("mid" if "mean_accept_len" in v else "old")
        vfmt.add(fmt)
        rates: tuple[float, ...] | None = None
        if "per_position" in v:
            parts = v["per_position"].split(",")
            if len(parts) > MAX_STEPS:
                raise SpecmodelError(f"{where}: {len(parts)} per-position rates, more than {MAX_STEPS} draft positions")
            rates = tuple(_num(x.strip(), where, "Per-position acceptance rate") for x in parts)
        mean = _num(v["mean_accept_len"], where, "Mean acceptance length") if "mean_accept_len" in v else None
        rate = _num(v["draft_accept_rate_pct"], where, "Draft acceptance rate") if "draft_accept_rate_pct" in v else None
        rec = VllmSpecRecord(file=path, line=i, fmt=fmt, accepted=_count(v["accepted"], where, "Accepted"),
                             drafted=_count(v["drafted"], where, "Drafted"),
                             mean_accept_len=mean if mean is not None and math.isfinite(mean) else None,
                             per_position=rates if rates and all(math.isfinite(r) for r in rates) else None,
                             draft_accept_rate_pct=rate if rate is not None and math.isfinite(rate) else None)
        if rec.drafted == 0:
            skip("no drafts in window")
            pending_tput = None
            continue
        if rec.accepted > rec.drafted:
            raise SpecmodelError(f"{where}: Accepted ({rec.accepted}) exceeds Drafted ({rec.drafted}) tokens")
        vrecs.append(rec)
        if pending_tput is not None:
            # the same StatLogger.log() call printed the throughput line just before this one
            ln, tps, running, ts, vctx = pending_tput
            windows.append(DecodeWindow(file=path, line=ln, engine="vllm", batch=running, accept_len=mean,
                                        tokens_per_s=tps, timestamp=ts, context_tokens=vctx))
            pending_tput = None
    if sg and vl:
        raise SpecmodelError(f"{path}: has both SGLang and vLLM lines; give one server's log per file")
    if sg:
        fmt = ("0.5.5-style, trailing ', '" if trailing[True] >= trailing[False] else "0.5.23-style") + \
              (", cap/block accept len" if has_cap else "")
        return LogFile(path=path, engine="sglang", fmt=fmt, lines_read=len(lines), lines_matched=matched,
                       windows=tuple(windows), skipped=skipped, config=config)
    if vl:
        return LogFile(path=path, engine="vllm", fmt="/".join(sorted(vfmt)) + " format", lines_read=len(lines),
                       lines_matched=matched, windows=tuple(windows), vllm=tuple(vrecs), skipped=skipped,
                       config=config)
    raise SpecmodelError(
        f"{path}: no SGLang 'Decode batch' lines, vLLM 'SpecDecoding metrics' lines or bench_speculative JSONL rows "
        f"found in {len(lines)} lines (is this the server's log, with speculative decoding enabled?)"
    )


def _opt_num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    return float(v)


def _parse_bench(path: str, lines: list[str]) -> LogFile:
    windows: list[DecodeWindow] = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            row = loads_json(line, where)
        except SpecmodelError:
            raise SpecmodelError(f"{where}: not a JSON object (bench_speculative JSONL has one per line)") from None
        if not isinstance(row, dict):
            raise SpecmodelError(f"{where}: expected a JSON object")
        missing = [k for k in _BENCH_KEYS if k not in row]
        if missing:
            raise SpecmodelError(f"{where}: bench_speculative row lacks {', '.join(missing)}")
        vals: dict[str, float] = {}
        for k in _BENCH_KEYS:
            v = row[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SpecmodelError(f"{where}: {k}: expected a finite number >= 0, got {v!r}")
            vals[k] = float(v)
        for k in ("batch_size", "steps", "topk", "num_draft_tokens"):
            if not vals[k].is_integer():
                raise SpecmodelError(f"{where}: {k}: expected an integer, got {row[k]!r}")
        if vals["batch_size"] < 1:
            raise SpecmodelError(f"{where}: batch_size must be >= 1")
        for k, hi in (("batch_size", MAX_BATCH), ("steps", MAX_STEPS), ("topk", MAX_TOPK),
                      ("num_draft_tokens", MAX_DRAFT_TOKENS)):
            if vals[k] > hi:
                raise SpecmodelError(f"{where}: {k} must be <= {hi}, got {row[k]!r}")
        if vals["acc_length"] < 1.0 - ROUND_SLACK:
            raise SpecmodelError(f"{where}: acc_length {row['acc_length']} is not >= 1 token/step")
        b = int(vals["batch_size"])
        # speed = acc_length / step_time is per request; the window's total is × batch
        windows.append(DecodeWindow(file=path, line=i, engine="bench_speculative", batch=b,
                                    accept_len=vals["acc_length"], tokens_per_s=vals["speed"] * b,
                                    steps=int(vals["steps"]), topk=int(vals["topk"]),
                                    num_draft_tokens=int(vals["num_draft_tokens"]),
                                    completion_tokens=_opt_num(row.get("completion_tokens"))))
    if not windows:
        raise SpecmodelError(f"{path}: no bench_speculative rows")
    return LogFile(path=path, engine="bench_speculative", fmt="", lines_read=len(lines), lines_matched=len(windows),
                   windows=tuple(windows))


def parse_log(path: str | Path) -> LogFile:
    """Parse one file of any supported kind; every problem is one :class:`SpecmodelError`."""
    spath = str(path)
    lines = _read_lines(spath)
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if not first:
        raise SpecmodelError(f"{spath}: empty file (no log lines)")
    if first.startswith("{"):
        text = "\n".join(lines)
        try:
            doc = loads_json(text, spath)
        except SpecmodelError:
            doc = None
        if ACCEPT.matches(doc):
            assert isinstance(doc, dict)
            _check_saved(doc, spath)
            return LogFile(path=spath, engine="specmodel.accept", fmt=f"v{doc['schema_version']}", lines_read=len(lines),
                           lines_matched=1, saved=doc)
        if isinstance(doc, dict) and "schema" in doc:
            ACCEPT.check(doc, spath)  # another specmodel document: one line saying which
        return _parse_bench(spath, lines)
    return _parse_text_log(spath, lines)


# ---------------------------------------------------------------------------------------------
# distributions


@dataclass(frozen=True, kw_only=True)
class AcceptSummary:
    """What ``specmodel accept`` shows: the distribution and where it came from."""

    dist: acc.AcceptDist
    rates: tuple[float, ...] | None
    files: tuple[LogFile, ...]
    windows_used: int
    windows: tuple[DecodeWindow, ...] = ()  # the windows behind the distribution (tok/s series)
    notes: tuple[str, ...] = ()
    config: EngineConfig | None = None  # the server's logged configuration, when it logged one


def logged_config(files: Sequence[LogFile]) -> EngineConfig | None:
    """The one configuration the given logs were produced with (None when none logged one).

    Two files whose logged steps, topk, model or TP differ are an error: one distribution
    cannot mix draft depths.
    """
    cfg: EngineConfig | None = None
    for f in files:
        c = f.config
        if c is None:
            continue
        if cfg is None:
            cfg = c
            continue
        for key in ("steps", "topk", "num_draft_tokens", "model", "tp"):
            a, b = getattr(cfg, key), getattr(c, key)
            if a is not None and b is not None and a != b:
                raise SpecmodelError(f"{c.where}: {key} {b} but {cfg.where} logged {key} {a}; "
                                     "give logs of one server configuration at a time")
        cfg = cfg.merged(c)
    return cfg


def config_of_logs(paths: Sequence[str]) -> EngineConfig | None:
    """:func:`logged_config` of files on disk (parses them; used to resolve --steps before predicting)."""
    return logged_config([parse_log(p) for p in paths])


def check_flag_against_log(flag: str, value: int | None, logged: int | None, cfg: EngineConfig | None) -> int | None:
    """A flag that contradicts the server's logged value is an error showing both; else the known one."""
    if value is not None and logged is not None and value != logged and cfg is not None:
        raise SpecmodelError(f"{flag} {value} contradicts the log: the server ran with {logged} ({cfg.where}); "
                             f"drop {flag} or give the log of the server you mean")
    return value if value is not None else logged


def _too_long(where: str, mean: float, max_tokens: int) -> SpecmodelError:
    return SpecmodelError(
        f"{where}: observed accept length {mean:.2f} tokens/step exceeds steps + 1 = {max_tokens} for "
        f"--steps {max_tokens - 1}; pass the --steps the server ran with (--speculative-num-steps / "
        "num_speculative_tokens)"
    )


def _mixture(means: Iterable[tuple[float, float, str]], max_tokens: int, source: str, samples: int) -> acc.AcceptDist:
    """Σ w·from_mean(m, K) / Σ w, grouping equal means (logs print 2 decimals: few distinct)."""
    by_mean: dict[float, float] = {}
    for m, w, where in means:
        if m > max_tokens + ROUND_SLACK:
            raise _too_long(where, m, max_tokens)
        mm = min(max(m, 1.0), float(max_tokens))
        by_mean[mm] = by_mean.get(mm, 0.0) + w
    total = sum(by_mean.values())
    if total <= 0:
        raise SpecmodelError(f"{source}: no weight in any window")
    probs = [0.0] * max_tokens
    for m, w in by_mean.items():
        d = acc.from_mean(m, max_tokens, source=source)
        for j, p in enumerate(d.probs):
            probs[j] += w / total * p
    s = sum(probs)
    return acc.AcceptDist(probs=tuple(p / s for p in probs), source=source, samples=samples)


def _label(paths: Sequence[str]) -> str:
    return paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more)"


def _check_saved(doc: dict[str, Any], where: str) -> None:
    ACCEPT.check(doc, where)
    probs = doc.get("probs")
    if not isinstance(probs, list) or not probs or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) for p in probs):
        raise SpecmodelError(f"{where}: probs: expected a non-empty list of numbers")
    if len(probs) > MAX_STEPS + 1:
        raise SpecmodelError(f"{where}: probs: {len(probs)} entries, at most steps + 1 = {MAX_STEPS + 1}")
    samples = doc.get("samples", 0)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise SpecmodelError(f"{where}: samples: expected an integer >= 0")
    rates = doc.get("per_position")
    if rates is not None and (not isinstance(rates, list) or not all(
            isinstance(r, (int, float)) and not isinstance(r, bool) for r in rates)):
        raise SpecmodelError(f"{where}: per_position: expected a list of numbers or null")
    try:
        acc.AcceptDist(probs=tuple(float(p) for p in probs), source=where, samples=samples)
        if rates:
            acc.from_per_position(rates)
    except SpecmodelError as exc:
        raise SpecmodelError(f"{where}: {exc}") from None


def _from_saved(lf: LogFile, max_tokens: int) -> tuple[acc.AcceptDist, tuple[float, ...] | None, str | None]:
    """A saved distribution on 1..max_tokens, plus a note when it had to be extended.

    Fewer steps: truncation (mass above the new maximum must be zero, else the draft depth
    is wrong). More steps: :func:`specmodel.model.accept.resize` — the documented rule
    (docs/logs.md): deeper drafts are accepted with the last observed conditional rate.
    """
    doc = lf.saved
    assert doc is not None
    probs = [float(p) for p in doc["probs"]]
    rates = tuple(float(r) for r in doc["per_position"]) if doc.get("per_position") else None
    note = None
    if len(probs) > max_tokens:
        if any(p > 1e-12 for p in probs[max_tokens:]):
            raise SpecmodelError(
                f"{lf.path}: distribution reaches {len(probs)} tokens/step (steps = {len(probs) - 1}) but --steps is "
                f"{max_tokens - 1}; pass the --steps the server ran with")
        probs = probs[:max_tokens]
    s = sum(probs)
    dist = acc.AcceptDist(probs=tuple(p / s for p in probs), source=str(doc.get("source") or lf.path),
                          samples=int(doc.get("samples", 0)))
    if len(probs) < max_tokens:
        have = len(probs) - 1
        ext = acc.resize(dist, max_tokens, rates=rates[:have] if rates else None)
        dist = acc.AcceptDist(probs=ext.probs, source=dist.source, samples=dist.samples)
        rates = dist.per_position_rates()
        note = (f"{lf.path} was measured with steps = {have}; extended to steps = {max_tokens - 1} with the last "
                f"observed conditional acceptance rate (docs/logs.md), an extrapolation")
    elif rates is not None:
        rates = rates[: max_tokens - 1]
    return dist, rates, note


def summarize(paths: Sequence[str], max_tokens: int | None = None, *, num_spec_tokens: int | None = None,
              decode_log_interval: int | None = None) -> AcceptSummary:
    """Parse every file and build one accept-length distribution on 1..max_tokens.

    ``max_tokens`` = steps + 1; None infers it from vLLM per-position rates, bench rows or a
    saved distribution (SGLang decode lines do not carry the step count: then it is required).
    """
    if not paths:
        raise SpecmodelError("give at least one log file")
    if decode_log_interval is not None and decode_log_interval < 1:
        raise SpecmodelError(f"--decode-log-interval: must be >= 1, got {decode_log_interval}")
    if num_spec_tokens is not None and not 1 <= num_spec_tokens <= MAX_STEPS:
        raise SpecmodelError(f"--num-spec-tokens: must be in 1..{MAX_STEPS}, got {num_spec_tokens}")
    if max_tokens is not None and not 2 <= max_tokens <= MAX_STEPS + 1:
        raise SpecmodelError(f"--steps: must be in 1..{MAX_STEPS}, got {max_tokens - 1}")
    files = tuple(parse_log(p) for p in paths)
    cfg = logged_config(files)
    cfg_notes: list[str] = []
    if cfg is not None:
        steps = check_flag_against_log("--steps", max_tokens - 1 if max_tokens is not None else None, cfg.steps, cfg)
        if max_tokens is None and steps is not None:
            max_tokens = steps + 1
            cfg_notes.append(f"steps {steps} from the server's logged configuration ({cfg.where})")
        num_spec_tokens = check_flag_against_log("--num-spec-tokens", num_spec_tokens,
                                                 cfg.steps if cfg.engine == "vllm" else None, cfg)
        decode_log_interval = check_flag_against_log("--decode-log-interval", decode_log_interval,
                                                     cfg.decode_log_interval, cfg)
    if decode_log_interval is None:
        decode_log_interval = DEFAULT_DECODE_LOG_INTERVAL
    engines = {f.engine for f in files}
    if len(engines) > 1:
        raise SpecmodelError(f"mixed inputs ({', '.join(sorted(engines))}): give files of one kind at a time")
    engine = engines.pop()
    label = _label([f.path for f in files])
    notes: list[str] = cfg_notes

    if max_tokens is None:
        max_tokens = _infer_max_tokens(files, engine, num_spec_tokens)
    if max_tokens < 2:
        raise SpecmodelError(f"--steps: must be >= 1, got {max_tokens - 1}")
    if max_tokens > MAX_STEPS + 1:
        raise SpecmodelError(f"{label}: steps {max_tokens - 1} is more than {MAX_STEPS} (the bound specmodel accepts)")

    if engine == "specmodel.accept":
        if len(files) > 1:
            raise SpecmodelError("give one specmodel accept JSON at a time")
        dist, rates, ext_note = _from_saved(files[0], max_tokens)
        if ext_note:
            notes.append(ext_note)
        return AcceptSummary(dist=dist, rates=rates, files=files, config=cfg, windows_used=0, notes=tuple(notes))

    if engine == "sglang":
        ws = [w for f in files for w in f.windows]
        use = [w for w in ws if w.accept_len is not None and w.batch >= 1]
        if not use:
            if not any(w.accept_len is not None for w in ws):
                raise SpecmodelError(f"{label}: SGLang decode lines have no 'accept len:' "
                                     "(the server ran without speculative decoding)")
            raise SpecmodelError(f"{label}: every decode window has #running-req 0")
        samples = sum(w.batch for w in use) * decode_log_interval
        dist = _mixture(((float(w.accept_len), float(w.batch), w.where) for w in use if w.accept_len is not None),
                        max_tokens, f"SGLang log {label}", samples)
        notes.append(f"mixture of geometric distributions around {len(use)} window means, weighted by #running-req; "
                     f"samples = sum(#running-req) x {decode_log_interval} (--decode-log-interval)")
        return AcceptSummary(dist=dist, rates=None, files=files, config=cfg, windows_used=len(use), windows=tuple(use),
                             notes=tuple(notes))

    if engine == "bench_speculative":
        rows = [w for f in files for w in f.windows if (w.steps or 0) > 0]
        if not rows:
            raise SpecmodelError(f"{label}: only baseline rows (steps 0), no speculative acc_length")
        want = max_tokens - 1
        match = [w for w in rows if w.steps == want]
        if not match:
            have = sorted({w.steps for w in rows if w.steps is not None})
            raise SpecmodelError(f"{label}: no rows with steps = {want} (file has steps {', '.join(map(str, have))}); "
                                 "pass --steps to choose one")
        # samples: verify steps of one average request per row (completion_tokens / acc_length);
        # conservative, since the row averaged over all its requests
        samples = sum(max(int(round((w.completion_tokens or 1.0) / float(w.accept_len or 1.0))), 1) for w in match)
        dist = _mixture(((float(w.accept_len or 1.0), 1.0, w.where) for w in match), max_tokens,
                        f"bench_speculative {label}", samples)
        notes.append(f"{len(match)} rows with steps = {want}, equal weight, geometric shape around each acc_length")
        return AcceptSummary(dist=dist, rates=None, files=files, config=cfg, windows_used=len(match), windows=tuple(match),
                             notes=tuple(notes))

    # vLLM
    recs = [r for f in files for r in f.vllm]
    with_rates = [r for r in recs if r.per_position]
    if with_rates:
        k = len(with_rates[0].per_position or ())
        bad = next((r for r in with_rates if len(r.per_position or ()) != k), None)
        if bad is not None:
            raise SpecmodelError(f"{bad.file}:{bad.line}: {len(bad.per_position or ())} per-position rates, earlier "
                                 f"lines have {k} (num_speculative_tokens changed mid-log)")
        if k > max_tokens - 1:
            raise SpecmodelError(
                f"{with_rates[0].file}: the log was produced with {k} speculative tokens per step "
                f"(per-position rates has {k} entries) but --steps is {max_tokens - 1}; pass --steps {k}")
        weights = [r.drafted / k for r in with_rates]
        total = sum(weights)
        avg = [sum(w * (r.per_position or ())[i] for w, r in zip(weights, with_rates, strict=True)) / total
                 for i in range(k)]
        for i in range(1, k):  # 3-decimal rounding must not make the sequence increase
            avg[i] = min(avg[i], avg[i - 1])
        mean_logged = 1.0 + sum(r.accepted for r in with_rates) / total
        if mean_logged > max_tokens + ROUND_SLACK:
            raise _too_long(label, mean_logged, max_tokens)
        dist = acc.from_per_position(avg, max_tokens=max_tokens, source=f"vLLM log {label}")
        dist = acc.AcceptDist(probs=dist.probs, source=dist.source, samples=int(round(total)))
        notes.append(f"per-position rates averaged over {len(with_rates)} windows weighted by drafts "
                     f"(drafted tokens / {k}); samples = {int(round(total))} drafts")
        return AcceptSummary(dist=dist, rates=tuple(avg), files=files, config=cfg, windows_used=len(with_rates),
                             windows=tuple(iter_windows(files)), notes=tuple(notes))
    # old format: rate only; the mean needs the number of drafts
    nst = num_spec_tokens
    if nst is None:
        raise SpecmodelError(
            f"{label}: old vLLM 'SpecDecoding metrics' lines give only the draft acceptance rate, not the number of "
            "drafts; pass --num-spec-tokens K (the server's num_speculative_tokens) to `specmodel accept` "
            "and feed its -o JSON to --accept-log")
    n_drafts = sum(r.drafted for r in recs) / nst
    mean = 1.0 + sum(r.accepted for r in recs) / n_drafts
    if mean > max_tokens + ROUND_SLACK:
        raise _too_long(label, mean, max_tokens)
    dist = acc.from_mean(min(mean, float(max_tokens)), max_tokens, source=f"vLLM log {label}")
    dist = acc.AcceptDist(probs=dist.probs, source=dist.source, samples=int(round(n_drafts)))
    notes.append(f"old vLLM format: mean = 1 + accepted / (drafted / {nst}); geometric shape assumed")
    return AcceptSummary(dist=dist, rates=None, files=files, config=cfg, windows_used=len(recs),
                         windows=tuple(iter_windows(files)), notes=tuple(notes))


def _infer_max_tokens(files: Sequence[LogFile], engine: str, num_spec_tokens: int | None) -> int:
    if engine == "specmodel.accept":
        return len(files[0].saved["probs"]) if files[0].saved else 2
    if engine == "vllm":
        for f in files:
            for r in f.vllm:
                if r.per_position:
                    return len(r.per_position) + 1
        if num_spec_tokens:
            return num_spec_tokens + 1
        raise SpecmodelError(f"{files[0].path}: old vLLM 'SpecDecoding metrics' lines give only the draft acceptance "
                             "rate and no step count; pass --num-spec-tokens K (the server's num_speculative_tokens)")
    if engine == "bench_speculative":
        steps = sorted({w.steps for f in files for w in f.windows if w.steps})
        if len(steps) == 1:
            return steps[0] + 1
        raise SpecmodelError(f"{files[0].path}: rows for steps {', '.join(map(str, steps))}; pass --steps to choose one")
    raise SpecmodelError(f"{files[0].path}: SGLang decode lines do not say the draft depth; pass --steps "
                         "(the server's --speculative-num-steps)")


def accept_dist_from_logs(paths: list[str], max_tokens: int, *,
                          num_spec_tokens: int | None = None) -> tuple[acc.AcceptDist, tuple[float, ...] | None]:
    """The accept-length distribution on 1..max_tokens from server logs, plus vLLM per-position
    rates when the log has them (else None). Used by ``predict --accept-log``."""
    s = summarize(paths, max_tokens, num_spec_tokens=num_spec_tokens)
    return s.dist, s.rates


# ---------------------------------------------------------------------------------------------
# series, JSON document


@dataclass(frozen=True, kw_only=True)
class SeriesPoint:
    """Observed throughput at one batch size (#running-req), over all windows with that batch."""

    batch: int
    windows: int
    accept_len_mean: float | None
    tokens_per_s_median: float
    tokens_per_s_min: float
    tokens_per_s_max: float
    context_tokens_median: float | None = None  # KV tokens per request (None: the log does not say)
    context_tokens_min: float | None = None
    context_tokens_max: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "windows": self.windows, "accept_len_mean": self.accept_len_mean,
                "context_tokens_median": self.context_tokens_median, "context_tokens_min": self.context_tokens_min,
                "context_tokens_max": self.context_tokens_max,
                "tokens_per_s_median": self.tokens_per_s_median, "tokens_per_s_min": self.tokens_per_s_min,
                "tokens_per_s_max": self.tokens_per_s_max}


def throughput_series(windows: Iterable[DecodeWindow]) -> tuple[SeriesPoint, ...]:
    """Median / range of gen tok/s per #running-req (idle windows, batch 0 or 0 tok/s, left out)."""
    by: dict[int, list[DecodeWindow]] = {}
    for w in windows:
        if w.batch >= 1 and w.tokens_per_s > 0:
            by.setdefault(w.batch, []).append(w)
    out = []
    for b in sorted(by):
        ws = by[b]
        tps = [w.tokens_per_s for w in ws]
        accs = [w.accept_len for w in ws if w.accept_len is not None]
        ctxs = [w.context_tokens for w in ws if w.context_tokens is not None]
        out.append(SeriesPoint(batch=b, windows=len(ws), accept_len_mean=statistics.fmean(accs) if accs else None,
                               tokens_per_s_median=statistics.median(tps), tokens_per_s_min=min(tps),
                               tokens_per_s_max=max(tps),
                               context_tokens_median=statistics.median(ctxs) if ctxs else None,
                               context_tokens_min=min(ctxs) if ctxs else None,
                               context_tokens_max=max(ctxs) if ctxs else None))
    return tuple(out)


def accept_document(s: AcceptSummary) -> dict[str, Any]:
    """The schema-versioned JSON ``specmodel accept -o`` writes (and ``--accept-log`` reads back)."""
    d = s.dist
    return ACCEPT.stamp({
        "convention": "tokens",
        "steps": d.max_tokens - 1,
        "max_tokens": d.max_tokens,
        "probs": list(d.probs),
        "mean_tokens": d.mean_tokens,
        "mean_drafts": d.mean_tokens - 1.0,
        "std_tokens": d.std_tokens,
        "samples": d.samples,
        "per_position": list(s.rates) if s.rates is not None else None,
        "source": d.source,
        "notes": list(s.notes),
        "files": [{"path": f.path, "engine": f.engine, "format": f.fmt, "lines_read": f.lines_read,
                   "lines_matched": f.lines_matched, "skipped": dict(f.skipped)} for f in s.files],
        "series": [p.to_dict() for p in throughput_series(s.windows)],
        "server": None if s.config is None else {
            k: getattr(s.config, k) for k in ("engine", "where", "model", "tp", "algorithm", "draft_model", "steps",
                                              "topk", "num_draft_tokens", "decode_log_interval")},
    })


def write_accept_json(s: AcceptSummary, path: str | Path) -> Path:
    """Atomically write :func:`accept_document`; validated by reading it back first."""
    doc = accept_document(s)
    _check_saved(json.loads(json.dumps(doc)), str(path))
    return atomic_write_json(path, doc)


def iter_windows(files: Iterable[LogFile]) -> Iterator[DecodeWindow]:
    for f in files:
        yield from f.windows
