"""The flags shared by ``predict``, ``report``, ``plan`` and ``validate`` (which profile, which
accept-length source, which operating point) and the decorator that turns them into a
:class:`~specmodel.scenario.Scenario` through :func:`specmodel.scenario.resolve_scenario`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from specmodel.commands.engine_help import registry_option
from specmodel.limits import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_GEN_TOKENS,
    MAX_STEPS,
    MAX_TOPK,
    MAX_TP,
    bounded_int,
)
from specmodel.scenario import resolve_scenario


def scenario_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Attach the shared flags (profile, accept-length source, operating point) to a command."""
    opts = [
        click.option("--profile", "profile_path", type=click.Path(), default=None,
                     help="profile.json or its directory (default: the one measured profile under ./profiles, else the shipped "
                          "reference; several measured ones: choose)."),
        click.option("--accept-len", type=float, default=None,
                     help="Mean accept length per verify step (see --accept-convention)."),
        click.option("--accept-convention", type=click.Choice(["tokens", "drafts"]), default="tokens", show_default=True,
                     help="tokens: tokens per step incl. the bonus token (SGLang 'accept len', vLLM 'Mean acceptance length'); "
                          "drafts: accepted drafts only (0.58 = 1.58 tokens/step)."),
        click.option("--accept-shape", type=click.Choice(["geometric", "point"]), default="geometric", show_default=True,
                     help="Shape assumed around a bare --accept-len (geometric = constant per-draft acceptance)."),
        click.option("--accept-hist", default=None,
                     help="Histogram of per-step counts: '1:10,2:30,3:40,4:20' or a JSON/CSV file (in --accept-convention)."),
        click.option("--per-position", default=None,
                     help="vLLM per-position acceptance rates 'r1,r2,...' (E = 1 + sum r_i)."),
        click.option("--alpha", type=float, default=None,
                     help="Chain acceptance rate per draft (Leviathan et al. 2023); k = --steps drafts."),
        registry_option("--accept-log", "accept_logs", multiple=True, type=click.Path(),
                        help_template="{logs} to take the accept length from (repeatable)."),
        click.option("--batch", type=bounded_int(1, MAX_BATCH), default=1, show_default=True, help="Concurrent requests (batch size)."),
        click.option("--context", "context", default=None,
                     help="KV tokens per request (context length L), e.g. 32768 or 32K (K = 1024), at most "
                          f"{MAX_CONTEXT_TOKENS}; default: the profile's smallest measured context."),
        click.option("--steps", type=bounded_int(1, MAX_STEPS), default=None, help="Draft depth (--speculative-num-steps); default: the profile's."),
        click.option("--topk", type=bounded_int(1, MAX_TOPK), default=None, help="Draft branching (--speculative-eagle-topk); default: the profile's."),
        click.option("--num-draft-tokens", type=bounded_int(2, MAX_DRAFT_TOKENS), default=None,
                     help="Tokens verified per request (--speculative-num-draft-tokens); default: steps+1 with topk 1, else the profile's."),
        click.option("--baseline-tps", type=float, default=None, help="Baseline (non-speculative) tok/s at --batch: the TOTAL over all --batch requests."),
        click.option("--verify-ms", type=float, default=None, help="One verify forward, ms."),
        click.option("--draft-ms", type=float, default=None, help="One draft step (one drafter forward), ms; run --steps times per cycle."),
        click.option("--overhead-ms", type=float, default=None, help="Per-cycle overhead outside any forward, ms."),
        click.option("--allreduce-frac", type=float, default=None, help="Share of --verify-ms / baseline step spent in all-reduce (0..1)."),
        click.option("--tp", type=bounded_int(1, MAX_TP), default=None, help="TP degree, for profiles built from plain numbers."),
        click.option("--baseline-sweep", type=click.Path(), default=None,
                     help="CSV of a baseline sweep used as T_fwd(n, L): header 'batch,[context,]tokens_per_s' "
                          "(tokens_per_s = total over all requests) or '...,tokens_per_s_per_request'."),
        click.option("--calibrate", default=None,
                     help="One observed speculative point BATCH,CONTEXT,ACCEPT_LEN,TOKENS_PER_S (or BATCH,ACCEPT_LEN,"
                          "TOKENS_PER_S at --context); accept in tokens incl. bonus, tok/s the TOTAL over BATCH requests. "
                          "The unseen per-cycle cost found there is carried, constant, to every other batch and context."),
        click.option("--allreduce-fit", type=click.Path(), default=None,
                     help="specmodel.allreduce_fit JSON from `specmodel nccl-tests -o`: re-cost every all-reduce of the "
                          "profile with it (per call at the row's message size; waiting/skew kept as measured)."),
        click.option("--gen-tokens", type=bounded_int(1, MAX_GEN_TOKENS), default=256, show_default=True,
                     help="Generation length per request for the tok/s band and P(speedup > 1)."),
    ]
    for o in reversed(opts):
        func = o(func)
    return func


SCENARIO_KEYS = ("profile_path", "accept_len", "accept_convention", "accept_shape", "accept_hist", "per_position",
                 "alpha", "accept_logs", "batch", "context", "steps", "topk", "num_draft_tokens", "baseline_tps", "verify_ms",
                 "draft_ms", "overhead_ms", "allreduce_frac", "tp", "baseline_sweep", "calibrate", "gen_tokens",
                 "allreduce_fit")


def pop_scenario(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs.pop(k) for k in SCENARIO_KEYS if k in kwargs}


def with_scenario(func: Callable[..., Any] | None = None, *,
                  require_costs: bool = True) -> Callable[..., Any]:
    """Decorator: add the flags and pass a resolved Scenario as ``scenario``.

    ``require_costs=False`` (``@with_scenario(require_costs=False)``) lets a sweep or plain numbers
    go without a draft cost; the output then says "draft assumed free" in its provenance.
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(**kwargs: Any) -> Any:
            sc = resolve_scenario(require_costs=require_costs, **pop_scenario(kwargs))
            return f(scenario=sc, **kwargs)

        return scenario_options(wrapper)

    return deco(func) if func is not None else deco
