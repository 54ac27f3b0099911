"""meshbench.slurm: a sweep through Slurm. --slurm writes one plan file per rank count and
round (the runs not done yet) and submits each as a job array of slurm/sweep-array.sbatch;
round k's arrays start after every array of round k-1 has ended (sbatch
--dependency=afterany), so rounds interleave across points and two rounds of one point never
run at once. --slurm-single submits one job that runs every round in turn. --wait polls squeue
until the jobs are gone and summarises their records. Inside a job, --run-point PLAN INDEX and
--run-plan PLAN run a plan's task(s) (run_plan_entry).

Earlier submissions still queued or running (<out>/slurm-jobs.json, checked with squeue) are
not submitted again; the first round submitted waits for them.
Not here: what one run does (launch) and the local loop (rounds).
"""
import json
import os
import shlex
import subprocess
import sys
import time

from .launch import STATUS_DONE, describe, file_status, result_path, run_name, run_point
from .rounds import post_process, run_order, run_rounds, summarise
from .sweep_config import ROOT, fabric_presets


def in_flight(out_dir):
    """{run name (run_name): job id} for runs of earlier submissions whose job is still queued
    or running."""
    path = os.path.join(out_dir, "slurm-jobs.json")
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        jobs = json.load(fh)
    q = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%F"], capture_output=True, text=True)
    if q.returncode != 0:
        return {}
    active = set(q.stdout.split())
    return {name: job for job, names in jobs.items() if job in active for name in names}


def record_submission(out_dir, job, names):
    path = os.path.join(out_dir, "slurm-jobs.json")
    jobs = {}
    if os.path.exists(path):
        with open(path) as fh:
            jobs = json.load(fh)
    jobs[job] = names
    with open(path, "w") as fh:
        json.dump(jobs, fh, indent=1)


def round_record(out_dir, pt, rnd):
    """Round `rnd`'s record in <out>/points/<id>.json, or None."""
    try:
        with open(os.path.join(out_dir, "points", pt["id"] + ".json")) as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    for r in rec.get("rounds", []):
        if isinstance(r, dict) and r.get("round") == rnd:
            return r
    return None


def due_runs(points, out_dir, force, busy):
    """({round: [point]} of the runs to submit, how many are done or in flight). A run is due
    when its file is not complete and ok (or with force), unless a job of an earlier
    submission (busy: in_flight) is still on it."""
    todo, done = {}, 0
    for p, k in run_order(points):
        name = run_name(p, k)
        if name in busy and file_status(result_path(out_dir, p, k)) != STATUS_DONE:
            print(f"sweep: {name} is still queued or running in job {busy[name]}: not submitted again")
        elif force or file_status(result_path(out_dir, p, k)) != STATUS_DONE:
            todo.setdefault(k, []).append(p)
            continue
        done += 1
    return todo, done


def submission_batches(points, todo, single):
    """[(round, ranks, points)] in submission order: one per round and rank count (round 1's
    first), or with single one (None, the largest rank count, every point with a due run);
    none when no run is due (every other one still in flight)."""
    if single:
        pts = [p for p in points if any(p in v for v in todo.values())]
        return [(None, max(p["ranks"] for p in pts), pts)] if pts else []
    batches = []
    for k in sorted(todo):
        by_ranks = {}
        for p in todo[k]:
            by_ranks.setdefault(p["ranks"], []).append(p)
        batches += [(k, r, by_ranks[r]) for r in sorted(by_ranks)]
    return batches


def write_plan(out_dir, bin_dir, k, r, pts, multi, single, force):
    """Write one batch's plan file (what sweep-array.sbatch hands to --run-point/--run-plan);
    returns (its path, the names of the runs it holds)."""
    if single:
        plan = os.path.join(out_dir, f"plan-r{r}-all.json")
        names = [run_name(p, kk) for p, kk in run_order(pts)]
    else:
        plan = os.path.join(out_dir, f"plan-r{r}" + (f"-round{k}" if multi else "") + ".json")
        names = [run_name(p, k) for p in pts]
    with open(plan, "w") as fh:
        json.dump({"out": out_dir, "bin": bin_dir, "points": pts, "round": k, "force": force},
                  fh, indent=1)
    return plan, names


def sbatch_argv(out_dir, k, r, n_tasks, plan, multi, single, max_parallel=0, after=(), extra=()):
    """The sbatch command of one batch: r tasks, a job array of n_tasks (throttled to
    max_parallel) that starts after the jobs `after` have ended, or with single one job."""
    cmd = ["sbatch", "--parsable", f"--ntasks={r}", f"--job-name=mb-sweep-r{r}" + (f"-k{k}" if multi and k else ""),
           f"--output={out_dir}/logs/slurm-%A_%a.out" if not single
           else f"--output={out_dir}/logs/slurm-%j.out"]
    if not single:
        cmd.append(f"--array=0-{n_tasks - 1}" + (f"%{max_parallel}" if max_parallel else ""))
        if after:
            cmd.append("--dependency=afterany:" + ":".join(after))
    return cmd + list(extra) + [os.path.join(ROOT, "slurm", "sweep-array.sbatch"), plan]


def submit(batches, args, busy, multi, top):
    """sbatch every batch in order, each round after the previous round's jobs (the first after
    the earlier submissions still in flight; top: the most rounds of a point); returns the job ids to wait for, or None when
    sbatch failed (printed)."""
    env = {**os.environ, "MB_ROOT": ROOT, "MB_BIN": args.bin}
    extra = shlex.split(args.sbatch_args or "")
    jobs = sorted(set(busy.values()))  # earlier submissions still in flight: waited for too
    prev_round, prev_jobs, this_jobs = None, sorted(set(busy.values())), []
    for k, r, pts in batches:
        if k != prev_round:
            prev_jobs, this_jobs, prev_round = (this_jobs or prev_jobs), [], k
        plan, names = write_plan(args.out, args.bin, k, r, pts, multi, args.slurm_single, args.force)
        cmd = sbatch_argv(args.out, k, r, len(pts), plan, multi, args.slurm_single, args.max_parallel,
                          prev_jobs, extra)
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(f"sweep: sbatch failed ({out.returncode}): {out.stderr.strip()}", file=sys.stderr)
            return None
        job = out.stdout.strip().split(";")[0]
        jobs.append(job)
        this_jobs.append(job)
        record_submission(args.out, job, names)
        if args.slurm_single:
            kind = "job" + (" (every round, interleaved)" if multi else "")
        else:
            kind = f"array job of {len(pts)} tasks"
        when = f", round {k}/{top}" + (f", after {','.join(prev_jobs)}" if prev_jobs else "") \
            if multi and k else ""
        print(f"sweep: submitted {kind} {job} (ranks={r}{when}, plan {plan})")
    return jobs


def wait_jobs(jobs, timeout):
    """Poll squeue until none of `jobs` is queued or running; False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%i %T"],
                           capture_output=True, text=True)
        if q.returncode == 0 and not q.stdout.strip():
            return True
        time.sleep(0.5)
    return False


def collect(points, out_dir, waited):
    """One record per run, in run order, printed [i/N]: the run's record from its point's file
    when it was submitted or in flight (waited: run names), else `done`."""
    records = []
    order = run_order(points)
    for i, (p, k) in enumerate(order, 1):
        base = {"id": p["id"], "round": k, "rounds": p["rounds"]}
        rec = round_record(out_dir, p, k) if run_name(p, k) in waited else None
        if run_name(p, k) not in waited:
            rec = base | {"status": "done"}
        elif rec is None:
            rec = base | {"status": "no record (job died?)", "rc": None, "log": os.path.join(out_dir, "logs")}
        rtext = f"round {k}/{p['rounds']} " if p["rounds"] > 1 else ""
        print(f"[{i}/{len(order)}] {rtext}{describe(p)} ... {rec['status']}")
        records.append(base | rec)
    return records


def run_slurm(points, args, presets, doc):
    """Write plan files (only the runs not done yet) and submit them (module docstring); with
    --wait, wait for the jobs and summarise. Exit code: summarise's, 0 submitted without
    --wait, 3 sbatch failed or the jobs outlived --wait-timeout."""
    busy = in_flight(args.out)
    todo, done = due_runs(points, args.out, args.force, busy)
    n_runs = sum(p["rounds"] for p in points)
    n_todo = sum(len(v) for v in todo.values())
    rounds = sorted({p["rounds"] for p in points})
    runs = "" if rounds == [1] else f" ({n_runs} runs: {'/'.join(map(str, rounds))} rounds each)"
    print(f"sweep: {len(points)} points{runs}, {done} already done or in flight, {n_todo} to submit")
    if not todo and not busy:
        return summarise([{"id": p["id"], "round": k, "rounds": p["rounds"], "status": "done"}
                          for p, k in run_order(points)], len(points), args.out)
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    jobs = submit(submission_batches(points, todo, args.slurm_single), args, busy, rounds != [1], max(rounds))
    if jobs is None:
        return 3
    if not args.wait:
        print("sweep: re-run with --wait (or later: the same command again) to collect results")
        return 0
    if not wait_jobs(jobs, args.wait_timeout):
        print(f"sweep: jobs {','.join(jobs)} still queued/running after {args.wait_timeout} s", file=sys.stderr)
        return 3
    waited = {run_name(p, k) for k, v in todo.items() for p in v} | set(busy)
    rc = summarise(collect(points, args.out, waited), len(points), args.out)
    if not args.no_report:
        post_process(doc, args.out)
    return rc


def run_plan_entry(plan_path, index, args):
    """Inside a Slurm job: run task INDEX of a plan (its points' round `round`), or with index
    None every round of every point not done yet, interleaved (run_rounds)."""
    with open(plan_path) as fh:
        plan = json.load(fh)
    presets = fabric_presets()
    for p in plan["points"]:
        p.setdefault("rounds", 1)  # a plan written before rounds
    launcher = os.environ.get("MB_LAUNCHER") or ("srun" if os.environ.get("SLURM_JOB_ID") else "mpiexec")
    if index is None:
        recs = run_rounds(plan["points"], plan["out"], plan["bin"], presets, launcher, args.mpiexec,
                          plan.get("force", False))
    else:
        pt, k = plan["points"][index], plan.get("round") or 1
        rtext = f"round {k}/{pt['rounds']} " if pt["rounds"] > 1 else ""
        print(f"[1/1] {rtext}{describe(pt)} ...", flush=True)
        recs = [run_point(pt, plan["bin"], plan["out"], presets, launcher, args.mpiexec, k, plan.get("force", False))]
        print(f"  {recs[0]['status']} (exit {recs[0].get('rc')}, {recs[0].get('seconds')} s) "
              f"log {recs[0].get('log')}", flush=True)
    worst = 0
    for rec in recs:
        if rec["status"] not in ("ok", "skipped", "done", "not run"):
            worst = rec.get("rc") or 1
    return worst
