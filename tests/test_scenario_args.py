"""One operating point, filled by click or by Python: every input is a field of
the frozen ScenarioArgs with its bound; errors below commands/ name the field, and the CLI spells a
field as its flag through one table (specmodel/commands/flags.py)."""

from __future__ import annotations

import dataclasses

import click
import pytest

from specmodel.commands.flags import FLAGS, flag_of
from specmodel.commands.scenario import API_ONLY, OPTIONS, scenario_options
from specmodel.errors import FieldError
from specmodel.scenario.args import BOUNDS, INT_FIELDS, ScenarioArgs
from specmodel.scenario.resolve import resolve_scenario
from tests.conftest import DATA, run_cli


def test_every_field_has_one_flag_and_every_flag_one_field() -> None:
    names = set(ScenarioArgs.field_names())
    assert set(OPTIONS) == names - set(API_ONLY)
    assert names - set(API_ONLY) <= set(FLAGS)
    flags = [flag_of(f) for f in OPTIONS]
    assert len(flags) == len(set(flags))  # no two fields share a flag


def test_click_bounds_are_the_fields_bounds() -> None:
    @click.command()
    @scenario_options
    def cmd(**_: object) -> None: ...

    params = {p.name: p for p in cmd.params}
    for field in INT_FIELDS:
        if field == "context":  # "32K" is text: parsed and bounded by ScenarioArgs
            continue
        t = params[field].type
        assert isinstance(t, click.IntRange) and (t.min, t.max) == BOUNDS[field], field


@pytest.mark.parametrize("kw,field", [
    (dict(batch=0), "batch"), (dict(steps=65), "steps"), (dict(tp=0), "tp"), (dict(context="-1"), "context"),
    (dict(context="11M"), "context"), (dict(alpha=1.5), "alpha"), (dict(verify_ms=float("nan")), "verify_ms"),
    (dict(allreduce_frac=2.0), "allreduce_frac"), (dict(convention="bonus"), "convention"),
    (dict(per_position="0.5,x"), "per_position"), (dict(calibrate="1,2"), "calibrate"),
    (dict(batch=True), "batch"),
])
def test_each_bound_names_its_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(FieldError) as info:
        ScenarioArgs(**kw)  # type: ignore[arg-type]
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ") and "--" not in str(info.value)
    assert info.value.render(flag_of).startswith(f"{flag_of(field)}: ")


def test_two_accept_sources_or_two_cost_tables_are_refused_naming_both() -> None:
    with pytest.raises(FieldError) as info:
        ScenarioArgs(accept_len=2.0, alpha=0.5)
    assert str(info.value) == "give one accept-length source, got accept_len, alpha"
    assert info.value.render(flag_of) == "give one accept-length source, got --accept-len, --alpha"
    with pytest.raises(FieldError, match="^baseline_sweep: give either profile or baseline_sweep, not both$"):
        ScenarioArgs(profile="p", baseline_sweep="s.csv")


def test_args_are_frozen_and_resolving_does_not_change_them() -> None:
    args = ScenarioArgs(accept_logs=(str(DATA / "logs_sglang_055" / "server.log"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        args.steps = 3  # type: ignore[misc]
    sc = resolve_scenario(args)
    assert args.steps is None and sc.spec.steps >= 1  # the log's steps went into a copy


def test_the_same_input_errs_with_the_field_in_python_and_the_flag_on_the_cli() -> None:
    with pytest.raises(FieldError) as info:
        resolve_scenario(ScenarioArgs(accept_len=9.0, steps=3))
    assert str(info.value).startswith("accept_len: 9 (tokens convention) outside [1, 4]")
    r = run_cli("predict", "--accept-len", "9", "--steps", "3")
    assert r.returncode == 2
    assert r.stderr.startswith("specmodel: error: --accept-len: 9 (tokens convention) outside [1, 4]")
    r = run_cli("predict", "--accept-len", "0.5")
    assert r.returncode == 2 and r.stderr.rstrip().endswith("pass --accept-convention drafts"), r.stderr
    r = run_cli("predict", "--baseline-tps", "82", "--accept-len", "2")
    assert r.returncode == 2
    assert ("missing --verify-ms (one verify forward), --draft-ms (one draft step; or --calibrate with an observed "
            "point); pass them, or --profile P") in r.stderr


def test_reading_a_profile_by_name_is_the_same_from_python_and_the_cli() -> None:
    import specmodel

    p = specmodel.load_profile("kimi-k2.5-int4-tp8-pcie")
    assert p.name == "kimi-k2.5-int4-tp8-pcie"
    with pytest.raises(FieldError, match=r"^profile: no-such-box: file not found, and no profile of that name .*"
                                         r"known: .*kimi-k2.5-int4-tp8-pcie"):
        specmodel.load_profile("no-such-box")


def test_field_error_renders_each_name_once_and_survives_a_process_boundary() -> None:
    import pickle

    e = FieldError("per_position", "3 rates but steps is 2; pass {steps} 3 (histogram {value: count} untouched)")
    assert str(e) == "per_position: 3 rates but steps is 2; pass steps 3 (histogram {value: count} untouched)"
    assert e.render(flag_of) == ("--per-position: 3 rates but steps is 2; pass --steps 3 "
                                 "(histogram {value: count} untouched)")
    assert str(e.renamed({"per_position": "rates", "steps": "depth"})).startswith("rates: 3 rates but steps is 2; "
                                                                               "pass depth 3")
    back = pickle.loads(pickle.dumps(e))
    assert (back.field, back.detail, str(back)) == (e.field, e.detail, str(e))
