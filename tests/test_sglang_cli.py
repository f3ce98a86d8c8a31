"""``specmodel sglang`` end to end in subprocesses: the launcher patches a stand-in server's
spawned TP workers through the sitecustomize shim, passes its exit status through, and
``--summarize`` turns the logs into a profile; bad input is one line and exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from specmodel.schema.profile import load_profile
from tests.conftest import run_cli
from tests.rank_files import rank_file

STANDIN = Path(__file__).parent / "data" / "sglang_standin"


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    out = tmp_path_factory.mktemp("run") / "fwd"
    res = run_cli("sglang", "--out", str(out), "--", sys.executable, "serve.py", "3", "2", cwd=STANDIN,
                  env={"SGLANG_STANDIN_FLAVOR": "0.5.5"}, timeout=300)
    return res, out


@pytest.mark.slow  # starts the stand-in server
def test_launcher_patches_spawned_workers_and_passes_exit_status(launched: tuple[object, Path]) -> None:
    res, out = launched
    assert res.returncode == 3, res.stderr  # the server's own status
    assert "standin server done" in res.stdout
    names = sorted(p.name for p in out.iterdir())
    assert [n.split("-pid")[0] for n in names] == ["rank0-dp0-pp0", "rank1-dp0-pp0"], names
    for rank in (0, 1):
        lines = [json.loads(x) for x in rank_file(out, rank).read_text().splitlines()]
        assert lines[0]["type"] == "meta" and lines[0]["rank"] == str(rank) and lines[0]["tp_rank"] == rank
        assert f"-pid{lines[0]['pid']}." in rank_file(out, rank).name
        fw = [r for r in lines if r["type"] == "forward"]
        # 1 prefill + 3 iterations × (decode, 2 draft, verify, 2 draft-extend); IDLE not recorded
        assert len(fw) == 1 + 3 * 6
        assert {r["phase"] for r in fw} == {"extend", "decode", "draft", "verify", "draft_extend"}
        assert len({r["pid"] for r in lines if "pid" in r}) == 1  # one process per rank file
    assert "38 forwards in 2 rank file(s)" in res.stderr


@pytest.mark.slow  # starts the stand-in server
def test_summarize_writes_profile(launched: tuple[object, Path], tmp_path: Path) -> None:
    _, out = launched
    res = run_cli("sglang", "--summarize", str(out), "-o", str(tmp_path / "profiles" / "standin"))
    assert res.returncode == 0, res.stderr
    prof = load_profile(tmp_path / "profiles" / "standin")
    assert prof.name == "standin" and prof.tp == 2 and prof.source_kind == "ingested"
    assert {r.kind for r in prof.costs} == {"extend", "decode", "draft", "verify", "draft_extend"}
    verify = prof.rows("verify")[0]
    assert (verify.batch, verify.tokens, verify.samples) == (2, 8, 6)  # 3 per rank × 2 ranks
    assert f"wrote {tmp_path / 'profiles' / 'standin' / 'profile.json'}: 5 cost rows" in res.stdout
    assert "note: Timed with perf_counter" in res.stdout


@pytest.mark.slow  # starts the stand-in server
def test_refuses_to_mix_runs(launched: tuple[object, Path]) -> None:
    _, out = launched
    res = run_cli("sglang", "--out", str(out), "--", sys.executable, "-c", "print('never')")
    assert res.returncode == 2
    assert res.stderr.strip() == (f"specmodel: error: --out {out}: already holds {rank_file(out, 0).name} from an "
                                  "earlier run; "
                                  "choose an empty directory (runs must not mix)")
    assert "never" not in res.stdout


def test_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import sys\nprint('user sitecustomize ran', file=sys.stderr)\n")
    res = run_cli("sglang", "--out", str(tmp_path / "o"), "--", sys.executable, "-c",
                  "import sys, specmodel.engines.sglang.hook as h; print(h.STATE.finder is not None); sys.exit(5)",
                  env={"PYTHONPATH": str(user)})
    assert res.returncode == 5
    assert res.stdout.strip() == "True"  # the hook was installed in the child
    assert "user sitecustomize ran" in res.stderr


@pytest.mark.parametrize(("args", "message"), [
    ((), "give the server command after `--`"),
    (("--", "no-such-server-xyz"), "server command: 'no-such-server-xyz' not found"),
    (("--summarize", "nowhere-dir"), "-o/--output is required"),
    (("--summarize", "nowhere-dir", "-o", "p"), "nowhere-dir: not a directory"),
    (("-o", "p", "--", "python"), "-o/--name/--tp/--dp-rank only apply with --summarize"),
])
def test_bad_input_one_line_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    res = run_cli("sglang", *args, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("specmodel: error: ") and message in res.stderr


def test_summarize_malformed_log_names_file_and_line(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    good = {"schema": "specmodel.sglang_forward", "schema_version": 1, "type": "forward", "phase": "decode",
            "batch": 1, "tokens": 1, "forwards": 1, "runner": "target", "gpu_s": 0.01}
    (d / "rank0.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, "tokens": "many"}) + "\n")
    res = run_cli("sglang", "--summarize", str(d), "-o", str(tmp_path / "p"))
    assert res.returncode == 2
    assert res.stderr.strip() == (f"specmodel: error: {d / 'rank0.jsonl'}: line 2: tokens: "
                                  "expected an integer >= 1, got 'many'")
    assert not (tmp_path / "p").exists()  # nothing written


OLD = Path(__file__).parent / "data" / "sglang_hook_v1"  # v1 logs: forwards only, no scheduler step
HOST_WORK = "SGLang host work not measured: the cycle counts GPU forwards only (an optimistic cost)"
#: the qualification of a pair recorded before the calibration probe, with no step both servers ran
NOT_RECORDED = "the box's condition was not recorded for either server in profile old"


def test_old_recording_gives_a_verdict_qualified_by_the_unmeasured_host_work(tmp_path: Path) -> None:
    prof = tmp_path / "profiles" / "old"
    res = run_cli("sglang", "--summarize", str(OLD / "base"), "--summarize", str(OLD / "spec"), "-o", str(prof))
    assert res.returncode == 0, res.stderr
    assert "note: SGLang host work not measured (2 server run(s) logged no scheduler step" in res.stdout
    # the fixture's costs (README): decode 20 ms; a cycle 3 + 2 x 2 + 23 = 30 ms of forwards; at 3 tokens a
    # step the speedup is 3 x 20 / 30 = 2.00x: a GO on the forwards, but the host work between them is unknown
    args = ("predict", "--profile", str(prof), "--accept-hist", "1:100,2:200,3:300,4:400")
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr
    assert "speedup 2.00x" in res.stdout
    verdict = next(line for line in res.stdout.splitlines() if line.startswith("verdict"))
    # and neither recording carries the box's condition (a hook before the probe), nor a step both ran
    assert verdict.startswith(f"verdict      GO ({HOST_WORK}; {NOT_RECORDED}")
    assert "record both servers again under `specmodel sglang`" in res.stdout
    res = run_cli(*args, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "GO" and doc["verdict_label"].startswith(f"GO ({HOST_WORK}; {NOT_RECORDED}")
    assert [a["label"] for a in doc["assumed"]] == [HOST_WORK] and doc["measured"] is False
    # a per-cycle overhead given on the command line is the host work: nothing left to qualify
    res = run_cli(*args, "--overhead-ms", "2", "--json")
    doc = json.loads(res.stdout)
    assert doc["verdict_label"].startswith(f"GO ({NOT_RECORDED}") and doc["assumed"] == [] and doc["overhead_s"] == pytest.approx(0.002)


@pytest.mark.slow  # renders a PDF
def test_report_on_an_old_recording_names_the_unmeasured_host_work(tmp_path: Path) -> None:
    import pypdf

    from tests.pdf_layout import layout_problems

    prof = tmp_path / "old"
    assert run_cli("sglang", "--summarize", str(OLD / "base"), "--summarize", str(OLD / "spec"),
                   "-o", str(prof)).returncode == 0
    pdf = tmp_path / "old.pdf"
    res = run_cli("report", "--profile", str(prof), "--accept-hist", "1:100,2:200,3:300,4:400", "-o", str(pdf))
    assert res.returncode == 0, res.stderr
    doc = json.loads(pdf.with_suffix(".json").read_text())
    assert doc["verdict_label"].startswith(f"GO ({HOST_WORK}; {NOT_RECORDED}")
    page1 = " ".join(pypdf.PdfReader(str(pdf)).pages[0].extract_text().split())
    assert "SGLang host work not measured" in page1 and NOT_RECORDED in page1
    assert layout_problems(pdf) == []


def test_watch_says_the_unmeasured_host_work_beside_its_verdict() -> None:
    from specmodel.engines.sglang.hooklog import summarize
    from specmodel.live.watch import assess, spec_for
    from specmodel.live.window import Observed
    from specmodel.model.accept import from_histogram

    prof = summarize([OLD / "base", OLD / "spec"], name="old")
    obs = Observed(engine="sglang", dist=from_histogram({1: 100, 2: 200, 3: 300, 4: 400}), rates=None, steps=3,
                   batch=1.0, context_tokens=0.0, tokens_per_s=None, span_s=10.0, verify_steps=None, method="EAGLE3")
    r = assess(prof, obs, spec_for(prof, obs, None))
    assert r.verdict == "GO" and r.speedup == pytest.approx(2.0)
    assert HOST_WORK in r.notes and HOST_WORK in r.to_dict()["notes"]


@pytest.mark.slow  # starts the stand-in server twice
def test_spawned_workers_time_the_scheduler_step_and_the_summary_carries_it(tmp_path: Path) -> None:
    """The shim patches the scheduler in each spawned TP worker (its module imported there, after
    start-up): each worker's event loop writes its steps beside its forwards, and a profile of
    both servers prices the cycle with its host work (no qualification left)."""
    dirs = []
    for spec in ("0", "1"):
        out = tmp_path / f"run{spec}"
        res = run_cli("sglang", "--out", str(out), "--", sys.executable, "serve.py", "0", "2", cwd=STANDIN,
                      env={"SGLANG_STANDIN_LOOP": "scheduler", "SGLANG_STANDIN_SPEC": spec}, timeout=180)
        assert res.returncode == 0, res.stderr
        dirs.append(out)
        for rank in (0, 1):
            steps = [json.loads(x) for x in rank_file(out, rank).read_text().splitlines() if '"step"' in x]
            cycle = {"draft": 2, "verify": 1, "draft_extend": 1} if spec == "1" else {"decode": 1}
            # 3 decode steps a worker; one the box's probe ran in is left out (the first probe: the prefill's)
            assert 1 <= sum(s["phases"] == cycle for s in steps) <= 3
            for s in steps:  # one clock: the span holds its forwards, the rest is the host work
                assert s["clock"] == "perf_counter" and s["step_s"] >= s["forwards_s"] > 0
                assert s["overhead_s"] == pytest.approx(s["step_s"] - s["forwards_s"])
    prof = tmp_path / "p"
    res = run_cli("sglang", "--summarize", str(dirs[0]), "--summarize", str(dirs[1]), "-o", str(prof))
    assert res.returncode == 0, res.stderr
    assert "note: decode and verify rows carry the scheduler's host work" in res.stdout
    from specmodel.model.cyclecost import cycle_costs

    loaded = load_profile(prof)  # (a busy box's CPU timings: the costs themselves are not the point here)
    assert loaded.source.to_dict()["host_work"] == "in_rows" and loaded.source.host_work_in_rows
    assert cycle_costs(loaded, batch=2, spec=loaded.spec).assumptions == ()
