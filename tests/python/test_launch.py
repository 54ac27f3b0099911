"""meshbench.launch and meshbench.rounds: a point's command line, its status from how it ended,
its record, and the local loop (rounds interleaved, resume, a failed point's later rounds not
run) with a stand-in mpiexec that records each call and writes the result file (fakes.py)."""
import json
import os
import subprocess
import sys

import fakes
import h5py
import pytest
from meshbench import expand, launch, rounds
from meshbench.sweep_config import ROOT

NAMES = fakes.names()


def pts(doc, bin_dir="/b"):
    return expand.expand(doc, fakes.PRESETS, bin_dir, NAMES, check_binaries=False)


def test_collective_argv():
    (p,) = pts({"binaries": ["broadcast"], "iters": 5, "dtype": "double", "inplace": "yes", "ranks_per_node": 2,
                "time_limit": 30, "args": ["--verbose"], "meshes": [{"mesh": "tp=2", "group": "tp", "order": "dp-tp"}]})
    assert launch.point_argv(p, "/b", "/o", fakes.PRESETS, rnd=2) == [
        "/b/broadcast_bench", "-b", "8", "-e", "1M", "-f", "2", "-c", "1", "-n", "5", "-d", "double",
        "--backend", "mpi", "--mem", "host", "--mesh", "tp=2", "--group", "tp", "--order", "dp-tp",
        "--ranks-per-node", "2", "--time-limit", "30", "--tag", "shm", "-O", "/o/broadcast-r2-mpi-shm-tp2-tp.r2.h5",
        "--verbose"]  # broadcast under MPI is in-place only: no --inplace


def test_step_point_argv_puts_the_plan_last():
    p = {"id": "step-x", "binary": "step", "ranks": 4, "backend": "mpi", "fabric": "shm", "kind": "other",
         "mesh": {"degrees": {"tp": 2}, "group": "world", "text": "tp=2,dp=2", "order": "tp-cp-ep-dp-pp"},
         "cfg": {"args": ["--model", "tiny", "--zero", "1"]}, "plan_args": ["--zero", "0"], "rounds": 3}
    assert launch.point_argv(p, "/b", "/o", fakes.PRESETS) == [
        "/b/step_bench", "--mesh", "tp=2,dp=2", "--group", "world", "--order", "tp-cp-ep-dp-pp", "--tag", "shm",
        "-O", "/o/step-x.h5", "--model", "tiny", "--zero", "1", "--zero", "0"]


def test_launchers_and_environment():
    (p,) = pts({"fabrics": ["tcp-lo"], "env": {"FOO": 1}})
    cmd, setenv, unset = launch.launch(p, 1, "/b", "/o", fakes.PRESETS, "mpiexec", "/usr/bin/mpiexec")
    assert cmd[:3] == ["/usr/bin/mpiexec", "-n", "2"] and cmd[3] == "/b/all_reduce_bench"
    assert setenv == {"UCX_TLS": "self,tcp", "UCX_NET_DEVICES": "lo", "FOO": "1", "MB_FABRIC": "tcp-lo"}
    assert "NCCL_P2P_DISABLE" in unset and "UCX_TLS" not in unset
    cmd, _, _ = launch.launch(p, 1, "/b", "/o", fakes.PRESETS, "srun", "mpiexec")
    assert cmd[:4] == ["srun", "--mpi=pmi2", "--ntasks=2", "--kill-on-bad-exit=1"]
    netns = dict(fakes.PRESETS, shm=dict(fakes.PRESETS["shm"], launcher="netns"))
    (q,) = pts({})
    cmd, _, _ = launch.launch(q, 1, "/b", "/o", netns, "mpiexec", "mpiexec")
    assert cmd[0].endswith("scripts/netns-fabric") and cmd[1:5] == ["exec", "-n", "2", "--"]


def test_shell_line_unsets_what_this_shell_has():
    line = launch.shell_line(["mpiexec", "-n", "2", "/b/x bench"], {"UCX_TLS": "self,sm"}, ["NCCL_NET", "UCX_NET_DEVICES"],
                             environ={"UCX_NET_DEVICES": "eth0"})
    assert line == "env -u UCX_NET_DEVICES UCX_TLS=self,sm mpiexec -n 2 '/b/x bench'"


@pytest.mark.parametrize("rc, timed_out, hung, fst, want", [
    (0, False, False, "ok", ("ok", None)),
    (124, False, True, "ok", ("ok", f"hung at exit after writing its results; killed after {launch.EXIT_GRACE} s")),
    (124, True, False, "running", ("timeout", None)),
    (0, False, False, "running", ("bad-file (running)", None)),
    (137, False, False, "missing", ("killed by signal 9 (out of memory?)", None)),
    (-15, False, False, "missing", ("killed by signal 15", None)),
    (1, False, False, "failed", ("failed (wrong data)", None)),
    (2, False, False, "missing", ("bad usage", None)),
    (3, False, False, "missing", ("runtime fault", None)),
    (5, False, False, "missing", ("exit 5", None)),
])
def test_run_status(rc, timed_out, hung, fst, want):
    assert launch.run_status(rc, timed_out, hung, fst) == want


def test_file_status(tmp_path):
    p = str(tmp_path / "x.h5")
    assert launch.file_status(p) == "missing"
    open(p, "w").write("not hdf5")
    assert launch.file_status(p).startswith("unreadable (")
    with h5py.File(p, "w") as f:
        f.create_group("runs")
    assert launch.file_status(p) == "empty"
    with h5py.File(p, "a") as f:
        f.create_group("runs/a").attrs["status"] = "ok"
        f.create_group("runs/b").attrs["status"] = "killed"
    assert launch.file_status(p) == "killed"


def test_point_record_tops_with_the_first_bad_round():
    pt = {"id": "p", "rounds": 3}
    runs = {1: {"round": 1, "status": "ok", "start": "a", "run_ids": ["r1"], "rc": 0},
            2: {"round": 2, "status": "timeout", "start": "b", "run_ids": [], "rc": 124},
            3: {"round": 3, "status": "ok", "start": "c", "run_ids": ["r3"], "rc": 0}}
    rec = launch.point_record("/o", pt, runs)
    assert (rec["status"], rec["rc"], rec["rounds_ok"], rec["rounds_wanted"], rec["run_ids"]) == \
        ("timeout", 124, 2, 3, ["r1", "r3"])
    runs[2] = dict(runs[2], status="ok", run_ids=["r2"], start="d")
    rec = launch.point_record("/o", pt, runs)
    assert (rec["status"], rec["rounds_ok"], rec["run_ids"]) == ("ok", 3, ["r1", "r2", "r3"])


def test_run_order_interleaves_rounds():
    a, b, c = {"id": "a", "rounds": 3}, {"id": "b", "rounds": 1}, {"id": "c", "rounds": 2}
    assert [(p["id"], k) for p, k in rounds.run_order([a, b, c])] == \
        [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("c", 2), ("a", 3)]
    assert rounds.run_order([]) == []


# --- the local loop with fakes.MPIEXEC ------------------------------------------------------------
@pytest.fixture
def local(tmp_path, fake_tools, monkeypatch):
    """(points: all_reduce and all_gather at 2 ranks, 2 rounds each; out dir; mpiexec; its log)."""
    mpiexec, log = fake_tools["mpiexec"]
    monkeypatch.setenv("FAKE_LOG", log)
    points = pts({"binaries": ["all_reduce", "all_gather"], "rounds": 2}, str(tmp_path / "bin"))
    return points, str(tmp_path / "out"), mpiexec, log


def launched(log):
    """(binary, output file name) of each mpiexec call, in order."""
    return [(os.path.basename(a[2]), os.path.basename(a[a.index("-O") + 1])) for a in fakes.calls(log)]


def test_rounds_run_interleaved_and_resume(local, capsys):
    points, out, mpiexec, log = local
    recs = rounds.run_rounds(points, out, "/b", fakes.PRESETS, "mpiexec", mpiexec)
    assert [r["status"] for r in recs] == ["ok"] * 4
    assert launched(log) == [("all_reduce_bench", "all_reduce-r2-mpi-shm.h5"),
                             ("all_gather_bench", "all_gather-r2-mpi-shm.h5"),
                             ("all_reduce_bench", "all_reduce-r2-mpi-shm.r2.h5"),
                             ("all_gather_bench", "all_gather-r2-mpi-shm.r2.h5")]
    rec = json.load(open(os.path.join(out, "points", "all_gather-r2-mpi-shm.json")))
    assert (rec["rounds_ok"], rec["rounds_wanted"], [r["round"] for r in rec["rounds"]]) == (2, 2, [1, 2])
    assert rec["run_ids"] == ["fake", "fake"] and rec["cmd"].startswith(mpiexec + " -n 2 /b/all_gather_bench")
    assert len(open(os.path.join(out, "sweep-log.jsonl")).readlines()) == 4
    text = capsys.readouterr().out
    assert "[3/4] round 2/2 all_reduce ranks=2 mpi fabric=shm ... ok (" in text
    # Resume: nothing to do; then a lost round file is run again, and only it.
    os.remove(log)
    assert [r["status"] for r in rounds.run_rounds(points, out, "/b", fakes.PRESETS, "mpiexec", mpiexec)] == \
        ["done"] * 4
    assert launched(log) == []
    os.remove(os.path.join(out, "all_gather-r2-mpi-shm.r2.h5"))
    recs = rounds.run_rounds(points, out, "/b", fakes.PRESETS, "mpiexec", mpiexec)
    assert [r["status"] for r in recs] == ["done", "done", "done", "ok"]
    assert launched(log) == [("all_gather_bench", "all_gather-r2-mpi-shm.r2.h5")]
    assert "... skip (done)" in capsys.readouterr().out
    assert rounds.summarise(recs, 2, out) == 0
    assert capsys.readouterr().out.startswith(
        f"sweep: 2 points x 2 rounds = 4 runs: 1 ran ok, 3 already done, 0 skipped, 0 failed   ({out})")


def test_a_failed_round_stops_its_point(local, monkeypatch, capsys):
    points, out, mpiexec, log = local
    monkeypatch.setenv("FAKE_FAIL", "/b/all_gather_bench")
    recs = rounds.run_rounds(points, out, "/b", fakes.PRESETS, "mpiexec", mpiexec)
    assert [(r["id"], r["round"], r["status"]) for r in recs] == [
        ("all_reduce-r2-mpi-shm", 1, "ok"), ("all_gather-r2-mpi-shm", 1, "runtime fault"),
        ("all_reduce-r2-mpi-shm", 2, "ok"), ("all_gather-r2-mpi-shm", 2, "not run")]
    assert len(fakes.calls(log)) == 3
    capsys.readouterr()
    assert rounds.summarise(recs, 2, out) == 1
    text = capsys.readouterr().out
    assert "2 ran ok, 0 already done, 0 skipped, 1 failed, 1 not run (their point failed a round)" in text
    assert "all_gather-r2-mpi-shm round 1" in text and "exit 3    runtime fault" in text
    rec = json.load(open(os.path.join(out, "points", "all_gather-r2-mpi-shm.json")))
    assert (rec["status"], rec["rc"], rec["rounds_ok"]) == ("runtime fault", 3, 0)


def test_srun_skips_a_point_larger_than_the_allocation(local, monkeypatch):
    points, out, mpiexec, log = local
    monkeypatch.setenv("SLURM_NTASKS", "1")
    rec = launch.run_point(points[0], "/b", out, fakes.PRESETS, "srun", mpiexec)
    assert (rec["status"], rec["reason"]) == \
        ("skipped", "2 ranks do not fit this allocation's 1 tasks (submit it with --slurm)")
    assert fakes.calls(log) == []


# --- a round's earlier files: never removed, never touched while their lock is held ---------------
def holder(lock_path):
    """A process holding lock_path as a live binary does (its name in it); returned once it holds it."""
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from meshbench import locks; "
            "lk, who = locks.take(sys.argv[1], 'step_bench (pid 77 on host n1 since then)'); "
            "assert lk, who; print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, lock_path, os.path.join(ROOT, "scripts")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def running_file(path):
    with h5py.File(path, "w") as f:
        f.create_group("runs/live").attrs["status"] = "running"
    open(path[:-3] + ".jsonl", "w").write('{"size": 8}\n')


def test_a_file_being_written_is_left_alone(local):
    """A round whose file another process is writing (its .lock held, status running): nothing
    launched, nothing moved or removed, the round `skipped` naming the holder."""
    points, out, mpiexec, log = local
    os.makedirs(out)
    res = launch.result_path(out, points[0])
    running_file(res)
    before = open(res, "rb").read()
    proc = holder(res + ".lock")
    try:
        rec = launch.run_point(points[0], "/b", out, fakes.PRESETS, "mpiexec", mpiexec)
    finally:
        proc.communicate("")
    assert rec["status"] == "skipped" and fakes.calls(log) == []
    assert rec["reason"] == ("all_reduce-r2-mpi-shm.h5 is in use by step_bench (pid 77 on host n1 since then): "
                             "left alone (run the sweep again once that run has ended)")
    assert open(res, "rb").read() == before and os.path.exists(res[:-3] + ".jsonl")
    assert not os.path.exists(os.path.join(out, "stale"))


def test_earlier_files_are_set_aside_never_removed(local):
    """A killed job's files (status running, no lock held) and, with --force, a finished ok round
    are moved to <out>/stale/<name>.<time>.{h5,jsonl,log}; the report of <out> leaves them out."""
    points, out, mpiexec, log = local
    os.makedirs(os.path.join(out, "logs"))
    res = launch.result_path(out, points[0])
    running_file(res)
    open(os.path.join(out, "logs", "all_reduce-r2-mpi-shm.log"), "w").write("old log\n")
    open(res + ".lock", "w").write("step_bench (pid 1 on host gone since then)\n")  # left by a SIGKILL
    rec = launch.run_point(points[0], "/b", out, fakes.PRESETS, "mpiexec", mpiexec)
    assert rec["status"] == "ok" and launch.file_status(res) == "ok"
    stale = sorted(os.listdir(os.path.join(out, "stale")))
    assert [os.path.splitext(f)[1] for f in stale] == [".h5", ".jsonl", ".log"]
    assert rec["set_aside"] == [os.path.join(out, "stale", f) for f in stale]
    assert launch.file_status(os.path.join(out, "stale", stale[0])) == "running"
    assert open(os.path.join(out, "stale", stale[2])).read() == "old log\n"
    from meshbench import reader
    assert reader.expand_paths([out]) == [res]
    assert reader.expand_paths([os.path.join(out, "stale")]) == [os.path.join(out, "stale", stale[0])]
    # --force runs a finished ok round again: its file is set aside too, under a name not taken.
    recs = rounds.run_rounds(points[:1], out, "/b", fakes.PRESETS, "mpiexec", mpiexec, force=True)
    assert [r["status"] for r in recs] == ["ok", "ok"]
    h5s = [f for f in os.listdir(os.path.join(out, "stale")) if f.endswith(".h5")]
    assert sorted(launch.file_status(os.path.join(out, "stale", f)) for f in h5s) == ["ok", "running"]
