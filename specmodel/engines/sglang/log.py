"""SGLang server log: decode-batch lines and the ``server_args`` start-up line.

Decode-batch line (``scheduler_metrics_mixin.py`` in 0.5.5, ``scheduler_components/metrics_reporter.py``
in 0.5.23), logged every ``--decode-log-interval`` (default 40) decode batches::

    [2025-11-30 04:32:10 TP0] Decode batch, #running-req: 1, #token: 1187, token usage: 0.01,
    accept len: 3.12, accept rate: 0.78, cuda graph: True, gen throughput (token/s): 245.31, #queue-req: 0,

0.5.5 ends with ``, ``; 0.5.23 does not and may add ``cap len:`` / ``block accept len:``; hybrid
models log ``#full token:`` instead of ``#token:``, HiSparse servers (0.5.23 ``--enable-hisparse``)
``#gpu token: …, gpu token usage: …, #cpu token: …, cpu token usage: …`` (KV per request: ``#cpu token``). ``accept len`` = tokens per request per verify
step including the bonus token, averaged over the window (accepted tokens / Σ batch sizes).
``gen throughput`` = all tokens generated in the window / window wall time.

Start-up: ``server_args=ServerArgs(model_path='…', tp_size=8, …, speculative_num_steps=3, …)``
(``logger.info(f"{server_args=}")`` in ``entrypoints/engine.py``, 0.5.5) or the dict form
``server_args={'model_path': '…', 'speculative_num_steps': 3, …}`` (0.5.23).

Distribution: SGLang gives only a window mean, so it is a mixture of ``from_mean(window mean, K)``
(:func:`specmodel.model.accept.mixture_of_means`), each window weighted by its ``#running-req``
(the window's verify steps are ≈ #running-req × decode-log-interval); ``samples`` =
Σ #running-req × decode-log-interval.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from specmodel.engines.base import (
    AcceptSummary,
    DecodeWindow,
    EngineConfig,
    LogFile,
    LogFormat,
    SummaryInputs,
    window_skip_reason,
)
from specmodel.engines.parse import NUM, PARTIAL_LAST_LINE, cfg_int, cfg_value, check_means, count, num
from specmodel.errors import SpecmodelError, field_name
from specmodel.limits import ROUND_SLACK
from specmodel.model import accept as acc

NAME = "sglang"
#: SGLang ``--decode-log-interval`` default (server_args.py, 0.5.5 and 0.5.23).
DEFAULT_DECODE_LOG_INTERVAL = 40

_MARK = re.compile(r"Decode batch(?: \[\d+\])?, ")
_PREFIX = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)(?: ([^\]]*))?\] ")
_KEYS: dict[str, re.Pattern[str]] = {
    "running_req": re.compile(r"#running-req: (\d+)"),
    # "block accept len:" must not match: the key is preceded by ", " or the start of the message
    "accept_len": re.compile(r"(?:^|, )accept len: " + NUM),
    "accept_rate": re.compile(r"(?:^|, )accept rate: " + NUM),
    "cap_len": re.compile(r"cap len: " + NUM),
    "block_accept_len": re.compile(r"block accept len: " + NUM),
    "gen_tokens_per_s": re.compile(r"gen throughput \(token/s\): " + NUM),
    "queue_req": re.compile(r"#queue-req: (\d+)"),
    "tokens": re.compile(r"(?:^|, )#(?:full )?token: (\d+)"),
    # HiSparse (0.5.23 ``pool_stats_observer.py`` l. 139-144): no ``#token:``, but ``#gpu token:`` (the
    # device's sparse working set) and ``#cpu token:`` (the host pool, sized for every token's KV:
    # ``hisparse_coordinator.py`` l. 576-628, ``size_full`` = device size x host_to_device_ratio)
    "cpu_tokens": re.compile(r"(?:^|, )#cpu token: (\d+)"),
    "gpu_tokens": re.compile(r"(?:^|, )#gpu token: (\d+)"),
    "graph": re.compile(r"(?:cuda|cpu|npu|musa) graph: (True|False)"),
    "device": re.compile(r"(cuda|cpu|npu|musa) graph: (?:True|False)"),
}
_ARGS = re.compile(r"server_args=(ServerArgs\(|\{)")


def parse_line(line: str) -> dict[str, Any] | None:
    """Key → value for one SGLang decode-batch line, or None if the line is not one.

    Raises ValueError (message = the missing key) when the line is a decode line but lacks
    ``#running-req`` or ``gen throughput`` (a truncated or foreign line).
    """
    m = _MARK.search(line)
    if m is None:
        return None
    out: dict[str, Any] = {}
    pm = _PREFIX.search(line[: m.start()] if m.start() else line)
    if pm:
        out["timestamp"] = pm.group(1)
        out["rank"] = (pm.group(2) or "").strip()
    body = line[m.start():]
    for key, rx in _KEYS.items():
        km = rx.search(body)
        if km:
            out[key] = km.group(1)
    for req in ("running_req", "gen_tokens_per_s"):
        if req not in out:
            raise ValueError({"running_req": "#running-req", "gen_tokens_per_s": "gen throughput (token/s)"}[req])
    out["trailing_comma"] = body.rstrip("\n").endswith(", ")
    return out


def parse_config(line: str, where: str) -> EngineConfig | None:
    """The ``server_args=`` start-up line, or None."""
    if "server_args=" not in line:
        return None
    m = _ARGS.search(line)
    if m is None:
        return None
    body = line[m.end():]
    d = m.group(1) == "{"
    return EngineConfig(engine=NAME, where=where, model=cfg_value(body, "model_path", d),
                        tp=cfg_int(body, "tp_size", d, where),
                        algorithm=cfg_value(body, "speculative_algorithm", d),
                        draft_model=cfg_value(body, "speculative_draft_model_path", d),
                        steps=cfg_int(body, "speculative_num_steps", d, where),
                        topk=cfg_int(body, "speculative_eagle_topk", d, where),
                        num_draft_tokens=cfg_int(body, "speculative_num_draft_tokens", d, where),
                        decode_log_interval=cfg_int(body, "decode_log_interval", d, where))


def sniff(path: str, lines: Sequence[str], first: str) -> bool:
    return not first.startswith("{") and any("Decode batch" in ln and _MARK.search(ln) for ln in lines)


def parse(path: str, lines: list[str], unterminated: bool) -> LogFile:
    windows: list[DecodeWindow] = []
    skipped: dict[str, int] = {}
    warnings: list[str] = []
    trailing = {True: 0, False: 0}
    has_cap = False
    config: EngineConfig | None = None
    device: str | None = None
    last = len(lines)
    for i, line in enumerate(lines, start=1):
        if "Decode batch" not in line:  # cheap substring test first: most lines are not decode lines
            c = parse_config(line, f"{path}:{i}")
            if c is not None:
                config = c if config is None else config.merged(c)
            continue
        where = f"{path}:{i}"
        try:
            w, d = _window(path, i, line)
        except (ValueError, SpecmodelError) as exc:
            if i == last and unterminated:
                # the server is still writing this line (a live log): keep every complete line
                skipped[PARTIAL_LAST_LINE] = skipped.get(PARTIAL_LAST_LINE, 0) + 1
                warnings.append(f"{where}: partial last line left out (no newline yet: the server is still writing it)")
                continue
            if isinstance(exc, SpecmodelError):
                raise
            raise SpecmodelError(f"{where}: SGLang decode line without '{exc}' (truncated or unknown format)") from None
        if w is None:
            continue
        trailing[bool(d["trailing_comma"])] += 1
        if "device" in d and device is None:
            device = d["device"]  # the decode line names the device its graphs run on
        has_cap = has_cap or "cap_len" in d or "block_accept_len" in d
        windows.append(w)
    fmt = ("0.5.5-style, trailing ', '" if trailing[True] >= trailing[False] else "0.5.23-style") + \
          (", cap/block accept len" if has_cap else "")
    if not windows:
        raise SpecmodelError(f"{path}: no complete SGLang 'Decode batch' line")
    if device is not None:
        seen = EngineConfig(engine=NAME, where=f"{path} (decode lines)", device=device)
        config = seen if config is None else config.merged(seen)
    return LogFile(path=path, engine=NAME, fmt=fmt, lines_read=len(lines), lines_matched=len(windows),
                   windows=tuple(windows), skipped=skipped, config=config, warnings=tuple(warnings))


def _window(path: str, i: int, line: str) -> tuple[DecodeWindow | None, dict[str, Any]]:
    where = f"{path}:{i}"
    d = parse_line(line)
    if d is None:
        return None, {}
    batch = count(d["running_req"], where, "#running-req")
    tput = num(d["gen_tokens_per_s"], where, "gen throughput")
    a = num(d["accept_len"], where, "accept len") if "accept_len" in d else None
    if not math.isfinite(tput) or tput < 0:
        raise SpecmodelError(f"{where}: gen throughput must be a finite number >= 0, got {d['gen_tokens_per_s']}")
    if a is not None and (not math.isfinite(a) or a < 1.0 - ROUND_SLACK):
        raise SpecmodelError(f"{where}: accept len {d['accept_len']} is not >= 1 token/step "
                             "(SGLang counts the bonus token, so the minimum is 1)")
    # KV tokens per request: #token (#full token on hybrid models); on HiSparse the host pool's
    # #cpu token holds every request's whole KV, the device's #gpu token only its sparse working set
    key = next((k for k in ("tokens", "cpu_tokens", "gpu_tokens") if k in d), None)
    label = {"tokens": "#token", "cpu_tokens": "#cpu token", "gpu_tokens": "#gpu token"}
    ctx = count(d[key], where, label[key]) / batch if key is not None and batch > 0 else None
    return DecodeWindow(file=path, line=i, engine=NAME, batch=batch, accept_len=a, tokens_per_s=tput,
                        timestamp=d.get("timestamp", ""), rank=d.get("rank", ""), context_tokens=ctx), d


def summarize(files: Sequence[LogFile], inp: SummaryInputs) -> AcceptSummary:
    ws = [w for f in files for w in f.windows]
    use = [w for w in ws if window_skip_reason(w) is None]
    if not use:
        if not any(w.accept_len is not None for w in ws):
            raise SpecmodelError(f"{inp.label}: SGLang decode lines have no 'accept len:' "
                                 "(the server ran without speculative decoding)")
        raise SpecmodelError(f"{inp.label}: every decode window is idle (#running-req 0 or gen throughput 0)")
    left_out: dict[str, int] = {}
    for w in ws:
        r = window_skip_reason(w)
        if r is not None:
            left_out[r] = left_out.get(r, 0) + 1
    k = inp.max_tokens
    check_means([(float(w.accept_len or 1.0), w.where) for w in use], k)
    interval = inp.decode_log_interval or DEFAULT_DECODE_LOG_INTERVAL
    samples = sum(w.batch for w in use) * interval
    dist = acc.mixture_of_means(((float(w.accept_len or 1.0), float(w.batch)) for w in use), k,
                                source=f"SGLang log {inp.label}", samples=samples)
    notes = [f"mixture of geometric distributions around {len(use)} window means, weighted by #running-req; "
             f"samples = sum(#running-req) x {interval} ({field_name('decode_log_interval')})"]
    if left_out:
        notes.append("left out (no verify step measured): " + ", ".join(f"{n} window(s) with {r}"
                                                                          for r, n in sorted(left_out.items())))
    bands = acc.by_context([acc.WindowAccept(context_tokens=w.context_tokens, weight=float(w.batch),
                                             mean_tokens=float(w.accept_len or 1.0))
                            for w in use if w.context_tokens is not None], dist,
                           source=f"SGLang log {inp.label}", steps_per_weight=interval)
    if bands is not None:
        notes.append(f"acceptance by context: {len(bands.bands)} bands of #token / #running-req (KV tokens per "
                     "request), each a mixture like the whole log's")
    return AcceptSummary(dist=dist, rates=None, files=tuple(files), windows_used=len(use), windows=tuple(use),
                         notes=tuple(notes), by_context=bands)


def steps_of(files: Sequence[LogFile], num_spec_tokens: int | None) -> int | None:
    return None  # decode lines do not carry the draft depth (server_args does: see parse_config)


FORMAT = LogFormat(name=NAME, description="SGLang decode log", help_name="SGLang server log", text=True,
                   sniff=sniff, parse=parse, summarize=summarize, steps_of=steps_of,
                   steps_hint="SGLang decode lines do not say the draft depth; pass {steps} "
                              "(the server's --speculative-num-steps)")
