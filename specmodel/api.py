"""The Python API, for notebooks and scripts: the same functions the CLI runs.

>>> import specmodel
>>> prof = specmodel.load_profile("profiles/my-box")          # or the shipped reference
>>> pred = specmodel.predict(prof, accept=3.2, batch=4, context="32K")
>>> pred.figures.tokens_per_s, pred.figures.speedup, pred.outcome.verdict
>>> pred.to_frame()                                          # pandas, one row
>>> prof.costs_frame()                                       # pandas, one row per cost row

``accept`` follows one convention, named by ``convention``: ``"tokens"`` (default) = tokens
emitted per verify step INCLUDING the bonus token, 1..steps+1 (SGLang's ``accept len``, vLLM's
``Mean acceptance length``); ``"drafts"`` = accepted draft tokens only (one less). It may be a
mean, a histogram ``{tokens_per_step: count}`` or an :class:`AcceptDist` (e.g. from
:func:`load_accept`). ``specmodel predict`` fills the same :class:`~specmodel.scenario.args.ScenarioArgs`
from its flags, resolves the same :class:`~specmodel.scenario.resolve.Scenario` and calls the same
:func:`~specmodel.scenario.resolve.run_prediction`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specmodel.errors import FieldError
from specmodel.model.accept import AcceptDist
from specmodel.model.calibrate import Observation
from specmodel.model.predict import require_consistent
from specmodel.model.prediction import Prediction
from specmodel.scenario.args import ScenarioArgs
from specmodel.scenario.profiles import find_profile, reference_profile_path
from specmodel.scenario.resolve import resolve_scenario, run_prediction
from specmodel.schema.profile import Profile
from specmodel.schema.profile import load_profile as _load_profile_file

__all__ = ["AcceptDist", "Prediction", "Profile", "ScenarioArgs", "load_accept", "load_profile", "predict",
           "predict_args", "reference_profile_path"]

#: ScenarioArgs fields that :func:`predict` takes under another name (its errors say the argument)
_ARGUMENT_OF = {"accept_len": "accept", "accept_hist": "accept", "accept_dist": "accept"}


def load_profile(path: str | Path | None = None) -> Profile:
    """A validated profile from ``profile.json``, its directory or a profile NAME as the tool prints
    it (``./profiles/NAME``, then the shipped references); ``None``: the shipped reference.

    Raises :class:`specmodel.errors.SpecmodelError` naming the file and field on bad input.
    """
    return _load_profile_file(find_profile(path) if path is not None else reference_profile_path())


def load_accept(log: str | Path | Sequence[str | Path], *, steps: int | None = None,
                num_spec_tokens: int | None = None) -> AcceptDist:
    """The accept-length distribution (tokens/step incl. the bonus token) from SGLang/vLLM server
    logs, bench_speculative JSONL or a ``specmodel accept -o`` file: what ``specmodel accept``
    reads. ``steps`` (the server's ``--speculative-num-steps``) is needed for SGLang logs; vLLM's
    per-position rates and bench_speculative rows carry it."""
    from specmodel.engines.logs import summarize

    paths = [str(log)] if isinstance(log, (str, Path)) else [str(p) for p in log]
    return summarize(paths, steps + 1 if steps is not None else None, num_spec_tokens=num_spec_tokens).dist


def predict(profile: Profile | str | Path | None = None, *,
            accept: float | Mapping[int, float] | AcceptDist,
            batch: int = 1, context: int | str | None = None, steps: int | None = None, topk: int | None = None,
            num_draft_tokens: int | None = None, convention: str = "tokens", shape: str = "geometric",
            calibrate: Observation | str | tuple[float, ...] | None = None,
            generation_tokens: int = 256, proposal_rate: float | None = None, method: str | None = None,
            request_tokens: int | None = None, prompt_tokens: int | None = None,
            strict: bool = True) -> Prediction:
    """Predict tok/s, speedup, break-even accept length and a verdict at one operating point.

    ``profile``: a :class:`Profile`, a path, or ``None`` for the shipped reference.
    ``accept``: see the module docstring (``convention``: ``"tokens"`` incl. bonus, or ``"drafts"``).
    ``batch``: concurrent requests; tok/s figures are totals over them (``*_per_request`` divides).
    ``context``: KV tokens per request, ``32768`` or ``"32K"`` (``None``: the profile's smallest).
    ``steps``/``topk``/``num_draft_tokens``: the speculative config (default: the profile's).
    ``calibrate``: one observed point ``(batch, accept, tok/s)`` or ``(batch, context, accept, tok/s)``,
    as ``--calibrate`` takes it.
    ``proposal_rate``: ngram/suffix only, the share of request-steps that proposed (``--proposal-rate``).
    ``method``: price another drafter kind from the same profile (``--method``).
    ``request_tokens`` / ``prompt_tokens``: price a request of that many output tokens end to end
    (``--request-tokens`` / ``--prompt-tokens``: prefill and time outside the engine included; the
    verdict rests on it; the figures in ``Prediction.request``).
    ``strict``: raise :class:`specmodel.errors.SpecmodelError` when the inputs contradict each other
    (as ``specmodel predict`` exits 2); False returns the prediction with verdict ``INCONSISTENT``
    and its ``inconsistencies``, to inspect.
    Bad input raises :class:`specmodel.errors.FieldError` naming the argument (``accept: 9 …``).
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    try:
        args = ScenarioArgs(profile=prof, batch=batch, context=context, steps=steps, topk=topk,
                            num_draft_tokens=num_draft_tokens, convention=convention, shape=shape,
                            calibrate=calibrate, generation_tokens=generation_tokens, proposal_rate=proposal_rate,
                            method=method, request_tokens=request_tokens, prompt_tokens=prompt_tokens,
                            **_accept_source(accept))
        pred = run_prediction(resolve_scenario(args))
        return require_consistent(pred) if strict else pred
    except FieldError as exc:
        raise exc.renamed(_ARGUMENT_OF) from None


def _accept_source(accept: Any) -> dict[str, Any]:
    """``accept`` as the one :class:`ScenarioArgs` source field it is (a mean, a histogram, a distribution)."""
    if isinstance(accept, AcceptDist):
        return {"accept_dist": accept}
    if isinstance(accept, Mapping):
        return {"accept_hist": accept}
    if isinstance(accept, bool) or not isinstance(accept, (int, float)):
        raise FieldError("accept", f"expected a mean accept length, a histogram {{value: count}} or an AcceptDist, "
                                   f"got {type(accept).__name__}")
    return {"accept_len": accept}


def predict_args(args: ScenarioArgs) -> Prediction:
    """The prediction for every operating-point input at once (plain numbers, a baseline sweep, an
    all-reduce fit, server logs: whatever ``specmodel predict`` takes), exactly as the CLI runs it;
    errors name the :class:`ScenarioArgs` field."""
    return require_consistent(run_prediction(resolve_scenario(args)))
