"""The flags shared by ``predict``, ``report``, ``plan`` and ``validate`` (which profile, which
accept-length source, which operating point), generated from the fields of
:class:`~specmodel.scenario.args.ScenarioArgs`: each flag is spelled by the one field → flag table
(:mod:`specmodel.commands.flags`) and bounded by :data:`~specmodel.scenario.args.BOUNDS`; the decorator
fills a ScenarioArgs from click and passes the resolved :class:`~specmodel.scenario.resolve.Scenario`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from specmodel.commands.engine_help import RegistryHelpOption
from specmodel.commands.flags import flag_of
from specmodel.limits import MAX_CONTEXT_TOKENS, bounded_int
from specmodel.scenario.args import BOUNDS, CONVENTIONS, SHAPES, ScenarioArgs
from specmodel.scenario.resolve import resolve_scenario
from specmodel.schema.phases import SPEC_METHODS


def _bounded(field: str) -> click.IntRange:
    lo, hi = BOUNDS[field]
    return bounded_int(int(lo), int(hi))


#: field -> click.option keyword arguments (the flag itself comes from the table in flags.py)
OPTIONS: dict[str, dict[str, Any]] = {
    "profile": dict(type=click.Path(), default=None,
                    help="profile.json, its directory, or a NAME as the tool prints it (looked up under ./profiles, then "
                         "the shipped references); default: the one measured profile under ./profiles, else the shipped "
                         "reference (several measured ones: choose)."),
    "accept_len": dict(type=float, default=None, help="Mean accept length per verify step (see --accept-convention)."),
    "convention": dict(type=click.Choice(list(CONVENTIONS)), default="tokens", show_default=True,
                       help="tokens: tokens per step incl. the bonus token (SGLang 'accept len', vLLM 'Mean acceptance "
                            "length'); drafts: accepted drafts only (0.58 = 1.58 tokens/step)."),
    "shape": dict(type=click.Choice(list(SHAPES)), default="geometric", show_default=True,
                  help="Shape assumed around a bare --accept-len (geometric = constant per-draft acceptance)."),
    "accept_hist": dict(default=None,
                        help="Histogram of per-step counts: '1:10,2:30,3:40,4:20' or a JSON/CSV file (in --accept-convention)."),
    "per_position": dict(default=None, help="vLLM per-position acceptance rates 'r1,r2,...' (E = 1 + sum r_i)."),
    "alpha": dict(type=float, default=None, help="Chain acceptance rate per draft (Leviathan et al. 2023); k = --steps drafts."),
    # the formats are listed from the engine registry when --help is shown (commands/engine_help.py)
    "accept_logs": dict(multiple=True, type=click.Path(), cls=RegistryHelpOption,
                        help_template="{logs} to take the accept length from (repeatable)."),
    "batch": dict(type=_bounded("batch"), default=1, show_default=True, help="Concurrent requests (batch size)."),
    "context": dict(default=None, help="KV tokens per request (context length L), e.g. 32768 or 32K (K = 1024), at most "
                                       f"{MAX_CONTEXT_TOKENS}; default: the profile's smallest measured context."),
    "steps": dict(type=_bounded("steps"), default=None, help="Draft depth (--speculative-num-steps); default: the profile's."),
    "topk": dict(type=_bounded("topk"), default=None, help="Draft branching (--speculative-eagle-topk); default: the profile's."),
    "num_draft_tokens": dict(type=_bounded("num_draft_tokens"), default=None,
                             help="Tokens verified per request (--speculative-num-draft-tokens); default: steps+1 with topk 1, "
                                  "else the profile's."),
    "baseline_tps": dict(type=float, default=None,
                         help="Baseline (non-speculative) tok/s at --batch: the TOTAL over all --batch requests."),
    "verify_ms": dict(type=float, default=None, help="One verify forward, ms."),
    "draft_ms": dict(type=float, default=None, help="One draft step (one drafter forward), ms; run --steps times per cycle."),
    "overhead_ms": dict(type=float, default=None, help="Per-cycle overhead outside any forward, ms."),
    "allreduce_frac": dict(type=float, default=None, help="Share of --verify-ms / baseline step spent in all-reduce (0..1)."),
    "tp": dict(type=_bounded("tp"), default=None, help="TP degree, for profiles built from plain numbers."),
    "baseline_sweep": dict(type=click.Path(), default=None,
                           help="CSV of a baseline sweep used as T_fwd(n, L): header 'batch,[context,]tokens_per_s' "
                                "(tokens_per_s = total over all requests) or '...,tokens_per_s_per_request'."),
    "calibrate": dict(default=None,
                      help="One observed speculative point BATCH,CONTEXT,ACCEPT_LEN,TOKENS_PER_S (or BATCH,ACCEPT_LEN,"
                           "TOKENS_PER_S at --context); accept in tokens incl. bonus, tok/s the TOTAL over BATCH requests. "
                           "The unseen per-cycle cost found there is carried, constant, to every other batch and context."),
    "allreduce_fit": dict(type=click.Path(), default=None,
                          help="specmodel.allreduce_fit JSON from `specmodel nccl-tests -o`: re-cost every all-reduce of the "
                               "profile with it (per call at the row's message size; waiting/skew kept as measured)."),
    "proposal_rate": dict(type=float, default=None,
                          help="ngram/suffix only: share of request-steps in which the lookup proposed [0..1]; vLLM's "
                               "accept length counts only those (r = drafts / (generated - accepted tokens), as "
                               "`specmodel watch` prints it). Default: the rate the profile's hook measured "
                               "(`specmodel vllm --summarize` of an ngram server), else every step proposes."),
    "method": dict(type=click.Choice(list(SPEC_METHODS)), default=None,
                   help="Price another drafter kind from the same profile (e.g. ngram from a draft_model profile): "
                        "costs the profile did not measure for it are named as assumed. Default: the profile's method "
                        "(a log of another method is refused without it)."),
    "generation_tokens": dict(type=_bounded("generation_tokens"), default=256, show_default=True,
                              help="Generation length per request for the tok/s band and P(speedup > 1)."),
    "request_tokens": dict(type=_bounded("request_tokens"), default=None,
                           help="Output tokens per request: also price each request end to end -- its prefill and "
                                "the time the server spends outside the engine's steps, as a client timing whole "
                                "requests sees them -- and give the verdict on that speedup. Default: the decode "
                                "phase only."),
    "prompt_tokens": dict(type=_bounded("prompt_tokens"), default=None,
                          help="With --request-tokens: prompt tokens per request (default: the profiled requests' "
                               "prompt length)."),
}
#: ScenarioArgs fields the command line does not set (a distribution built in Python)
API_ONLY = ("accept_dist",)


def scenario_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Attach the shared flags (profile, accept-length source, operating point) to a command."""
    for field in reversed(list(OPTIONS)):
        func = click.option(flag_of(field), field, **OPTIONS[field])(func)
    return func


def pop_scenario(kwargs: dict[str, Any]) -> ScenarioArgs:
    """The ScenarioArgs click filled (its parameters are named by field), removed from ``kwargs``."""
    return ScenarioArgs(**{k: kwargs.pop(k) for k in OPTIONS if k in kwargs})


def with_scenario(func: Callable[..., Any] | None = None, *,
                  require_costs: bool = True) -> Callable[..., Any]:
    """Decorator: add the flags and pass a resolved Scenario as ``scenario``.

    ``require_costs=False`` (``@with_scenario(require_costs=False)``) lets a sweep or plain numbers
    go without a draft cost; the output then says "draft assumed free" in its provenance.
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(**kwargs: Any) -> Any:
            sc = resolve_scenario(pop_scenario(kwargs), require_costs=require_costs)
            return f(scenario=sc, **kwargs)

        return scenario_options(wrapper)

    return deco(func) if func is not None else deco
