"""meshbench.sweep: scripts/sweep's command once its flags are parsed (run): read the sweep
file or the step flags, expand and prune the points (expand), then print them (--dry-run), run
them here (rounds) or submit them (slurm). HELP is the command's --help text.
"""
import os
import re
import shlex
import sys

from . import estimate as mb_estimate, locks, names as mb_names, predict_ranking, steps as mb_steps
from .expand import expand, print_batches, print_pruned
from .launch import STATUS_DONE, launch, result_path, rounds_status, shell_line
from .rounds import run_local
from .slurm import run_plan_entry, run_slurm
from .sweep_config import (ROOT, SweepError, apply_step_flags, fabric_presets, load_doc, steps_doc)

HELP = """scripts/sweep: run a grid of meshbench points from a TOML file, locally or through Slurm.

A sweep file names binaries, rank counts, fabrics (presets of slurm/env.sh), backends, meshes
and sizes; every combination is one point. A point runs `rounds` times (default 3 for step
points, 1 for collectives), interleaved: round 1 of every point, then round 2, ...; round 1
writes <out>/<point>.h5, round k > 1 <out>/<point>.r<k>.h5 (separate runs, separate run ids:
the report reads them as one measurement's rounds). The whole file is checked before anything
launches (unknown binary, unknown fabric preset, a mesh that does not divide the ranks, a key
nobody reads: exit 2, naming the entry). Sweeps resume: a round whose file exists with every
run's status `ok` is skipped; a missing one, or one left `running`/`killed`/`timeout`/`failed`,
is run again, so a point with fewer ok rounds than `rounds` gets the rest. Nothing is deleted: a
round's earlier files move to <out>/stale/ first, under the file's lock (<point>.h5.lock, held by
a binary while it writes); a round whose lock another process holds is skipped and left alone.
One sweep per output folder: a sweep holds <out>/.sweep.lock while it runs, and a second sweep
on that folder exits 2 naming it. Not a scheduler: runs go one at a time locally; under Slurm each rank count is
one job array per round, round k+1's arrays starting after round k's (--dependency=afterany).

  scripts/sweep examples/fabrics-local.toml               # run locally (mpiexec), then report + plots
  scripts/sweep examples/fabrics-local.toml --dry-run     # points and the commands to paste
  scripts/sweep sweep.toml --slurm --wait                 # job arrays per rank count and round, wait, summarise
  scripts/sweep sweep.toml --slurm-single                 # one batch job runs every round in turn
  scripts/sweep examples/steps-local.toml                 # a step sweep: every valid plan at 4 ranks
  scripts/sweep --steps --world 4 --model small --memory-per-rank 8G --dry-run   # the same from flags
  scripts/sweep --steps --world 2 --model small --predict cal.h5 --top 5 --spread 3   # predict, run 8, correlate

Sweep file keys (top level = defaults; each [[sweep]] table overrides them and adds its points):
  name, binaries, ranks, fabrics, backends, mem, meshes ([{mesh="tp=2,dp=2", group="tp"}] or
  ["tp=2,dp=2:tp"]), min_bytes, max_bytes, step_factor, iters, warmup, check, dtype, op,
  inplace (not passed to broadcast under MPI, which is in-place only), timing, time_limit,
  timeout (seconds per run), ranks_per_node, rounds, args (extra flags), env (a table);
  [report] compare = ["tag=shm", "tag=tcp-lo"], expect_order = "tag=shm,tcp-lo,netns" (flag points where
  a physically slower fabric reads > 20% faster), plot = true.
Step sweeps: a [steps] table (top level or [sweep.steps]) turns a sweep into every plan of a model
shape at each rank count (under Slurm without `ranks`: the allocation's SLURM_NTASKS): see
scripts/meshbench/steps.py for its keys. Every plan trains one global batch (by default the
smallest every candidate mesh reaches; m = global batch / (b dp)). Plans are pruned with their
reason and category: global batch (cannot reach it), degenerate (ZeRO whose dp x cp and edp groups are 1 rank),
refused (step_bench --plan-only's message), memory (over memory_per_rank); --dry-run lists them
with their counts, <out>/pruned.txt and <out>/plans.json keep them; the valid ones run as points.
--dry-run prints each point's command as it runs: the launcher (mpiexec -n N, srun, or
scripts/netns-fabric exec -n N), the fabric's variables and the binary; pasted into a shell it
runs that point's next round.
Predict, then run: `--predict CAL.h5` (a calibration file: scripts/calibrate, docs/predict.md) asks
`step_bench --plan-only ... --predict CAL.h5` for every valid plan's predicted step, ranks the plans
by predicted tokens/s and prints the ranking; `--top N` runs the N best and `--spread K` (default
3) more spread evenly over the rest of the ranking, the worst included (without --top: every valid
plan); each run gets --predict CAL.h5 too (step/predicted beside its measurement). At the end the
sweep prints predicted against measured tokens/s per run plan and Spearman's rank correlation
between them (<out>/prediction.json; the ranking: <out>/ranking.json); --dry-run prints the ranking
and the chosen plans' commands. A plan the calibration cannot predict (a missing fit or rate) is
exit 2 with step_bench's message; --predict-fabric TAG picks the fits of one fabric tag.
The names a sweep file may use (binaries, mesh dimensions, group kinds) are the binaries' own:
`<bin>/mesh_info --list-json` (scripts/meshbench/names.py); without a built mesh_info the sweep
exits 2 saying so. Result files are read with scripts/meshbench/reader.py. Each point's rounds
are recorded in <out>/points/<point>.json (`rounds`: one record per round with its status,
exit code, command, file and run ids; `rounds_ok` of `rounds_wanted`).
Exit codes: 0 every run ok or skipped, 1 some run failed, 2 bad sweep file or usage (or the
output folder in use by another sweep), 3 sbatch failed or the jobs outlived --wait-timeout,
130 stopped by SIGINT, 143 by SIGTERM, 129 by SIGHUP (the run in progress killed; the same command resumes).
"""


def list_fabrics(presets):
    for name, p in presets.items():
        env = " ".join(f"{k}={v}" for k, v in p["env"].items()) or "(NCCL/UCX defaults)"
        print(f"{name:<12} {p['backend']:<5} {p['launcher']:<8} {env:<60} {p['desc']}")
    return 0


def points_of(doc, args, presets):
    """(points, pruned, batches) of the document, after --rounds and --only; raises SweepError."""
    args.bin = os.path.abspath(args.bin)
    try:
        names = mb_names.load(args.bin)
    except mb_names.NamesError as e:
        raise SweepError(str(e))
    if args.rounds is not None and args.rounds < 1:
        raise SweepError(f"--rounds must be at least 1, got {args.rounds}")
    pruned, batches = [], []
    points = expand(doc, presets, args.bin, names, check_binaries=not args.dry_run, pruned=pruned,
                    batches=batches)
    for p in points:
        p["rounds"] = args.rounds or p["rounds"]
    if args.only:
        points = [p for p in points if re.search(args.only, p["id"])]
        if not points:
            raise SweepError(f"--only {args.only!r} matches no point")
    return points, pruned, batches


def _toml(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_sweep(path, doc, points, args):
    """--write-sweep: the chosen plans (top and spread of a --predict ranking) as a sweep file,
    one [[sweep]] table per plan whose [sweep.steps] admits exactly that plan (its degrees,
    order, ZeRO stage, schedule, chunks, recomputation, cp algorithm and global batch), without
    `predict` (the file runs them). Raises SweepError without chosen plans."""
    chosen = [p for p in points if p.get("selected") and p.get("choice")]
    if not chosen:
        raise SweepError("--write-sweep: no chosen plans (it needs --predict and a step sweep with valid plans)")
    top = doc.get("steps") if isinstance(doc.get("steps"), dict) else {}
    lines = [f"# Written by scripts/sweep --write-sweep from a ranking by predicted tokens/s "
             f"({top.get('predict') or 'a calibration'}): the {len(chosen)} chosen plans (top and spread), one",
             "# [[sweep]] table each. Run them where they fit: scripts/sweep THIS_FILE, or under Slurm:",
             "#   sbatch -n <ranks> slurm/step-sweep.sbatch THIS_FILE",
             f"name = {_toml(os.path.splitext(os.path.basename(path))[0])}",
             f"args = {_toml([str(a) for a in doc.get('args') or []])}",
             f"fabrics = {_toml(doc.get('fabrics') or ['shm'])}", ""]
    for p in chosen:
        c = p["choice"]
        d = c["degrees"]
        steps = {"tp": [d["tp"]], "cp": [d["cp"]], "ep": [d["ep"]], "pp": [d["pp"]], "zero": [c["zero"]],
                 "global_batch": c["global_batch"], "orders": [c["order"]]}
        if c.get("model"):
            steps = {"model": c["model"]} | steps
        if c.get("etp"):
            steps["etp"] = [c["etp"]]
        if c.get("schedule"):
            steps["schedule"] = [c["schedule"]]
            steps["vpp"] = [c["vpp"] if c["vpp"] > 1 else 2]
        if c.get("recompute"):
            steps["recompute"] = [c["recompute"]]
        if c.get("cp_algo"):
            steps["cp_algo"] = [c["cp_algo"]]
        lines += [f"# predicted #{p.get('pred_rank')} ({p.get('selected')}): {p['id']}", "[[sweep]]",
                  f"ranks = [{p['ranks']}]", "[sweep.steps]"]
        lines += [f"{k} = {_toml(v)}" for k, v in steps.items()] + [""]
    with open(path, "w") as fh:
        fh.write("\n".join(lines))
    print(f"sweep: wrote the {len(chosen)} chosen plans to {path} (scripts/sweep {path}; "
          f"sbatch -n <ranks> slurm/step-sweep.sbatch {path})")


def note_leaks():
    leaks = sorted(k for k in os.environ if k.startswith("MESHBENCH_"))
    if leaks:
        # The binaries read an option they are not given from MESHBENCH_<OPTION> (step_bench's
        # own options: MESHBENCH_STEP_<OPTION>): from this shell, into every point.
        print("sweep: note: " + " ".join(f"{k}={shlex.quote(os.environ[k])}" for k in leaks)
              + " set here: every point's binary (and step_bench --plan-only) reads them for the options "
              "its command line does not give; each run records them in its env")


def dry_run(points, pruned, batches, args, presets):
    """Each point's command as it would run now (its next round not done, else round 1): the
    launcher with the point's ranks (or scripts/netns-fabric exec), the fabric's variables
    (env -u for preset variables of this shell it must not see), the binary."""
    print_batches(batches)
    predict_ranking.print_rankings(batches)
    # A plan search for a cluster (--predict CLUSTER.toml: predictions that name a cluster) is
    # about plans for that cluster: their predictions, not launch lines for this machine.
    search = [p for p in points if "cluster" in ((p.get("plan") or {}).get("predicted") or {})]
    here = [p for p in points if p not in search]
    if search:
        print(cluster_plans_text(search, args))
    runs_due = []
    for i, pt in enumerate(here, 1):
        sts = rounds_status(args.out, pt)
        due = [k for k, st in enumerate(sts, 1) if st != STATUS_DONE]
        runs_due.append((pt, len(due)))
        st = sts[0] if pt["rounds"] == 1 else f"{len(sts) - len(due)} of {pt['rounds']} rounds ok"
        line = shell_line(*launch(pt, due[0] if due else 1, args.bin, args.out, presets, args.launcher,
                                  args.mpiexec))
        print(f"[{i}/{len(here)}] {pt['id']} ({st}): {line}")
    multi = sorted({p["rounds"] for p in here if p["rounds"] > 1})
    if multi:
        print(f"rounds: {'/'.join(map(str, multi))} per point, interleaved (round 1 of every point, then "
              f"round 2, ...); round k > 1 writes <point>.r<k>.h5 (-O), otherwise the same command")
    if here:
        print(mb_estimate.text(mb_estimate.estimate(args.out, runs_due)))
    print_pruned(pruned)
    return 0


def cluster_plans_text(points, args):
    """A plan search for a cluster (--predict CLUSTER.toml): the chosen plans with their
    predictions, in place of launch lines this machine could not run (mpiexec -n 16384)."""
    def num(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"
    out = [f"the chosen plans of the search ({len(points)}): predicted for the cluster, nothing runs here; "
           "--write-sweep FILE.toml writes them as a sweep file to run there",
           "| # | pred # | plan | ranks | predicted step (ms) | predicted tokens/s | MFU | chosen | step_bench flags |",
           "|---:|---:|---|---:|---:|---:|---:|---|---|"]
    for i, pt in enumerate(points, 1):
        p = (pt.get("plan") or {}).get("predicted") or {}
        st, tok, mfu = p.get("step_time_s"), p.get("tokens_per_s"), p.get("mfu")
        flags = " ".join(["--mesh", pt["mesh"]["text"], "--order", pt["mesh"].get("order") or ""]
                         + [str(a) for a in pt["cfg"].get("args", [])] + [str(a) for a in pt.get("plan_args") or []])
        out.append(f"| {i} | {pt.get('pred_rank') or '-'} | {pt['id']} | {pt['ranks']} | "
                   f"{num(st * 1e3 if isinstance(st, (int, float)) else None, '.4g')} | "
                   f"{num(tok, ',.0f')} | {num(100 * mfu if isinstance(mfu, (int, float)) else None, '.1f')}"
                   f"{'%' if isinstance(mfu, (int, float)) else ''} | {pt.get('selected') or '-'} | `{flags}` |")
    return "\n".join(out) + "\n"


def prepare(args, usage_error):
    """(doc, presets, points, pruned, batches) of the command line, or (None, presets, ...)
    after --list-fabrics; args.out and args.launcher filled in. Raises SweepError."""
    presets = fabric_presets()
    if args.list_fabrics:
        return None, presets, [], [], []
    if not args.file and not args.steps:
        usage_error("a sweep file (or --steps) is required")
    doc = steps_doc(args) if args.steps else load_doc(args.file)
    apply_step_flags(doc, args)
    points, pruned, batches = points_of(doc, args, presets)
    name = str(doc.get("name") or os.path.splitext(os.path.basename(args.file))[0])
    if pruned and not points and not args.dry_run:
        print_pruned(pruned)
        raise SweepError(f"every one of the {len(pruned)} step plans was pruned (reasons above)")
    args.out = os.path.abspath(args.out or os.path.join(ROOT, "results", f"sweep-{name}"))
    args.launcher = args.launcher or ("srun" if os.environ.get("SLURM_JOB_ID") else "mpiexec")
    return doc, presets, points, pruned, batches


# Held by a sweep that runs or submits points for as long as it lives (locks.take): a second
# sweep on the same folder is refused, since both would run the same rounds into the same files.
SWEEP_LOCK = ".sweep.lock"


def lock_out(out):
    """Take <out>/.sweep.lock, or raise SweepError naming the sweep that holds it."""
    try:
        os.makedirs(out, exist_ok=True)
        lock, holder = locks.take(os.path.join(out, SWEEP_LOCK), locks.me("scripts/sweep"))
    except OSError as e:
        raise SweepError(f"--out {out}: cannot lock the folder: {e.strerror or e}")
    if lock is None:
        raise SweepError(f"--out {out}: in use by {holder}; one sweep per output folder at a time: wait for "
                         f"it to end, or give another --out")
    return lock


def run(args, usage_error):
    """scripts/sweep after its flags are parsed; returns the exit code. usage_error(message)
    ends the program as bad usage (argparse's error)."""
    try:
        if args.run_point:
            return run_plan_entry(args.run_point[0], int(args.run_point[1]), args)
        if args.run_plan:
            return run_plan_entry(args.run_plan, None, args)
        doc, presets, points, pruned, batches = prepare(args, usage_error)
        if doc is None:
            return list_fabrics(presets)
    except SweepError as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    note_leaks()
    if getattr(args, "write_sweep", None):
        try:
            write_sweep(args.write_sweep, doc, points, args)
        except (SweepError, OSError) as e:
            print(f"sweep: {e}", file=sys.stderr)
            return 2
    if args.dry_run:
        return dry_run(points, pruned, batches, args, presets)
    try:
        lock = lock_out(args.out)
    except SweepError as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    try:
        return _run_points(args, doc, presets, points, pruned, batches)
    finally:
        lock.release()


def _run_points(args, doc, presets, points, pruned, batches):
    """The points of a sweep that holds its output folder: run here, or submitted."""
    if pruned or any(p["binary"] == "step" and p.get("plan_args") is not None for p in points):
        mb_steps.write_pruned(args.out, [p for p in points if p.get("plan_args") is not None], pruned, batches)
        print_batches(batches)
        predict_ranking.print_rankings(batches)
        counts = f" ({mb_steps.prune_counts(pruned)})" if pruned else ""
        print(f"sweep: {len(points)} step points, {len(pruned)} plans pruned{counts} "
              f"({os.path.join(args.out, 'pruned.txt')})")
    predicting = any(p.get("pred_rank") is not None for p in points)
    if predicting:
        predict_ranking.write_rankings(args.out, batches)
    if args.slurm or args.slurm_single:
        rc = run_slurm(points, args, presets, doc)
    else:
        rc = run_local(points, args, presets, doc)
    if predicting:
        comp = predict_ranking.comparison(
            points, lambda p: [result_path(args.out, p, k) for k in range(1, p["rounds"] + 1)])
        print(predict_ranking.comparison_text(comp), end="")
        predict_ranking.write_comparison(args.out, comp)
    return rc
