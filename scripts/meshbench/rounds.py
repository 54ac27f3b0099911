"""meshbench.rounds: the runs of a local sweep: the order they run in (round 1 of every point,
then round 2, ...), resume (a run whose file is complete and ok is skipped; a point that fails a
round runs no further rounds), the summary line and exit code, and report.md, report.csv,
compare.md and plots/ at the end (scripts/report and scripts/plot over the sweep's files).

Not here: one run's command and process (launch), Slurm arrays (slurm).
"""
import glob
import os
import signal
import subprocess
import sys

from .launch import STATUS_DONE, Interrupted, kill_group, describe, file_status, result_path, run_point
from .sweep_config import ROOT


def run_order(points):
    """[(point, round)] in the order they run: round 1 of every point, then round 2, ...
    (interleaved, so that a slow minute of a shared machine lands on every plan's rounds
    alike instead of on one plan's back-to-back runs)."""
    top = max((p["rounds"] for p in points), default=0)
    return [(p, k) for k in range(1, top + 1) for p in points if k <= p["rounds"]]


def run_rounds(points, out_dir, bin_dir, presets, launcher, mpiexec, force=False):
    """Run every round of `points` that is not done, interleaved (run_order), one at a time;
    print [i/N] progress; returns one record per run. A point that fails a round runs no
    further rounds here (`not run`): a broken plan would fail each of them, timeouts included."""
    order = run_order(points)
    total, records, failed_pts, used_netns = len(order), [], set(), False
    for i, (pt, k) in enumerate(order, 1):
        rtext = f"round {k}/{pt['rounds']} " if pt["rounds"] > 1 else ""
        prefix = f"[{i}/{total}] {rtext}{describe(pt)}"
        base = {"id": pt["id"], "round": k, "rounds": pt["rounds"]}
        st = file_status(result_path(out_dir, pt, k))
        if st == STATUS_DONE and not force:
            print(f"{prefix} ... skip (done)", flush=True)
            records.append(base | {"status": "done"})
            continue
        if pt["id"] in failed_pts:
            print(f"{prefix} ... not run (an earlier round failed)", flush=True)
            records.append(base | {"status": "not run"})
            continue
        note = "" if st == "missing" else f" (re-run: previous file {st})"
        print(f"{prefix} ...{note}", end="", flush=True)
        used_netns |= presets[pt["fabric"]]["launcher"] == "netns"
        rec = run_point(pt, bin_dir, out_dir, presets, launcher, mpiexec, k, force)
        if rec["status"] == "done":
            print(" skip (done: another process finished it)", flush=True)
            records.append(rec)
            continue
        extra = f": {rec.get('reason')}" if rec["status"] == "skipped" else ""
        if rec.get("set_aside"):
            extra += f" (the earlier files kept in {os.path.dirname(rec['set_aside'][0])})"
        extra += f" (warning: {rec['warning']})" if rec.get("warning") else ""
        print(f" {rec['status']} ({rec.get('seconds', 0)} s){extra}", flush=True)
        if rec["status"] not in ("ok", "skipped"):
            failed_pts.add(pt["id"])
        records.append(rec)
    if used_netns:
        subprocess.run([os.path.join(ROOT, "scripts", "netns-fabric"), "down", "--auto"],
                       stderr=subprocess.DEVNULL)
    return records


def summarise(records, total, out_dir):
    """records: one per run (a point's round), status ok, done (skipped: finished before),
    skipped, "not run" (its point failed an earlier round in this sweep), or a failure."""
    ok = [r for r in records if r["status"] == "ok"]
    skipped_done = [r for r in records if r["status"] == "done"]
    skipped = [r for r in records if r["status"] == "skipped"]
    not_run = [r for r in records if r["status"] == "not run"]
    failed = [r for r in records if r["status"] not in ("ok", "done", "skipped", "not run")]
    rounds = {r.get("rounds", 1) for r in records}
    if rounds == {1} or not records:
        what = f"{total} points"
    else:
        npts = len({r["id"] for r in records})
        what = (f"{npts} points x {max(rounds)} rounds" if len(rounds) == 1 else f"{npts} points") \
            + f" = {len(records)} runs"
    print(f"sweep: {what}: {len(ok)} ran ok, {len(skipped_done)} already done, "
          f"{len(skipped)} skipped, {len(failed)} failed"
          + (f", {len(not_run)} not run (their point failed a round)" if not_run else "")
          + f"   ({out_dir})")

    def name(r):
        return r["id"] + (f" round {r['round']}" if r.get("rounds", 1) > 1 else "")
    for r in skipped:
        print(f"  skipped  {name(r)}: {r.get('reason', '')}")
    for r in records:
        if r.get("warning"):
            print(f"  warning  {name(r)}: {r['warning']}")
    # The point's own busy-polling ranks count in the load: warn when more than one other
    # process was runnable on top of them (or of the cores, whichever is larger).
    busy = [r for r in records
            if r.get("loadavg", 0) > max(r.get("cores") or 1, r.get("ranks") or 1) + 1]
    if busy:
        worst = max(busy, key=lambda r: r["loadavg"])
        print(f"  warning  {len(busy)} run(s) ran while the machine was busy (load average up to "
              f"{worst['loadavg']} on {worst['cores']} cores): their times include waits for the "
              f"CPU, not only the fabric (loadavg in points/*.json)")
    if failed:
        print("  failed points (exit code, status, log):")
        for r in failed:
            print(f"  {name(r):<48} exit {r.get('rc')!s:<4} {r['status']:<22} {r.get('log', '')}")
    return 1 if failed else 0


def post_process(doc, out_dir, quiet=False):
    """report.md (+ compare.md) and plots/ over the sweep's result files."""
    files = sorted(glob.glob(os.path.join(out_dir, "*.h5")))
    if not files:
        return
    rep = os.path.join(ROOT, "scripts", "report")
    plot = os.path.join(ROOT, "scripts", "plot")
    opts = doc.get("report", {}) if isinstance(doc.get("report"), dict) else {}
    order = ["--expect-order", str(opts["expect_order"])] if opts.get("expect_order") else []
    first = subprocess.run([sys.executable, rep, out_dir, "-o", os.path.join(out_dir, "report.md"), *order],
                           stderr=subprocess.PIPE, text=True)
    if not os.path.exists(os.path.join(out_dir, "report.md")):
        if not quiet:
            print("sweep: no rows to report (no collective points or step runs in the results)"
                  if "no rows" in first.stderr else f"sweep: report failed: {first.stderr.strip()}")
        return
    subprocess.run([sys.executable, rep, out_dir, "-f", "csv", "-o", os.path.join(out_dir, "report.csv")])
    written = ["report.md", "report.csv"]
    cmp_ = opts.get("compare")
    if cmp_ and len(cmp_) == 2:
        if subprocess.run([sys.executable, rep, out_dir, "--compare", *cmp_, *order,
                           "-o", os.path.join(out_dir, "compare.md")]).returncode == 0:
            written.append("compare.md")
    if opts.get("plot", True):
        subprocess.run([sys.executable, plot, out_dir, "-o", os.path.join(out_dir, "plots"),
                        "--title", str(doc.get("name", "sweep")), "--heatmaps", str(opts.get("heatmaps", 6))],
                       stdout=subprocess.DEVNULL)
        written.append("plots/")
    if not quiet:
        print("sweep: wrote " + ", ".join(os.path.join(out_dir, w) for w in written))


def run_local(points, args, presets, doc):
    # The handler only raises: waiting on the launch inside it could deadlock when the signal
    # lands while the main flow holds Popen's wait lock (a blocking wait on a lock its own
    # thread holds). run_point kills the launch's process group as Interrupted passes it.
    def on_signal(signum, _frame):
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # one interruption; the kill is bounded
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # A dropped ssh session: the run in progress gets SIGTERM (its launcher is in a session of its
    # own, which the hangup never reaches), is marked killed, and the sweep resumes later.
    signal.signal(signal.SIGHUP, on_signal)

    try:
        records = run_rounds(points, args.out, args.bin, presets, args.launcher, args.mpiexec, args.force)
    except Interrupted as e:
        print(f"\nsweep: interrupted by signal {e.signum}; re-run the same command to resume", file=sys.stderr)
        sys.exit(128 + e.signum)  # the shell's code for a death by that signal: SIGINT 130, SIGTERM 143, SIGHUP 129
    rc = summarise(records, len(points), args.out)
    if not args.no_report:
        post_process(doc, args.out)
    return rc
