"""meshbench.slurm: the sbatch command lines and plan files of a sweep, round k's arrays after
round k-1's, runs in flight not submitted twice, and the in-job side (run_plan_entry), with
stand-in sbatch, squeue and mpiexec (fakes.py): nothing is submitted."""
import argparse
import json
import os

import fakes
import pytest
from meshbench import expand, slurm
from meshbench.sweep_config import ROOT

SBATCH_FILE = os.path.join(ROOT, "slurm", "sweep-array.sbatch")


def test_sbatch_argv_array_and_single():
    assert slurm.sbatch_argv("/o", 2, 4, 3, "/o/plan-r4-round2.json", True, False, max_parallel=2,
                             after=["101", "102"], extra=["-p", "gpu"]) == [
        "sbatch", "--parsable", "--ntasks=4", "--job-name=mb-sweep-r4-k2", "--output=/o/logs/slurm-%A_%a.out",
        "--array=0-2%2", "--dependency=afterany:101:102", "-p", "gpu", SBATCH_FILE, "/o/plan-r4-round2.json"]
    assert slurm.sbatch_argv("/o", None, 8, 5, "/o/plan-r8-all.json", False, True) == [
        "sbatch", "--parsable", "--ntasks=8", "--job-name=mb-sweep-r8", "--output=/o/logs/slurm-%j.out",
        SBATCH_FILE, "/o/plan-r8-all.json"]


def sweep_args(out, **kw):
    base = dict(out=out, bin="/b", force=False, slurm_single=False, sbatch_args="", max_parallel=0, wait=False,
                wait_timeout=5, no_report=True, mpiexec="mpiexec")
    return argparse.Namespace(**(base | kw))


@pytest.fixture
def grid(tmp_path, fake_tools, monkeypatch):
    """all_reduce at 2 and 4 ranks, 2 rounds; (points, out, sbatch log, mpiexec, mpiexec log)."""
    monkeypatch.setenv("FAKE_LOG", fake_tools["sbatch"][1])
    points = expand.expand({"ranks": [2, 4], "rounds": 2}, fakes.PRESETS, "/b", fakes.names(), check_binaries=False)
    out = str(tmp_path / "out")
    os.makedirs(out)
    return points, out, fake_tools["sbatch"][1], fake_tools["mpiexec"][0], fake_tools["mpiexec"][1]


def test_one_array_per_round_and_rank_count(grid, capsys):
    points, out, log, _, _ = grid
    assert slurm.run_slurm(points, sweep_args(out), {}, {}) == 0
    calls = fakes.calls(log)
    assert [(c[1], c[2], c[4]) for c in calls] == [
        ("--ntasks=2", "--job-name=mb-sweep-r2-k1", "--array=0-0"),
        ("--ntasks=4", "--job-name=mb-sweep-r4-k1", "--array=0-0"),
        ("--ntasks=2", "--job-name=mb-sweep-r2-k2", "--array=0-0"),
        ("--ntasks=4", "--job-name=mb-sweep-r4-k2", "--array=0-0")]
    # round 1 waits for nothing, round 2 for both of round 1's arrays
    assert [c[5] for c in calls] == [SBATCH_FILE, SBATCH_FILE, "--dependency=afterany:101:102",
                                     "--dependency=afterany:101:102"]
    plan = json.load(open(os.path.join(out, "plan-r4-round2.json")))
    assert (plan["round"], [p["id"] for p in plan["points"]], plan["bin"]) == (2, ["all_reduce-r4-mpi-shm"], "/b")
    assert json.load(open(os.path.join(out, "slurm-jobs.json"))) == {
        "101": ["all_reduce-r2-mpi-shm"], "102": ["all_reduce-r4-mpi-shm"],
        "103": ["all_reduce-r2-mpi-shm.r2"], "104": ["all_reduce-r4-mpi-shm.r2"]}
    text = capsys.readouterr().out
    assert "sweep: 2 points (4 runs: 2 rounds each), 0 already done or in flight, 4 to submit" in text
    assert f"sweep: submitted array job of 1 tasks 103 (ranks=2, round 2/2, after 101,102, plan {out}/plan-r2-round2.json)" \
        in text


def test_single_job_runs_every_round(grid, capsys):
    points, out, log, _, _ = grid
    assert slurm.run_slurm(points, sweep_args(out, slurm_single=True), {}, {}) == 0
    (call,) = fakes.calls(log)
    assert call == ["--parsable", "--ntasks=4", "--job-name=mb-sweep-r4", f"--output={out}/logs/slurm-%j.out",
                    SBATCH_FILE, f"{out}/plan-r4-all.json"]
    assert json.load(open(os.path.join(out, "slurm-jobs.json")))["101"] == [
        "all_reduce-r2-mpi-shm", "all_reduce-r4-mpi-shm", "all_reduce-r2-mpi-shm.r2", "all_reduce-r4-mpi-shm.r2"]
    assert "submitted job (every round, interleaved) 101 (ranks=4, plan" in capsys.readouterr().out


def test_in_flight_runs_are_not_submitted_again(grid, monkeypatch, capsys):
    points, out, log, _, _ = grid
    json.dump({"77": ["all_reduce-r2-mpi-shm", "all_reduce-r4-mpi-shm"]}, open(os.path.join(out, "slurm-jobs.json"), "w"))
    monkeypatch.setenv("FAKE_SQUEUE", "77")
    assert slurm.run_slurm(points, sweep_args(out), {}, {}) == 0
    text = capsys.readouterr().out
    assert "sweep: all_reduce-r2-mpi-shm is still queued or running in job 77: not submitted again" in text
    assert "2 already done or in flight, 2 to submit" in text
    # round 2 waits for the job still running round 1
    assert [c[5] for c in fakes.calls(log)] == ["--dependency=afterany:77"] * 2


def test_single_job_with_everything_in_flight(grid, monkeypatch, capsys):
    """--slurm-single again while the first job still runs every round: nothing to submit (it
    raised ValueError on max() of no points before)."""
    points, out, log, _, _ = grid
    json.dump({"77": [f"all_reduce-r{r}-mpi-shm{s}" for s in ("", ".r2") for r in (2, 4)]},
              open(os.path.join(out, "slurm-jobs.json"), "w"))
    monkeypatch.setenv("FAKE_SQUEUE", "77")
    assert slurm.run_slurm(points, sweep_args(out, slurm_single=True), {}, {}) == 0
    assert fakes.calls(log) == []
    assert "4 already done or in flight, 0 to submit" in capsys.readouterr().out


def test_jobs_run_their_plan_then_wait_collects(grid, monkeypatch, capsys):
    points, out, log, mpiexec, mlog = grid
    assert slurm.run_slurm(points, sweep_args(out), {}, {}) == 0
    # Inside the jobs: each array task runs its plan's point (the launcher: MB_LAUNCHER).
    monkeypatch.setenv("MB_LAUNCHER", "mpiexec")
    monkeypatch.setenv("FAKE_LOG", mlog)
    monkeypatch.setattr(slurm, "fabric_presets", lambda: fakes.PRESETS)
    for plan in ("plan-r2-round1", "plan-r4-round1", "plan-r2-round2", "plan-r4-round2"):
        assert slurm.run_plan_entry(os.path.join(out, plan + ".json"), 0, sweep_args(out, mpiexec=mpiexec)) == 0
    assert [os.path.basename(c[c.index("-O") + 1]) for c in fakes.calls(mlog)] == [
        "all_reduce-r2-mpi-shm.h5", "all_reduce-r4-mpi-shm.h5", "all_reduce-r2-mpi-shm.r2.h5",
        "all_reduce-r4-mpi-shm.r2.h5"]
    capsys.readouterr()
    # The same command again: every run done, nothing submitted, the summary says so.
    monkeypatch.setenv("FAKE_LOG", log)
    assert slurm.run_slurm(points, sweep_args(out, wait=True), {}, {}) == 0
    assert len(fakes.calls(log)) == 4
    text = capsys.readouterr().out
    assert "sweep: 2 points x 2 rounds = 4 runs: 0 ran ok, 4 already done, 0 skipped, 0 failed" in text


def test_wait_reports_a_job_that_left_no_record(grid, capsys):
    points, out, log, _, _ = grid
    assert slurm.run_slurm(points[:1], sweep_args(out, wait=True), {}, {}) == 1
    text = capsys.readouterr().out
    assert "[1/2] round 1/2 all_reduce ranks=2 mpi fabric=shm ... no record (job died?)" in text
    assert "0 ran ok, 0 already done, 0 skipped, 2 failed" in text
