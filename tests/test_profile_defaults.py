"""`specmodel profile --help` states the defaults the run uses (a help text that
says "--warmup default 2 CPU" while the code runs 1 misleads): both come from plan.RunDefaults, checked here by
building the CPU plan the bare command would run and reading its numbers back out of --help."""

from __future__ import annotations

import re

import pytest

from specmodel.commands.profile_plan import build_plan
from specmodel.profile.plan import CPU_DEFAULTS, GPU_DEFAULTS, default_help
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def help_text() -> str:
    r = run_cli("profile", "--help")
    assert r.returncode == 0, r.stderr
    return " ".join(r.stdout.split())  # click wraps lines; compare words


def _cpu_default(help_text: str, flag: str) -> str:
    m = re.search(re.escape(flag) + r" [A-Z ]+? .*?\(default ([^ ,)]+(?:,[^ ,)]+)*) CPU", help_text)
    assert m, f"{flag}: no 'default … CPU' in --help"
    return m.group(1)


def test_help_states_the_cpu_defaults_the_plan_uses(help_text: str, tmp_path) -> None:
    from specmodel.commands.profile import profile_cmd

    ctx = profile_cmd.make_context("profile", ["--tp", "2", "--backend", "gloo", "--out-dir", str(tmp_path),
                                               "--spec-loop"])
    plan, _, _ = build_plan(dict(ctx.params))
    assert plan.device == "cpu"
    assert int(_cpu_default(help_text, "--warmup")) == plan.warmup == 1
    assert int(_cpu_default(help_text, "--repeats")) == plan.repeats
    assert float(_cpu_default(help_text, "--time-budget")) == plan.time_budget_s
    assert int(_cpu_default(help_text, "--cycles")) == plan.spec_loop.cycles
    assert float(_cpu_default(help_text, "--loop-budget")) == plan.spec_loop.budget_s
    assert int(_cpu_default(help_text, "--layers")) == plan.target.num_layers
    assert int(_cpu_default(help_text, "--hidden")) == plan.target.hidden_size
    assert tuple(int(b) for b in _cpu_default(help_text, "--batches").split(",")) == \
        tuple(sorted({p.batch for p in plan.points}))
    ctxs = tuple(int(c[:-1]) * 1024 if c.endswith("K") else int(c) for c in _cpu_default(help_text, "--contexts").split(","))
    assert ctxs == plan.contexts
    # one figure for both devices reads "default N"
    assert f"(default {plan.min_passes})" in help_text and f"default {plan.steps}." in help_text.split("--steps", 1)[1][:80]


def test_default_help_names_both_devices_or_one_figure() -> None:
    assert default_help("warmup") == f"default {CPU_DEFAULTS.warmup} CPU, {GPU_DEFAULTS.warmup} GPU"
    assert default_help("min_passes") == "default 6"
    assert default_help("layers", none="as many as fit") == f"default {CPU_DEFAULTS.layers} CPU, as many as fit GPU"
    assert default_help("contexts") == "default 256,4K CPU, 1K,8K,32K GPU"


def test_the_overhead_pass_runs_with_a_whole_cycle_and_not_beside_a_spec_loop(help_text: str, tmp_path) -> None:
    """--overhead-cycles: the default (stated in --help) runs the pass after the timing passes
    (its own progress unit); 0, a spec loop (which measures its own overhead) or a sweep without
    every phase of a cycle (--phases) skips it."""
    from specmodel.commands.profile import profile_cmd

    def plan_for(*args: str):
        ctx = profile_cmd.make_context("profile", ["--tp", "2", "--backend", "gloo", "--out-dir", str(tmp_path), *args])
        return build_plan(dict(ctx.params))[0]

    p = plan_for()
    assert re.search(rf"--overhead-cycles .*?default {p.overhead_cycles};", help_text)
    assert p.measures_overhead() and p.units().index("cycle overhead") == p.units().index("interleaved timing passes") + 1
    assert len(p.unit_weights()) == len(p.units())
    assert not plan_for("--overhead-cycles", "0").measures_overhead()
    assert "cycle overhead" not in plan_for("--overhead-cycles", "0").units()
    assert not plan_for("--spec-loop").measures_overhead()
    assert not plan_for("--phases", "decode,verify").measures_overhead()
    assert plan_for("--overhead-cycles", "6").overhead_cycles == 6
