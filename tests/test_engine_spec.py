"""Engines are records (specmodel/engines: EngineSpec): watch, plan and the schedules dispatch on the
record, never on an engine's name. A third, made-up engine (tests/toy_engine.py: one module, its
record and its counters plug-in) runs through watch and plan --engine without any other edit.
Before: watch read any engine but vLLM with SGLang's gauge meaning, and plan --engine offered
vllm|sglang only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specmodel.engines import ENGINE_SPECS, engine_spec
from specmodel.schema.phases import HOST_PROPOSERS, METHODS, VLLM_FORWARD_DRAFTERS
from tests.conftest import REFERENCE
from tests.metrics_server import PageServer

ROOT = Path(__file__).resolve().parents[1]


def _toy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.toy_engine", *args], capture_output=True, text=True,
                          timeout=180, cwd=ROOT)


def test_a_third_engine_with_counters_is_read_as_counters_by_watch() -> None:
    from tests import toy_engine as toy

    pages = [toy.page(100, 150, 400), toy.page(300, 750, 1400)]  # 200 drafts, 600 accepted: 4.0 tok/step
    with PageServer(pages) as srv:
        r = _toy("watch", srv.url, "--profile", str(REFERENCE), "--once", "--interval", "0.1", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    assert doc["observed"]["engine"] == "toy" and doc["observed"]["verify_steps"] == 200
    assert doc["observed"]["accept_mean_tokens"] == 4.0  # differenced counters: 1 + 600 / 200
    assert doc["spec"]["topk"] == 1  # the record says it drafts chains
    assert doc["verdict"] in ("GO", "MARGINAL", "NO-GO")


def test_a_third_engine_gets_its_own_schedule_from_plan() -> None:
    r = _toy("plan", "--profile", str(REFERENCE), "--accept-len", "3.2", "--engine", "toy", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["engine"] == "toy" and doc["encoding_read_from"] == "tests/toy_engine.py"
    for band in doc["bands"]:
        assert band["toy"]["per_batch"] == [[x["start"], x["end"], x["k"]] for x in band["ranges"]]
    text = _toy("plan", "--profile", str(REFERENCE), "--accept-len", "3.2")
    assert text.returncode == 0 and "Toy:" in text.stdout  # the ready-to-paste lines come from every record


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

    for rel in ("specmodel/model/schedule.py", "specmodel/model/serveplan.py", "specmodel/watch.py",
                "specmodel/commands/watch.py", "specmodel/commands/plan.py", "specmodel/commands/plan_schedule.py"):
        text = (ROOT / rel).read_text()
        code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith(("#", '"', "'")))
        assert not re.search(r"""==\s*["'](vllm|sglang)["']""", code), rel
