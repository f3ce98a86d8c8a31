"""Engines are records (specmodel/engines: EngineSpec): watch, plan and the schedules dispatch on the
record, never on an engine's name (a third, made-up engine runs through them with one registry
line: tests/test_toy_engine.py)."""

from __future__ import annotations

from pathlib import Path

from specmodel.engines import ENGINE_SPECS, engine_spec
from specmodel.schema.phases import HOST_PROPOSERS, METHODS, VLLM_FORWARD_DRAFTERS

ROOT = Path(__file__).resolve().parents[1]


def test_one_method_table() -> None:
    # the engines' method lists are views of phases.METHODS (before: three lists that disagreed)
    for e in ENGINE_SPECS:
        assert set(e.methods) == {m.name for m in METHODS if m.engine == e.name}
    assert set(HOST_PROPOSERS) == {m.name.lower() for m in METHODS if m.proposer == "lookup"}
    assert "ngram_gpu" in HOST_PROPOSERS and "mtp" in VLLM_FORWARD_DRAFTERS
    v = engine_spec("vllm")
    # ngram / suffix / mtp name no drafter model in vLLM's config; eagle3 does
    assert v.base_config("ngram", None, None) == {"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 5}
    assert v.base_config("NEXTN", None, None) == {"method": "mtp"}
    assert v.base_config("EAGLE3", None, None) == {"method": "eagle3", "model": "<drafter>"}


def test_model_schedule_and_serveplan_name_no_engine() -> None:
    import re

    for rel in ("specmodel/model/schedule.py", "specmodel/model/serveplan.py", "specmodel/live/watch.py",
                "specmodel/live/sources.py", "specmodel/live/window.py", "specmodel/commands/watch.py", "specmodel/commands/plan.py", "specmodel/commands/plan_schedule.py"):
        text = (ROOT / rel).read_text()
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith(("#", '"', "'")))
        assert not re.search(r"""==\s*["'](vllm|sglang)["']""", code), rel
