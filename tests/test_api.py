"""The Python API (specmodel.api, docs/api.md): same numbers as the CLI, cheap to import,
pandas only where a frame is asked for, and the documented example runs as written."""

from __future__ import annotations

import json
import math
import re

import pytest

import specmodel
from specmodel.errors import FieldError, SpecmodelError
from tests.conftest import DATA, REPO, run_cli, run_python


def _doc_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)
    assert len(blocks) == 1, "docs/api.md should hold exactly one runnable python block"
    return blocks[0]


def test_docs_api_example_runs_and_prints_the_reference_figures(tmp_path):
    # as written, from a checkout's top (its paths are the checkout's tests/data): a folder of the
    # test's own with the same tests/, and no profiles/ of anyone's
    (tmp_path / "tests").symlink_to(REPO / "tests")
    out = run_python(_doc_example(), cwd=tmp_path).stdout
    # the write-up's seed figures: model 66.7 tok/s at accept 2.0; calibrated on the observed 60
    assert "predicted 66.7 tok/s vs baseline 82.0" in out
    assert "break-even 2.46 tokens/step" in out
    assert "calibrated 60.0 tok/s" in out
    assert "from the log: 2.77 tokens/step over 6830 steps" in out
    # the sweep printed six rows (3 accept lengths x 2 batches)
    assert len([ln for ln in out.splitlines() if re.match(r"^\s+[18]\s+[23]\.[05]\s", ln)]) == 6


def _cli_json(tmp_path, *args: str) -> dict:
    r = run_cli("predict", *args, "--json", cwd=tmp_path)  # empty cwd: the shipped reference, as the API
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("cli_args, api_kwargs", [
    (("--accept-len", "2.0"), {"accept": 2.0}),
    (("--accept-len", "2.4", "--batch", "8", "--context", "32K", "--steps", "4"),
     {"accept": 2.4, "batch": 8, "context": "32K", "steps": 4}),
    (("--accept-len", "1.2", "--accept-convention", "drafts", "--accept-shape", "point"),
     {"accept": 1.2, "convention": "drafts", "shape": "point"}),
    (("--accept-hist", "1:10,2:30,3:40,4:20", "--batch", "4"), {"accept": {1: 10, 2: 30, 3: 40, 4: 20}, "batch": 4}),
    (("--accept-len", "2.0", "--calibrate", "1,2.0,60"), {"accept": 2.0, "calibrate": (1, 2.0, 60)}),
    (("--accept-len", "3", "--topk", "2", "--num-draft-tokens", "6", "--gen-tokens", "64"),
     {"accept": 3.0, "topk": 2, "num_draft_tokens": 6, "generation_tokens": 64}),
])
def test_api_predict_equals_cli_json(tmp_path, cli_args, api_kwargs):
    cli = _cli_json(tmp_path, *cli_args)
    api = specmodel.predict(**api_kwargs).to_dict()
    cli.pop("notes")
    assert (cli.pop("schema"), cli.pop("schema_version")) == ("specmodel.prediction", 6)
    assert set(cli) == set(api)
    for key, want in api.items():
        got = cli[key]
        if isinstance(want, float):
            assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-15), key
        elif isinstance(want, tuple):
            assert list(got) == list(want), key
        else:
            assert got == want, key


def test_accept_conventions_and_sources_agree():
    tokens = specmodel.predict(accept=2.5)
    drafts = specmodel.predict(accept=1.5, convention="drafts")
    assert math.isclose(tokens.figures.tokens_per_s, drafts.figures.tokens_per_s, rel_tol=1e-12)
    dist = specmodel.load_accept(DATA / "logs_vllm_new" / "server.log")
    from_dist = specmodel.predict(accept=dist)
    assert math.isclose(from_dist.accept.mean_tokens, dist.mean_tokens, rel_tol=1e-12)
    assert from_dist.accept.samples == dist.samples > 0


def test_api_errors_are_specmodel_errors_naming_the_argument_not_a_flag():
    # below commands/ an error names the field; from Python that is the argument
    cases = [(dict(accept="three"), "accept: expected a mean accept length"),
             (dict(accept=2.0, batch=0), "batch: must be in 1..65536, got 0"),
             (dict(accept=9.0, steps=3), "accept: 9 (tokens convention) outside [1, 4] for steps = 3"),
             (dict(accept=0.5), "accept: 0.5 (tokens convention) outside [1, 4] for steps = 3 (at most steps + 1 = 4 "
                                "tokens per verify step); if that figure counts accepted drafts only, pass convention drafts"),
             (dict(accept=2.0, context="lots"), "context: expected a token count"),
             (dict(accept=2.0, steps=0), "steps: must be in 1..64, got 0"),
             (dict(accept=2.0, generation_tokens=0), "generation_tokens: must be in 1..100000000, got 0"),
             (dict(accept=2.0, calibrate="1,2"), "calibrate: expected BATCH,ACCEPT_LEN,TOKENS_PER_S or")]
    for kw, start in cases:
        with pytest.raises(FieldError) as info:
            specmodel.predict(**kw)  # type: ignore[arg-type]
        assert str(info.value).startswith(start), (kw, str(info.value))
        assert "--" not in str(info.value), str(info.value)
    with pytest.raises(SpecmodelError):
        specmodel.load_profile(REPO / "no-such-profile")


def test_costs_frame_is_the_cost_table():
    prof = specmodel.load_profile()
    frame = prof.costs_frame()
    assert len(frame) == len(prof.costs)
    row = frame[(frame.kind == "verify")].iloc[0]
    match = [r for r in prof.costs if r.key == (row.kind, row.batch, row.tokens, row.context_tokens)]
    assert len(match) == 1
    assert row.total_s == match[0].total_s
    assert math.isclose(row.allreduce_frac, match[0].allreduce_s / match[0].total_s)
    assert {"kind", "batch", "tokens", "context_tokens", "total_s", "allreduce_s", "compute_s"} <= set(frame.columns)


def test_prediction_frame_has_one_row_of_the_dict():
    pred = specmodel.predict(accept=3.0, batch=2)
    frame = pred.to_frame()
    assert len(frame) == 1
    assert frame.loc[0, "tokens_per_s"] == pred.figures.tokens_per_s
    assert frame.loc[0, "verdict"] == pred.outcome.verdict
    assert set(frame.columns) == set(pred.to_dict())


def test_import_specmodel_is_cheap_and_predict_needs_no_pandas():
    code = (
        "import sys\nimport specmodel\n"
        "assert 'specmodel.api' not in sys.modules\n"
        "p = specmodel.predict(accept=3.2)\n"
        "print(sorted(m for m in ('torch', 'matplotlib', 'pandas', 'scipy') if m in sys.modules))\n"
        "p.to_frame()\nprint('pandas' in sys.modules)"
    )
    r = run_python(code)
    assert r.stdout.split() == ["[]", "True"]
