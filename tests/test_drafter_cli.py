"""``specmodel check-drafter`` run as a user runs it (subprocess): table, --json, exit codes 0/1/2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.conftest import run_cli
from tests.test_drafter_checks import published_pair
from tests.test_drafter_safetensors import drafter_config, drafter_tensors, write_drafter, write_target


def test_good_drafter_exit_0_table(tmp_path: Path) -> None:
    d, t = write_drafter(tmp_path / "d"), write_target(tmp_path / "t")
    r = run_cli("check-drafter", "--drafter", str(d), "--target", str(t))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith("PASS  d2t.well_formed") and "512 entries, delta format" in line for line in lines)
    assert lines[-1].startswith("result     PASS  (0 FAIL, 0 WARN, 16 PASS)")
    assert r.stderr == ""


def test_published_case_exit_1_json(tmp_path: Path) -> None:
    d, t, ref, k2, _ = published_pair(tmp_path)
    # the published drafter also shipped max_position_embeddings 131072 for a 262144 target
    cfg = json.loads((d / "config.json").read_text())
    cfg["max_position_embeddings"] = 131072
    (d / "config.json").write_text(json.dumps(cfg))
    outside = int(np.setdiff1d(np.arange(1000), k2)[0])
    freq = tmp_path / "freq.csv"
    freq.write_text(f"token_id,count\n{k2[0]},900\n{k2[1]},50\n{outside},50\n")

    r = run_cli("check-drafter", "--drafter", str(d), "--target", str(t), "--reference-drafter", str(ref),
                "--token-freq", str(freq), "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)  # stdout is pure JSON even when failing
    assert doc["status"] == "FAIL"
    by_name = {f["name"]: f for f in doc["findings"]}
    assert by_name["d2t.reference_mismatch"]["values"]["slots_differ"] == 31748
    shapes = by_name["reference.shapes"]  # identical shapes; only the context length in config.json differs
    assert shapes["status"] == "WARN"
    assert shapes["message"] == "same 15 tensors, shapes and dtypes; config differs in max_position_embeddings"
    assert doc["acceptance_ceiling"] == 0.95
    assert by_name["vocab.coverage"]["values"]["top_uncovered"] == [[outside, 50.0]]
    assert r.stderr.strip() == "specmodel: check-drafter: 2 FAIL: config.max_position_embeddings, d2t.reference_mismatch"

    table = run_cli("check-drafter", "--drafter", str(d), "--target", str(t), "--reference-drafter", str(ref))
    assert table.returncode == 1
    assert "FAIL  d2t.reference_mismatch" in table.stdout
    assert "31,748 of 32,000 d2t slots differ" in table.stdout


def test_bad_input_exit_2_one_line(tmp_path: Path) -> None:
    t = write_target(tmp_path / "t")
    tensors = drafter_tensors()
    tensors["d2t"] = tensors["d2t"].astype(np.float32)
    d = write_drafter(tmp_path / "d", drafter_config(), tensors)
    r = run_cli("check-drafter", "--drafter", str(d), "--target", str(t))
    assert r.returncode == 2
    assert r.stdout == ""
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specmodel: error: ")
    assert "d2t: dtype F32, expected an integer tensor" in err[0]
    assert "Traceback" not in r.stderr

    missing = run_cli("check-drafter", "--drafter", str(tmp_path / "nope"), "--target", str(t))
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"specmodel: error: {tmp_path / 'nope'}: drafter directory not found"


def test_config_json_instead_of_its_directory_hints_the_directory(tmp_path: Path) -> None:
    # `--target …/config.json` is refused with the directory to pass instead
    d, t = write_drafter(tmp_path / "d"), write_target(tmp_path / "t")
    r = run_cli("check-drafter", "--drafter", str(d), "--target", str(t / "config.json"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"pass the directory holding it: --target {t}" in r.stderr
    r = run_cli("check-drafter", "--drafter", str(d / "config.json"), "--target", str(t))
    assert r.returncode == 2 and f"--drafter {d}" in r.stderr, r.stderr
    # the hint is right: the command it suggests works
    assert run_cli("check-drafter", "--drafter", str(d), "--target", str(t)).returncode == 0


def test_swapped_drafter_and_target_hint_the_swap(tmp_path: Path) -> None:
    d, t = write_drafter(tmp_path / "d"), write_target(tmp_path / "t")
    r = run_cli("check-drafter", "--drafter", str(t), "--target", str(d))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "no *.safetensors files" in r.stderr
    assert "--drafter and --target look swapped" in r.stderr and f"try --drafter {d} --target {t}" in r.stderr
    # a drafter directory that simply lacks weights is not called a swap
    empty = tmp_path / "e"
    empty.mkdir()
    (empty / "config.json").write_text((d / "config.json").read_text())
    r = run_cli("check-drafter", "--drafter", str(empty), "--target", str(t))
    assert r.returncode == 2 and "look swapped" not in r.stderr and "EAGLE-3 checkpoint directory" in r.stderr, r.stderr
