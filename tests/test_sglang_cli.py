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
                  env={"SGLANG_STANDIN_FLAVOR": "0.5.5"}, timeout=120)
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
                  "import sys, specmodel.profile.sglang as h; print(h._STATE.finder is not None); sys.exit(5)",
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
