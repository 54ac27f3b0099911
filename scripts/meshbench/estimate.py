"""meshbench.estimate: what `scripts/sweep --dry-run` says a sweep will take, and the rule.

Each run still due (a round whose file is not done) is estimated by the first rule that applies:
  1. its point ran here before: the median seconds of that point's ok rounds, as recorded in
     <out>/points/<id>.json (the same machine, the same command);
  2. a step point with a predicted step time (--predict): LAUNCH_S + (warmup + steps) x the
     predicted step, steps and warm-up from the point's flags (step_bench's defaults 10 and 2);
  3. otherwise no estimate: such a run is counted apart, bounded only by its timeout.
Not a scheduler's promise: a busy machine runs slower, and a point that fails a round runs no
further rounds. Not here: which rounds are due (launch, rounds).
"""
import json
import os
import statistics

# mpiexec, MPI_Init, the binary's set-up and its publishes of a small run: about 0.6 s for a
# collective and 1-2 s for step_bench on this 2-core machine (it loads the CUDA libraries).
LAUNCH_S = 2.0
STEP_DEFAULTS = {"--steps": 10, "--warmup": 2}


def earlier_seconds(out_dir, pt):
    """The seconds of the point's ok rounds recorded in <out>/points/<id>.json."""
    try:
        with open(os.path.join(out_dir, "points", pt["id"] + ".json")) as fh:
            rec = json.load(fh)
        return [float(r["seconds"]) for r in rec.get("rounds", [])
                if isinstance(r, dict) and r.get("status") == "ok" and isinstance(r.get("seconds"), (int, float))]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def flag_value(argv, flag, default):
    """The last value given to `flag` in argv (the one the binary keeps), as an int."""
    value = default
    for i, a in enumerate(argv[:-1]):
        if a == flag:
            try:
                value = int(argv[i + 1])
            except ValueError:
                pass
    return value


def predicted_run(pt):
    """Rule 2's seconds for a step point with a predicted step time, else None."""
    pred = ((pt.get("plan") or {}).get("predicted") or {}).get("step_time_s")
    if pt.get("binary") != "step" or not isinstance(pred, (int, float)) or pred <= 0:
        return None
    argv = [str(a) for a in pt["cfg"].get("args", [])] + [str(a) for a in pt.get("plan_args") or []]
    steps = flag_value(argv, "--steps", STEP_DEFAULTS["--steps"]) + flag_value(argv, "--warmup", STEP_DEFAULTS["--warmup"])
    return LAUNCH_S + steps * pred


def estimate(out_dir, due):
    """due: [(point, number of its runs due)] -> {seconds, earlier, predicted, unknown, bound}:
    the estimated seconds of the runs with an estimate, how many came from each rule, the runs
    without one and the sum of their timeouts (0: no timeout)."""
    e = {"seconds": 0.0, "earlier": 0, "predicted": 0, "unknown": 0, "bound": 0.0, "unbounded": 0}
    for pt, n in due:
        if n <= 0:
            continue
        past = earlier_seconds(out_dir, pt)
        pred = predicted_run(pt)
        if past:
            e["seconds"] += n * statistics.median(past)
            e["earlier"] += n
        elif pred is not None:
            e["seconds"] += n * pred
            e["predicted"] += n
        else:
            e["unknown"] += n
            t = int(pt["cfg"].get("timeout") or 0)
            e["bound"] += n * t
            e["unbounded"] += n if not t else 0
    return e


def duration(s):
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def text(e):
    """The --dry-run line."""
    known = e["earlier"] + e["predicted"]
    if not known and not e["unknown"]:
        return "estimated wall time: nothing to run (every round is done)"
    parts = []
    if known:
        how = [f"{e['earlier']} from their point's earlier runs here"] if e["earlier"] else []
        how += ([f"{e['predicted']} from the predicted step: {LAUNCH_S:g} s + (warmup + steps) x step"]
                if e["predicted"] else [])
        parts.append(f"{duration(e['seconds'])} for {known} run(s) ({'; '.join(how)})")
    if e["unknown"]:
        bound = (f"each at most its timeout: at most {duration(e['seconds'] + e['bound'])} in all"
                 if not e["unbounded"] else "some without a timeout: no bound")
        parts.append(f"{e['unknown']} run(s) without an estimate (no earlier run here, no prediction), {bound}")
    return "estimated wall time: " + "; ".join(parts) + " (rule: scripts/meshbench/estimate.py, docs/sweeps.md)"
