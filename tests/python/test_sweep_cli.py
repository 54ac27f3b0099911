"""scripts/sweep's main on generated sweep files with stand-in binaries and mpiexec (fakes.py):
exit code 2 and its message for every bad file or option, before any output folder or launch;
--dry-run's commands and pruned plans; a local run's exit code."""
import json
import os
import signal
import subprocess
import sys
import time

import fakes
import pytest
from meshbench import launch
from meshbench.sweep_config import ROOT


def sweep(cli, capsys, *argv):
    rc = cli["sweep"].main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def env(tmp_path, fake_bin, fake_tools, monkeypatch):
    """(write(toml) -> path, --bin, --out, mpiexec, its log); no MESHBENCH_* from this shell."""
    for k in [k for k in os.environ if k.startswith("MESHBENCH_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("FAKE_LOG", fake_tools["mpiexec"][1])

    def write(text, name="s.toml"):
        path = tmp_path / name
        path.write_text(text)
        return path
    return write, fake_bin, tmp_path / "out", fake_tools["mpiexec"][0], fake_tools["mpiexec"][1]


@pytest.mark.parametrize("toml, extra, message", [
    ('binaries = ["all_reduce"\n', [], "not valid TOML"),
    ('binaries = ["allreduce"]\n', [], "sweep: sweep file: unknown binary 'allreduce'"),
    ('ranks = [2]\n', ["--rounds", "0"], "sweep: --rounds must be at least 1, got 0"),
    ('ranks = [2]\n', ["--only", "^zzz"], "sweep: --only '^zzz' matches no point"),
    ('ranks = [2]\n', ["--world", "4"], "sweep: --world, --model, --memory-per-rank, --predict, --top, --spread and "
                                        "the degree flags apply to step sweeps ([steps] or --steps)"),
    ('binaries = ["step"]\nranks = [4]\n[steps]\ntp = [4]\npp = [1]\nzero = [0]\n', [],
     "sweep: every one of the 1 step plans was pruned (reasons above)"),
])
def test_bad_files_exit_2_before_anything(cli, capsys, env, toml, extra, message):
    write, bin_dir, out, mpiexec, log = env
    rc, stdout, err = sweep(cli, capsys, write(toml), "--bin", bin_dir, "--out", out, "--mpiexec", mpiexec, *extra)
    assert rc == 2 and message in err
    assert not out.exists() and fakes.calls(log) == []


def test_pruned_plans_are_listed_before_the_refusal(cli, capsys, env):
    write, bin_dir, out, mpiexec, _ = env
    rc, stdout, _ = sweep(cli, capsys, write('binaries = ["step"]\nranks = [4]\n[steps]\ntp = [4]\npp = [1]\n'
                                             'zero = [0]\n'), "--bin", bin_dir, "--out", out)
    assert rc == 2 and stdout.splitlines() == ["pruned 1 plan(s) (1 refused):",
                                               "  step-r4-tp4cp1ep1dp1pp1-z0-m1-otcedp: tp=4 exceeds the 2 heads"]


def test_usage_errors(cli, capsys, env):
    with pytest.raises(SystemExit) as e:
        sweep(cli, capsys)
    assert e.value.code == 2 and "a sweep file (or --steps) is required" in capsys.readouterr().err
    write, bin_dir, out, _, _ = env
    rc, _, err = sweep(cli, capsys, write("ranks = [2]\n"), "--bin", out, "--dry-run")
    assert rc == 2 and f"{out}/mesh_info is missing" in err
    rc, _, err = sweep(cli, capsys, "--steps", "--bin", bin_dir, "--dry-run")
    assert rc == 2 and "sweep: --steps: give --world N (or run inside a Slurm allocation)" in err


def test_dry_run_prints_each_command(cli, capsys, env, monkeypatch):
    write, bin_dir, out, _, log = env
    monkeypatch.setenv("MESHBENCH_ITERS", "3")
    monkeypatch.setenv("NCCL_NET", "IB")  # a preset variable this shell has: the command unsets it
    rc, stdout, _ = sweep(cli, capsys, write('binaries = ["all_reduce"]\nfabrics = ["shm", "tcp-lo"]\nrounds = 2\n'),
                          "--bin", bin_dir, "--out", out, "--dry-run", "--mpiexec", "mpx")
    lines = stdout.splitlines()
    assert rc == 0 and fakes.calls(log) == [] and not out.exists()
    assert lines[0].startswith("sweep: note: MESHBENCH_ITERS=3 set here: every point's binary")
    assert lines[1] == (f"[1/2] all_reduce-r2-mpi-shm (0 of 2 rounds ok): env -u NCCL_NET UCX_TLS=self,sm MB_FABRIC=shm "
                        f"mpx -n 2 {bin_dir}/all_reduce_bench -b 8 -e 1M -f 2 -c 1 --backend mpi --mem host --tag shm "
                        f"-O {out}/all_reduce-r2-mpi-shm.h5")
    assert lines[2].startswith("[2/2] all_reduce-r2-mpi-tcp-lo (0 of 2 rounds ok): env -u NCCL_NET "
                               "UCX_TLS=self,tcp UCX_NET_DEVICES=lo MB_FABRIC=tcp-lo mpx -n 2")
    assert lines[3].startswith("rounds: 2 per point, interleaved (round 1 of every point, then round 2, ...)")


def test_step_flags_dry_run(cli, capsys, env):
    _, bin_dir, out, _, _ = env
    rc, stdout, _ = sweep(cli, capsys, "--steps", "--world", "4", "--zero", "0,1", "--memory-per-rank", "3K",
                          "--bin", bin_dir, "--out", out, "--dry-run")
    lines = stdout.splitlines()
    assert rc == 0
    assert lines[0] == "ranks=4: global batch 4 (auto: the smallest multiple of b x dp = 1 x {1, 2, 4})"
    assert sum(1 for ln in lines if ln.startswith("[")) == 6
    assert lines[1].startswith("[1/6] step-r4-mpi-shm-tp1cp1ep1dp2pp2-z0-1f1b-m2-otcedp (0 of 3 rounds ok):")
    assert "--zero 0 --micro-batches 2 --schedule 1f1b --vpp 1" in lines[1]
    assert "pruned 6 plan(s) (3 degenerate, 1 refused, 2 memory):" in lines


def test_local_run_exit_codes(cli, capsys, env, monkeypatch):
    write, bin_dir, out, mpiexec, log = env
    path = write('binaries = ["all_reduce", "all_gather"]\n')
    args = [path, "--bin", bin_dir, "--out", out, "--mpiexec", mpiexec, "--no-report"]
    rc, stdout, _ = sweep(cli, capsys, *args)
    assert rc == 0 and len(fakes.calls(log)) == 2
    assert "sweep: 2 points: 2 ran ok, 0 already done, 0 skipped, 0 failed" in stdout
    monkeypatch.setenv("FAKE_FAIL", f"{bin_dir}/all_gather_bench")
    rc, stdout, _ = sweep(cli, capsys, *args, "--force")
    assert rc == 1 and "1 ran ok, 0 already done, 0 skipped, 1 failed" in stdout
    rc, stdout, _ = sweep(cli, capsys, *args)  # resume: only the failed point runs again
    assert rc == 1 and [os.path.basename(c[2]) for c in fakes.calls(log)][4:] == ["all_gather_bench"]


def start_sweep(cmd, log, sleep="60"):
    """scripts/sweep started in the background, returned once its (sleeping) launch has begun."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, FAKE_SLEEP=sleep))
    deadline = time.monotonic() + 30
    while not fakes.calls(log) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fakes.calls(log), "the launch never started"
    time.sleep(0.5)  # the launch is past its log line and its first publish, asleep
    return proc


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_interrupt_kills_the_run_and_resumes(env, tmp_path, sig, code):
    """A signal during a run: the run's process group is killed, exit 128 + the signal (SIGTERM
    143, SIGINT 130) with how to resume; the run's file (status running) is kept; the same
    command again sets it aside in stale/ and runs that point."""
    write, bin_dir, out, mpiexec, log = env
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "sweep"), str(write('binaries = ["all_reduce"]\n')),
           "--bin", bin_dir, "--out", str(out), "--mpiexec", mpiexec, "--no-report"]
    proc = start_sweep(cmd, log)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert f"sweep: interrupted by signal {int(sig)}; re-run the same command to resume" in err
    res = out / "all_reduce-r2-mpi-shm.h5"
    assert launch.file_status(str(res)) == "running"
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, FAKE_SLEEP="0"), timeout=60)
    assert done.returncode == 0 and "1 ran ok" in done.stdout and len(fakes.calls(log)) == 2
    assert "(re-run: previous file running) ok (" in done.stdout and f"kept in {out}/stale" in done.stdout
    assert launch.file_status(str(res)) == "ok"
    (kept,) = [f for f in os.listdir(out / "stale") if f.endswith(".h5")]
    assert launch.file_status(str(out / "stale" / kept)) == "running"


def test_a_second_sweep_on_a_folder_in_use_exits_2(env):
    """Two sweeps into one folder: the second is refused at once, naming the first (pid, host,
    since), and touches nothing; the first's live file survives; after it, a sweep runs."""
    write, bin_dir, out, mpiexec, log = env
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "sweep"), str(write('binaries = ["all_reduce"]\n')),
           "--bin", bin_dir, "--out", str(out), "--mpiexec", mpiexec, "--no-report"]
    first = start_sweep(cmd, log, sleep="2")
    second = subprocess.run(cmd + ["--force"], capture_output=True, text=True, timeout=60)
    assert second.returncode == 2, second
    (line,) = second.stderr.splitlines()
    assert line.startswith(f"sweep: --out {out}: in use by scripts/sweep (pid {first.pid} on host "
                           f"{os.uname().nodename} since ")
    assert line.endswith("); one sweep per output folder at a time: wait for it to end, or give another --out")
    assert len(fakes.calls(log)) == 1 and second.stdout == ""
    stdout, _ = first.communicate(timeout=60)
    assert first.returncode == 0 and "1 ran ok" in stdout
    assert launch.file_status(str(out / "all_reduce-r2-mpi-shm.h5")) == "ok"
    assert not (out / "stale").exists() and not (out / ".sweep.lock").exists()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "1 already done" in again.stdout


def test_dry_run_estimates_from_earlier_runs_and_bounds_the_rest(cli, capsys, env):
    """No earlier run, no prediction: no estimate, each run bounded by its timeout (600 s); after
    one round ran here, the next rounds of that point take its recorded seconds."""
    write, bin_dir, out, mpiexec, _ = env
    path = write('binaries = ["all_reduce", "all_gather"]\n')
    rc, text, _ = sweep(cli, capsys, path, "--bin", bin_dir, "--out", out, "--dry-run")
    assert rc == 0 and text.splitlines()[-1] == (
        "estimated wall time: 2 run(s) without an estimate (no earlier run here, no prediction), each at most its "
        "timeout: at most 20 min 0 s in all (rule: scripts/meshbench/estimate.py, docs/sweeps.md)")
    assert sweep(cli, capsys, path, "--bin", bin_dir, "--out", out, "--mpiexec", mpiexec, "--no-report",
                 "--only", "all_reduce")[0] == 0
    rec = out / "points" / "all_reduce-r2-mpi-shm.json"
    seconds = json.loads(rec.read_text())["rounds"][0]["seconds"]
    rc, text, _ = sweep(cli, capsys, path, "--bin", bin_dir, "--out", out, "--dry-run", "--rounds", "3")
    from meshbench import estimate
    assert text.splitlines()[-1] == (
        f"estimated wall time: {estimate.duration(2 * seconds)} for 2 run(s) (2 from their point's earlier runs "
        "here); 3 run(s) without an estimate (no earlier run here, no prediction), each at most its timeout: at most "
        f"{estimate.duration(2 * seconds + 1800)} in all (rule: scripts/meshbench/estimate.py, docs/sweeps.md)")
