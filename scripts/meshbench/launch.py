"""meshbench.launch: one run of a sweep point: its command line (the launcher: mpiexec -n N,
srun, or scripts/netns-fabric exec; the fabric's variables; the binary and its flags), what
--dry-run prints for it, running it with a timeout and a watch for a launch hung at exit, and
its record in <out>/points/<id>.json and <out>/sweep-log.jsonl.

A run is one round of a point: round 1 writes <out>/<id>.h5, round k > 1 <out>/<id>.r<k>.h5.
Not here: which runs are due and in what order (rounds), Slurm (slurm).
"""
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import time

from . import locks, reader
from .sweep_config import ROOT, fabric_vars

STATUS_DONE = "ok"


def point_argv(pt, bin_dir, out_dir, presets, rnd=1):
    """The binary's command line for round `rnd` of one point (without the launcher)."""
    c = pt["cfg"]
    exe = os.path.join(bin_dir, pt["binary"] + "_bench")
    argv = [exe]
    collective = pt.get("kind") == "collective"
    if collective:
        argv += ["-b", str(c["min_bytes"]), "-e", str(c["max_bytes"]), "-f", str(c["step_factor"]),
                 "-c", str(c["check"])]
        for key, flag in (("iters", "-n"), ("warmup", "-w")):  # given: exactly that many
            if c.get(key) is not None:
                argv += [flag, str(c[key])]
        for key, flag in (("dtype", "-d"), ("op", "-o"), ("inplace", "--inplace"), ("timing", "--timing")):
            # MPI_Bcast has one buffer: under MPI broadcast is in-place only, whatever inplace says.
            if key == "inplace" and pt["binary"] == "broadcast" and pt["backend"] == "mpi":
                continue
            if c.get(key) is not None:
                argv += [flag, str(c[key])]
    if collective:
        argv += ["--backend", pt["backend"], "--mem", str(c.get("mem") or presets[pt["fabric"]]["mem"])]
    # step_bench takes its model and strategy flags from `args`; the sweep adds the mesh (when
    # given), the tag and the output file, which every binary shares.
    if pt["mesh"] is not None:
        argv += ["--mesh", pt["mesh"]["text"], "--group", pt["mesh"]["group"]]
        if pt["mesh"].get("order"):
            argv += ["--order", pt["mesh"]["order"]]
    if c.get("ranks_per_node"):
        argv += ["--ranks-per-node", str(c["ranks_per_node"])]
    if c.get("time_limit"):
        argv += ["--time-limit", str(c["time_limit"])]
    argv += ["--tag", pt["fabric"], "-O", result_path(out_dir, pt, rnd)]
    argv += [str(a) for a in c.get("args", [])]
    return argv + pt.get("plan_args", [])  # a step sweep's plan: last, so it wins over args


def run_name(pt, rnd=1):
    """A run's name: the point id for round 1, <id>.r<k> for round k > 1 (its files: <name>.h5,
    logs/<name>.log; its key in slurm-jobs.json). One file per round, so a round that fails is
    removed and run again without touching the others, and no two runs ever write one file."""
    return pt["id"] if rnd == 1 else f"{pt['id']}.r{rnd}"


def result_path(out_dir, pt, rnd=1):
    return os.path.join(out_dir, run_name(pt, rnd) + ".h5")


def rounds_status(out_dir, pt):
    """[file_status of round 1, ..., round R] of one point."""
    return [file_status(result_path(out_dir, pt, k)) for k in range(1, pt["rounds"] + 1)]


def launch(pt, rnd, bin_dir, out_dir, presets, launcher, mpiexec):
    """One run as (argv with its launcher, variables it sets, variables it unsets): what
    run_point starts and what --dry-run prints, so the two never differ."""
    preset = presets[pt["fabric"]]
    setenv = dict(preset["env"])
    setenv.update({str(k): str(v) for k, v in pt["cfg"].get("env", {}).items()})
    setenv["MB_FABRIC"] = pt["fabric"]
    unset = sorted(v for v in fabric_vars(presets) if v not in setenv)
    argv = point_argv(pt, bin_dir, out_dir, presets, rnd)
    r = str(pt["ranks"])
    if preset["launcher"] == "netns":
        cmd = [os.path.join(ROOT, "scripts", "netns-fabric"), "exec", "-n", r, "--"] + argv
    elif launcher == "srun":
        cmd = ["srun", "--mpi=pmi2", f"--ntasks={r}", "--kill-on-bad-exit=1"] + argv
    else:
        cmd = [mpiexec, "-n", r] + argv
    return cmd, setenv, unset


def shell_line(cmd, setenv, unset, environ=None):
    """A command line that runs as pasted into a POSIX shell with `environ` (default: this
    process's): `env -u` for the preset variables set there that this run must not see, then
    the run's variables, the launcher and the binary."""
    environ = os.environ if environ is None else environ
    drop = [v for v in unset if v in environ]
    pre = ["env"] + [x for v in drop for x in ("-u", v)] if drop else []
    return " ".join([shlex.quote(a) for a in pre] + [f"{k}={shlex.quote(v)}" for k, v in setenv.items()]
                    + [shlex.quote(a) for a in cmd])


def file_status(path):
    """'ok' if every run in the file finished ok; else the first other status, or 'missing'."""
    if not os.path.exists(path):
        return "missing"
    try:
        statuses = reader.run_statuses(path)
    except Exception as e:  # a file cut short by a kill may not even open
        return f"unreadable ({type(e).__name__})"
    if not statuses:
        return "empty"
    for s in statuses.values():
        if s != STATUS_DONE:
            return s or "unknown"
    return STATUS_DONE


# A round run again sets its earlier files aside here, under <out>: never removed, and out of
# the way of `scripts/report <out>` (reader.expand_paths leaves a folder's stale/ out).
STALE_DIR = "stale"


def set_aside(out_dir, res, log, force=False):
    """Before round file `res` is written again: take its lock as the binaries do
    (FILE.h5.lock, locks.take), so no run can start on it meanwhile, and move its earlier
    .h5, .jsonl and log to <out>/stale/<name>.<UTC time of the last write>.<ext>. Returns
    ("run", [the paths moved]) when the round may run; ("done", None) when the file is finished
    and ok after all (another process ran it since the caller looked; with `force` it is set
    aside too); ("busy", holder) when another process holds the lock (a live run: nothing is
    touched). A file is never removed: a job killed outright (status `running`, no lock held)
    keeps its last publish in stale/."""
    try:
        lock, holder = locks.take(res + ".lock", locks.me("scripts/sweep"))
    except OSError:  # nothing is touched; the binary cannot lock it either and says why (exit 2)
        return "run", []
    if lock is None:
        return "busy", holder
    try:
        if not force and file_status(res) == STATUS_DONE:
            return "done", None
        paths = [p for p in (res, res[:-3] + ".jsonl", log) if os.path.exists(p)]
        if not paths:
            return "run", []
        when = max(os.path.getmtime(p) for p in paths)
        stamp = datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
        stale = os.path.join(out_dir, STALE_DIR)
        os.makedirs(stale, exist_ok=True)
        base = os.path.basename(res)[:-3]
        for n in range(1, 1000):  # a name not taken: .2, .3 after the time
            tag = stamp if n == 1 else f"{stamp}.{n}"
            dest = {p: os.path.join(stale, f"{base}.{tag}{os.path.splitext(p)[1]}") for p in paths}
            if not any(os.path.exists(d) for d in dest.values()):
                break
        for p, d in dest.items():
            os.replace(p, d)
        return "run", sorted(dest.values())
    finally:
        lock.release()


def describe(pt):
    m = pt["mesh"]
    mesh = f" mesh={m['text']} group={m['group']}" if m else ""
    plan = f" order={m['order']} " + " ".join(pt["plan_args"]) if pt.get("plan_args") is not None else ""
    return f"{pt['binary']} ranks={pt['ranks']} {pt['backend']} fabric={pt['fabric']}{mesh}{plan}"


# --- running one point -----------------------------------------------------------------------
class Interrupted(BaseException):
    """Raised by the sweep's signal handler (rounds.run_local). It unwinds the stack, so every
    lock taken on the way (Popen.wait's among them) is released before anything waits again;
    run_point kills its launch's process group on the way out. A BaseException, so no
    `except Exception` on the way swallows it."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum



def kill_group(proc, grace=10):
    """TERM, then KILL, the process group this script started for one point."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# The binaries print "# results: FILE ..." once their files are closed. A launch still alive
# EXIT_GRACE seconds after that is stuck in MPI_Finalize (MPICH 4.0 over UCX TCP hangs there in
# some runs, docs/testing.md) and is killed instead of waiting for the point's timeout.
EXIT_GRACE = float(os.environ.get("MB_EXIT_GRACE", "20"))
DONE_LINE = re.compile(rb"^# results: ", re.M)


def _wait_point(proc, log, timeout, grace):
    """Wait for one launch. Returns (exit code, timed out, killed while hung at exit)."""
    t0 = time.monotonic()
    done_at = None
    pos = 0
    while True:
        try:
            return proc.wait(timeout=0.5), False, False
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if done_at is None:
            with open(log, "rb") as fh:
                fh.seek(max(0, pos - 64))
                chunk = fh.read()
                pos = fh.tell()
            if DONE_LINE.search(chunk):
                done_at = now
        elif now - done_at > grace:
            kill_group(proc)
            return 124, False, True
        if timeout and now - t0 > timeout:
            kill_group(proc)
            return 124, True, False


def skip_reason(pt, preset, launcher):
    """(exit code, reason) when this run cannot start here, else None: a netns fabric whose
    `scripts/netns-fabric check` fails, or more ranks than the Slurm allocation holds."""
    if preset["launcher"] == "netns":
        chk = subprocess.run([os.path.join(ROOT, "scripts", "netns-fabric"), "check"],
                             capture_output=True, text=True)
        if chk.returncode != 0:
            return chk.returncode, (chk.stderr.strip() or "netns fabric unusable")
    elif launcher == "srun":
        have = os.environ.get("SLURM_NTASKS", "")
        if have.isdigit() and pt["ranks"] > int(have):  # inside an allocation: srun re-splits it, never grows it
            return None, f"{pt['ranks']} ranks do not fit this allocation's {have} tasks (submit it with --slurm)"
    return None


def run_status(rc, timed_out, hung, fst):
    """(status, warning) of a finished launch from its exit code, how it ended and the status
    of the file it wrote (file_status)."""
    if hung and fst == STATUS_DONE:
        # Results complete and verified, then stuck in MPI_Finalize (MPICH 4.0 over TCP).
        return "ok", f"hung at exit after writing its results; killed after {EXIT_GRACE} s"
    if timed_out:
        return "timeout", None
    if rc == 0 and fst == STATUS_DONE:
        return "ok", None
    if rc == 0:
        return f"bad-file ({fst})", None
    if rc < 0 or rc > 128:  # a signal: the launcher's 128+N, or Popen's -N (137: SIGKILL, e.g. the OOM killer)
        sig = -rc if rc < 0 else rc - 128
        return f"killed by signal {sig}" + (" (out of memory?)" if sig == signal.SIGKILL else ""), None
    return {1: "failed (wrong data)", 2: "bad usage", 3: "runtime fault"}.get(rc, f"exit {rc}"), None


def _start_record(pt, rnd, res, log):
    rec = {"id": pt["id"], "round": rnd, "rounds": pt["rounds"], "point": describe(pt), "log": log,
           "result": res, "host": os.uname().nodename, "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
           "start": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z"}
    if pt.get("global_batch") is not None:
        rec["global_batch"] = pt["global_batch"]
    return rec


def run_point(pt, bin_dir, out_dir, presets, launcher, mpiexec, rnd=1, force=False):
    """Run round `rnd` of one point; returns its record {id, round, status, rc, seconds, log,
    result, cmd, shell, run_ids, ...}, also merged into <out>/points/<id>.json. A round whose
    file another process is writing is `skipped` and its files left alone; a round's earlier
    files are set aside, never removed (set_aside)."""
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "points"), exist_ok=True)
    res = result_path(out_dir, pt, rnd)
    log = os.path.join(out_dir, "logs", run_name(pt, rnd) + ".log")
    preset = presets[pt["fabric"]]
    cmd, setenv, unset = launch(pt, rnd, bin_dir, out_dir, presets, launcher, mpiexec)
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(setenv)
    timeout = int(pt["cfg"].get("timeout") or 0)
    rec = _start_record(pt, rnd, res, log)
    skip = skip_reason(pt, preset, launcher)
    if skip is None:
        state, info = set_aside(out_dir, res, log, force)
        if state == "done":  # finished ok since the caller looked (another process ran it)
            return {"id": pt["id"], "round": rnd, "rounds": pt["rounds"], "status": "done"}
        if state == "busy":
            skip = (None, f"{os.path.basename(res)} is in use by {info}: left alone "
                          "(run the sweep again once that run has ended)")
        elif info:
            rec["set_aside"] = info
    if skip is not None:
        rec.update(status="skipped", rc=skip[0], seconds=0.0, reason=skip[1])
        return _write_rec(out_dir, pt, rec)
    rec["cmd"] = " ".join(shlex.quote(c) for c in cmd)
    rec["shell"] = shell_line(cmd, setenv, unset)
    t0 = time.monotonic()
    with open(log, "w") as fh:
        fh.write(f"# {rec['shell']}\n# fabric {pt['fabric']}: "
                 + " ".join(f"{k}={v}" for k, v in preset["env"].items()) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc, timed_out, hung = _wait_point(proc, log, timeout, EXIT_GRACE)
        except BaseException:  # a signal (Interrupted) or any fault: the launch dies with it
            kill_group(proc, grace=5)
            raise
    rec["seconds"] = round(time.monotonic() - t0, 2)
    rec["rc"] = rc
    # 1-minute load average at the end, beside the cores: a busy machine makes MPICH's
    # busy-polling ranks wait for scheduler slices (milliseconds), whatever the fabric.
    rec["loadavg"] = round(os.getloadavg()[0], 2)
    rec["cores"] = os.cpu_count()
    rec["ranks"] = pt["ranks"]
    fst = file_status(res)
    rec["file_status"] = fst
    try:
        rec["run_ids"] = sorted(reader.run_statuses(res)) if os.path.exists(res) else []
    except Exception:  # a file cut short: its status says so
        rec["run_ids"] = []
    rec["status"], warning = run_status(rc, timed_out, hung, fst)
    if warning:
        rec["warning"] = warning
    return _write_rec(out_dir, pt, rec)


# Fields of a round's record repeated at the top of the point's record (scripts/report reads
# a failed point's plan from `cmd` and its file from `result`: meshbench.plans.point_row).
TOP_FIELDS = ("point", "status", "rc", "seconds", "log", "result", "cmd", "shell", "host", "slurm_job_id",
              "start", "loadavg", "cores", "ranks", "file_status", "warning", "reason", "global_batch")


def point_record(out_dir, pt, runs):
    """A point's record from its rounds' records ({round: record}): `rounds` (each round's
    record, in order), `rounds_wanted` (R), `rounds_ok`; at the top the fields of its first
    round that did not end ok, else of its latest round (status ok). A round not run yet
    counts neither way: `rounds_ok` < `rounds_wanted` says more rounds are due."""
    ordered = [runs[k] for k in sorted(runs)]
    bad = [r for r in ordered if r.get("status") != "ok" and r["round"] <= pt["rounds"]]
    top = bad[0] if bad else max(ordered, key=lambda r: r.get("start", ""))
    rec = {"id": pt["id"]} | {k: top[k] for k in TOP_FIELDS if k in top}
    rec["rounds_wanted"] = pt["rounds"]
    rec["rounds_ok"] = sum(1 for r in ordered if r.get("status") == "ok" and r["round"] <= pt["rounds"])
    rec["run_ids"] = [i for r in ordered if r.get("status") == "ok" for i in r.get("run_ids", [])]
    rec["rounds"] = ordered
    return rec


def _write_rec(out_dir, pt, rec):
    """Merge one round's record into <out>/points/<id>.json (written beside, renamed over: a
    reader never sees half a record) and append it to sweep-log.jsonl. Rounds of one point
    never run at once (one local loop; under Slurm, round k+1's array waits for round k's)."""
    os.makedirs(os.path.join(out_dir, "points"), exist_ok=True)
    path = os.path.join(out_dir, "points", pt["id"] + ".json")
    runs = {}
    try:
        with open(path) as fh:
            old = json.load(fh)
        runs = {int(r["round"]): r for r in old.get("rounds", []) if isinstance(r, dict) and "round" in r}
    except (OSError, ValueError, TypeError, KeyError):
        pass
    runs[rec["round"]] = rec
    tmp = path + f".tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(point_record(out_dir, pt, runs), fh, indent=1)
    os.replace(tmp, path)
    with open(os.path.join(out_dir, "sweep-log.jsonl"), "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    return rec
