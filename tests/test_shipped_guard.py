"""Nothing shipped or reference is ever written, and `-o` onto an existing
profile follows `profile --name`'s rule: refused unless specmodel wrote it, then the old one kept."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from specmodel.errors import SpecmodelError
from specmodel.io import PACKAGE_DIR, atomic_write_text, replace_dir
from specmodel.schema.profile import Profile, load_profile, save_profile
from tests.conftest import DATA, REFERENCE, REPO

PCIE8 = str(DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt")
SHIPPED = REFERENCE / "profile.json"


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def shipped_untouched():
    """Fails the test if the reference changed, and puts the bytes back so one failure cannot spread."""
    before = SHIPPED.read_bytes()
    yield
    after = SHIPPED.read_bytes()
    if after != before:
        SHIPPED.write_bytes(before)
        pytest.fail("the shipped reference profile was rewritten")


def test_nccl_tests_in_place_onto_the_shipped_reference_is_refused(cli, shipped_untouched, tmp_path):
    # the repro, run as a user would from a checkout, whose profiles/ links into the package: here a
    # folder of the test's own holding the same link (the checkout's profiles/ is the demo's, not the tests')
    link = "profiles/kimi-k2.5-int4-tp8-pcie"
    assert (REPO / link).is_symlink() and (REPO / link).resolve() == REFERENCE
    (tmp_path / "profiles").mkdir()
    (tmp_path / link).symlink_to(REFERENCE)
    r = cli("nccl-tests", PCIE8, "--profile", link, "-o", link, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "-o: " in r.stderr and "never written" in r.stderr
    assert not list(REFERENCE.parent.glob(".*staging"))  # no work left behind in the package either


@pytest.mark.parametrize("target", [str(REFERENCE), str(SHIPPED), str(REFERENCE / "other.json")])
def test_every_profile_writer_refuses_the_package(cli, target, shipped_untouched):
    assert cli("nccl-tests", PCIE8, "--profile", str(REFERENCE), "-o", target).returncode == 2
    assert cli("nccl-tests", PCIE8, "-o", target).returncode == 2  # the fit-only writer too
    with pytest.raises(SpecmodelError, match="inside the installed specmodel package"):
        save_profile(load_profile(REFERENCE), target)


def test_ingest_onto_the_shipped_reference_is_refused(cli, shipped_untouched):
    r = cli("ingest", str(DATA / "kineto_cpu_gloo_tp2"), "-o", str(REFERENCE))
    assert r.returncode == 2 and "never written" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_io_writers_refuse_the_package(tmp_path, shipped_untouched):
    with pytest.raises(SpecmodelError, match="never written"):
        atomic_write_text(PACKAGE_DIR / "reference" / "x.txt", "x")
    link = tmp_path / "ln"
    link.symlink_to(REFERENCE)
    with pytest.raises(SpecmodelError, match="never written"):  # through a link, as profiles/ is
        atomic_write_text(link / "profile.json", "{}")
    with pytest.raises(SpecmodelError, match="never written"):
        replace_dir(link, lambda stage: None)
    assert not (PACKAGE_DIR / "reference" / "x.txt").exists()


def test_accept_and_report_outputs_refuse_the_package(cli, shipped_untouched):
    log = str(DATA / "logs_sglang_055" / "server.log")
    r = cli("accept", log, "-o", str(REFERENCE / "accept.json"))
    assert r.returncode == 2 and "never written" in r.stderr, r.stderr
    r = cli("report", "--profile", str(REFERENCE), "--accept-len", "2.0", "-o", str(REFERENCE / "r.pdf"))
    assert r.returncode == 2 and "never written" in r.stderr, r.stderr
    assert sorted(p.name for p in REFERENCE.iterdir()) == ["profile.json"]


def _measured(tmp_path: Path) -> Path:
    prof = load_profile(REFERENCE)
    out = tmp_path / "mine"
    from dataclasses import replace

    save_profile(replace(prof, name="mine", source={"kind": "derived", "description": "a measured-like copy"}), out)
    (out / "costs.csv").write_text("kept\n")
    return out


def test_in_place_onto_own_profile_keeps_the_old_one(cli, tmp_path):
    mine = _measured(tmp_path)
    old = (mine / "profile.json").read_bytes()
    r = cli("nccl-tests", PCIE8, "--profile", str(mine), "-o", str(mine))
    assert r.returncode == 0, r.stderr
    assert "updated the profile in place" in r.stdout and f"kept in {mine / 'previous'}" in r.stdout
    assert (mine / "previous" / "profile.json").read_bytes() == old
    assert (mine / "previous" / "costs.csv").read_text() == "kept\n"
    new = load_profile(mine)
    assert new.allreduce_fit is not None and new.allreduce_fit.beta_bytes_per_s != 25e9
    # again: one generation is kept, not a chain
    assert cli("nccl-tests", PCIE8, "--profile", str(mine), "-o", str(mine)).returncode == 0
    assert not (mine / "previous" / "previous").exists()
    assert load_profile(mine / "previous").allreduce_fit == new.allreduce_fit


def test_onto_something_specmodel_did_not_write_is_refused(cli, tmp_path):
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("mine\n")
    r = cli("nccl-tests", PCIE8, "--profile", str(REFERENCE), "-o", str(foreign))
    assert r.returncode == 2 and "not a profile written by specmodel" in r.stderr, r.stderr
    assert sorted(os.listdir(foreign)) == ["todo.txt"]
    # a copy of the reference is still the reference: refused too
    copy = tmp_path / "refcopy"
    copy.mkdir()
    (copy / "profile.json").write_bytes(SHIPPED.read_bytes())
    r = cli("nccl-tests", PCIE8, "--profile", str(copy), "-o", str(copy))
    assert r.returncode == 2 and "holds the reference profile" in r.stderr, r.stderr
    assert _digest(copy / "profile.json") == _digest(SHIPPED)
    # the fit-only writer never replaces a profile with a fit document
    mine = _measured(tmp_path)
    r = cli("nccl-tests", PCIE8, "-o", str(mine / "profile.json"))
    assert r.returncode == 2 and "holds a specmodel profile" in r.stderr, r.stderr
    assert isinstance(load_profile(mine), Profile)


def test_replace_dir_failure_leaves_the_old_directory(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / "a").write_text("old")

    def boom(stage: Path) -> None:
        (stage / "a").write_text("new")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replace_dir(d, boom)
    assert (d / "a").read_text() == "old" and sorted(os.listdir(tmp_path)) == ["p"]


def test_replace_dir_interrupted_between_renames_is_finished_by_the_next_write(tmp_path):
    # what a SIGKILL between the two renames leaves: the old one moved into the complete stage
    stage = tmp_path / ".p.p999999.abc.staging"
    (stage / "previous").mkdir(parents=True)
    (stage / "previous" / "a").write_text("old")
    (stage / "a").write_text("new")
    (stage / ".replaces").write_text("p\n")
    replace_dir(tmp_path / "q", lambda s: None)  # the next directory write in that folder recovers it
    assert (tmp_path / "p" / "a").read_text() == "new"
    assert (tmp_path / "p" / "previous" / "a").read_text() == "old"
    assert not stage.exists() and not (tmp_path / "p" / ".replaces").exists()
