"""The one table from an input field (what the library's errors name: a
:class:`~specmodel.scenario.args.ScenarioArgs` field, an argument) to the command-line flag that sets it.

Below ``commands/`` errors name fields (:class:`~specmodel.errors.FieldError`); ``cli.main`` spells
them with :func:`flag_of`, so ``specmodel.predict(accept=9.0, steps=3)`` says ``accept`` and
``specmodel predict --accept-len 9 --steps 3`` says ``--accept-len``. The scenario flags are
generated from this table too (commands/scenario.py), so a field cannot have two spellings.
No imports: cli.py reads it on the error path.
"""

from __future__ import annotations

#: field -> flag. A field not listed is spelled ``--field-with-dashes``.
FLAGS: dict[str, str] = {
    "profile": "--profile",
    "accept_len": "--accept-len",
    "accept_hist": "--accept-hist",
    "accept_logs": "--accept-log",
    "per_position": "--per-position",
    "alpha": "--alpha",
    "convention": "--accept-convention",
    "shape": "--accept-shape",
    "batch": "--batch",
    "context": "--context",
    "steps": "--steps",
    "topk": "--topk",
    "num_draft_tokens": "--num-draft-tokens",
    "baseline_tps": "--baseline-tps",
    "verify_ms": "--verify-ms",
    "draft_ms": "--draft-ms",
    "overhead_ms": "--overhead-ms",
    "allreduce_frac": "--allreduce-frac",
    "tp": "--tp",
    "baseline_sweep": "--baseline-sweep",
    "calibrate": "--calibrate",
    "generation_tokens": "--gen-tokens",
    "allreduce_fit": "--allreduce-fit",
    "proposal_rate": "--proposal-rate",
    "method": "--method",
    "request_tokens": "--request-tokens",
    "prompt_tokens": "--prompt-tokens",
    # where a command writes its profile (-o, --output)
    "output": "-o/--output",
    # plan's grid
    "batches": "--batches",
    "contexts": "--contexts",
}


def flag_of(field: str) -> str:
    """``accept_len`` -> ``--accept-len``; a name that already is a flag stays as it is."""
    if field.startswith("-"):
        return field
    return FLAGS.get(field, "--" + field.replace("_", "-"))
