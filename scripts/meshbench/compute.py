"""meshbench.compute: scripts/calibrate --compute: this machine's compute rates, measured
through step_bench and stored in the calibration file's /compute group (docs/predict.md
"Compute rates"; the layout: docs/results.md "Calibration files").

For each entry of a mesh list (DEFAULT_MESHES with the MoE pair, or --compute-mesh) it asks
`step_bench --plan-only --world N ARGS --op-list` for the op list of one rank (pp rank 0) and
one step, then runs `[mpiexec -n N] step_bench ARGS --profile -O FILE` and reads the compute
events of its timed steps (step/events: kind op.fwd|bwd|opt, phase, name, m, n, k, flops,
t_start, t_end; a compute op's dim is '-'). Every plan is asked before anything runs, so a
refused mesh or a build without --op-list stops the command before minutes of runs.

  gemm   one row per distinct GEMM (part, m, n, k): the median seconds per call over every
         call of it on every rank of every run
  rates  the other ops of rank 0 (the rank the op list describes), per (op, phase, part): the
         seconds per step (the sum over the timed steps / steps) over the op list's units per
         step: its FLOPs (attention: a FLOP rate) or its elements (the elementwise ops:
         layernorm, gelu, residual, crossentropy, embedding, adamw, router, permute, copy);
         without an op list entry, an op whose events carry FLOPs is rated over them. Each run
         gives a rate; the table keeps, per key, the run of the median rate (the lower middle
         of an even count) with how many runs measured it and their spread (max / min);
         rate_runs keeps every run's.

The part is the op's part as the op list and the step model name it (OpInfo::part: fwd, bwd,
dinput, dweight, bias_residual, router.fwd, expert.fc.fwd, chunk.fwd, kv.copy, ...; '' for
none). step/events stores role and part joined in one `name` (role.part: qkv.dinput,
attn.proj.bias_residual, moe.router.fwd; the role alone when the part is empty: 'moe'):
split_name takes the role off again (the longest of ROLES that prefixes the name).

The reduction (compute_events, gemm_rows, run_rates, pool_rates, reduce_runs) is pure, over
plain dicts: the tests feed it generated events and op lists. Not here: the file's other
groups and the command (calibrate), the collective fits (fit).
"""
import datetime
import json
import os
import shlex
import subprocess
import tempfile
import time

from . import reader
from .in_step import arrival_skew, arrival_skews, in_step_factors, overlapped_factors, post_factors, posted_factors

DEFAULT_MODEL = "small"
DEFAULT_MOE_MODEL = "small-moe"
# (ranks, step_bench flags): the local shapes of the plan families at --ranks ranks (None), all
# run at --ranks ranks so that every op is timed with as many busy cores as the plans it rates
# (a GEMM of one shape measured 7.9 ms in a 1-rank run and 16.6-19.6 ms in 2-rank runs here):
# the whole model's shapes as --mesh dp=R ({R}: --ranks), the tp=2, SP, cp=2 ring and Ulysses
# shards, and ZeRO-3 over dp=R, whose posted reduce-scatters and gathers (with the dp run's
# posted buckets) give the posted factors. With --ranks 1 only the dp entry without ZeRO runs.
DEFAULT_MESHES = [(None, "--mesh dp={R}"), (None, "--mesh tp=2"), (None, "--mesh tp=2 --sp"), (None, "--mesh cp=2"),
                  (None, "--mesh cp=2 --cp-algo ulysses"), (None, "--mesh dp={R} --zero 3 --micro-batches 2")]
# The MoE blocks' ops (router, permute, the experts' GEMMs), with fixed routings: balanced, so
# that every rank's expert load, and with it the op list's element counts, is known; and
# hot-expert, whose hot expert's rows (half of every rank's tokens: the busiest GEMM shapes of
# a skewed plan) are exact. Scaled from the balanced shapes by m n k, a 1024-row expert GEMM
# was predicted 30% slower than it runs (hot-expert ep=2, 2026-12-02).
MOE_MESHES = [(None, "--mesh dp={R} --routing balanced"), (None, "--mesh ep=2 --routing balanced"),
              (None, "--mesh ep=2 --routing hot-expert")]
GEMM_OP = "matmul"
MAX_SHAPE_NOTES = 3  # more GEMM shapes of one part off the op list's: one note for them
# The roles the model's runners give their ops (parallel/model/model.cpp: runner("qkv") ...):
# step/events' `name` is role.part, and the op list and the calibration key on the part.
ROLES = ("attn.proj", "attention", "fc.proj", "head", "qkv", "moe", "fc")
ENV_2RANK = {"UCX_TLS": "self,sm"}  # the shm preset (slurm/env.sh): MPICH over TCP can hang at exit


def run_env(ranks):
    """The environment a calibration's run of `ranks` ranks adds: the shm preset's UCX_TLS for 2
    or more ranks, unless the caller's environment sets UCX_TLS. scripts/predict-check runs its
    plans with the same, so that a check measures under the transport its calibration did."""
    return dict(ENV_2RANK) if ranks > 1 and "UCX_TLS" not in os.environ else {}


class ComputeError(Exception):
    """Bad input or a refused plan (exit 2)."""


class RunFailed(Exception):
    """A profiled run that did not finish ok (exit 1)."""


def parse_mesh_entry(text, ranks):
    """'[N:]FLAGS' -> (N, [flags]); N defaults to `ranks`."""
    head, sep, rest = text.partition(":")
    if sep and head.strip().isdigit():
        n, flags = int(head), rest
    else:
        n, flags = ranks, text
    if n < 1:
        raise ComputeError(f"--compute-mesh {text!r}: the rank count must be at least 1")
    args = shlex.split(flags)
    if not args:
        raise ComputeError(f"--compute-mesh {text!r}: no step_bench flags")
    return n, args


def entries(model, moe_model, ranks, meshes=None):
    """[{'ranks', 'args' (step_bench flags, --model first), 'label'}]: --compute-mesh entries
    ("[N:]FLAGS", under `model` unless they name --model), else DEFAULT_MESHES under `model` and
    MOE_MESHES under `moe_model` ('none': no MoE runs)."""
    out = []
    if meshes:
        for text in meshes:
            n, args = parse_mesh_entry(text, ranks)
            out.append({"ranks": n, "args": ["--model", model] + args})
    else:
        def pick(meshes):
            # one rank: the whole model's shapes alone (ZeRO over one rank is refused)
            return [(n or ranks, a.format(R=ranks)) for n, a in meshes
                    if ranks > 1 or ("{R}" in a and "--zero" not in a)]
        out += [{"ranks": n, "args": ["--model", model] + shlex.split(a)} for n, a in pick(DEFAULT_MESHES)]
        if moe_model and moe_model != "none":
            out += [{"ranks": n, "args": ["--model", moe_model] + shlex.split(a)} for n, a in pick(MOE_MESHES)]
    for e in out:
        e["label"] = f"{e['ranks']}: {shlex.join(e['args'])}"
    return out


def commands(entry, exe, mpiexec, steps, warmup, threads, path):
    """(the plan-only command, the profiled run's command) of one entry."""
    base = ["--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads)] + entry["args"]
    plan = [exe, "--plan-only", "--world", str(entry["ranks"])] + base + ["--op-list"]
    launcher = [mpiexec, "-n", str(entry["ranks"])] if entry["ranks"] > 1 else []
    run = launcher + [exe] + base + ["--profile", "-O", path]
    return plan, run


def op_list_of(plan_cmd, timeout=120):
    """The op list step_bench --plan-only ... --op-list prints: {(op, phase, part): entry}.
    ComputeError when the plan is refused or the build prints no op_list."""
    line = shlex.join(plan_cmd)
    try:
        out = subprocess.run(plan_cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ComputeError(f"{line}: {e}")
    doc = None
    for text in out.stdout.splitlines():
        try:
            doc = json.loads(text)
            break
        except ValueError:
            continue
    if not isinstance(doc, dict):
        raise ComputeError(f"{line}: no JSON (exit {out.returncode}): {(out.stderr or out.stdout).strip()[:300]}")
    if not doc.get("valid"):
        raise ComputeError(f"{line}: refused: {doc.get('error', 'invalid plan')}")
    ops = doc.get("op_list")
    if not isinstance(ops, list):
        raise ComputeError(f"{line}: its JSON has no op_list (this step_bench does not print the op list that "
                           "the elementwise rates need: build one with --op-list)")
    return index_op_list(ops, line)


def index_op_list(ops, where):
    """op_list entries -> {(op, phase, part): entry}, entries of one key summed (the GEMMs come
    one entry per shape: their calls per (m, n, k) are kept in the sum's 'shapes'); ComputeError
    on a malformed entry."""
    got = {}
    for e in ops:
        if not isinstance(e, dict) or not all(k in e for k in ("op", "phase", "part")):
            raise ComputeError(f"{where}: op_list entry {e!r} lacks op, phase or part")
        key = (str(e["op"]), str(e["phase"]), str(e["part"]))
        for k in ("elements", "flops", "calls"):
            if not isinstance(e.get(k, 0), (int, float)) or e.get(k, 0) < 0:
                raise ComputeError(f"{where}: op_list entry {key}: {k} {e.get(k)!r} is not a number >= 0")
        d = got.setdefault(key, {"op": key[0], "phase": key[1], "part": key[2], "elements": 0.0, "flops": 0.0,
                                 "calls": 0.0, "shapes": {}})
        for k in ("elements", "flops", "calls"):
            d[k] += float(e.get(k, 0))
        if any(e.get(k) for k in ("m", "n", "k")):
            shape = (int(e.get("m", 0)), int(e.get("n", 0)), int(e.get("k", 0)))
            d["shapes"][shape] = d["shapes"].get(shape, 0.0) + float(e.get("calls", 0))
    return got


def run_profiled(run_cmd, log, timeout, env=None):
    """Run one profiled step_bench (its own process group, killed at the timeout); returns
    (exit code, seconds, timed out)."""
    from .launch import kill_group
    t0 = time.monotonic()
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(log, "w") as fh:
        fh.write(f"# {shlex.join(run_cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(run_cmd, stdout=fh, stderr=subprocess.STDOUT, env=full_env,
                                    start_new_session=True)
        except OSError as e:
            fh.write(f"{e}\n")
            return 127, 0.0, False
        try:
            rc = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            kill_group(proc)
            rc, timed_out = 124, True
    return rc, time.monotonic() - t0, timed_out


def log_tail(log, n=5):
    try:
        with open(log, errors="replace") as fh:
            return " | ".join(ln.strip() for ln in fh.read().splitlines()[-n:])
    except OSError:
        return ""


def measure(ents, opts, say=print):
    """Run every entry: ask every plan first, then profile each in turn. opts: exe, mpiexec,
    steps, warmup, threads, folder, timeout. Returns one record per entry: label, ranks,
    command, plan_command, file, log, op_list, and the run read back (run_id, steps, attrs,
    events). Raises ComputeError (a refused plan, no op list) or RunFailed."""
    os.makedirs(opts["folder"], exist_ok=True)
    recs = []
    for i, e in enumerate(ents):
        path = os.path.join(opts["folder"], f"compute-{i + 1}.h5")
        plan, run = commands(e, opts["exe"], opts["mpiexec"], opts["steps"], opts["warmup"], opts["threads"], path)
        recs.append({"label": e["label"], "ranks": e["ranks"], "plan_command": shlex.join(plan),
                     "command": shlex.join(run), "file": path, "log": path[:-3] + ".log", "_plan": plan, "_run": run})
    for r in recs:  # every plan and its op list before the first run
        r["op_list"] = op_list_of(r.pop("_plan"))
    for i, r in enumerate(recs, 1):
        for stale in (r["file"], r["file"][:-3] + ".jsonl"):
            if os.path.exists(stale):
                os.remove(stale)
        say(f"[{i}/{len(recs)}] {r['command']} ...", end="", flush=True)
        env = run_env(r["ranks"])
        rc, secs, timed_out = run_profiled(r.pop("_run"), r["log"], opts["timeout"], env)
        runs = []
        if rc == 0 and os.path.exists(r["file"]):
            try:
                runs = reader.read_events(r["file"])
            except (OSError, KeyError) as e:
                raise RunFailed(f"{r['command']}: cannot read {r['file']}: {e}")
        if rc != 0 or len(runs) != 1 or runs[0]["status"] != "ok":
            say(" failed", flush=True)
            why = "timed out" if timed_out else f"exit {rc}"
            if rc == 0:
                why = f"{len(runs)} profiled runs in {r['file']}" if len(runs) != 1 else f"status {runs[0]['status']}"
            raise RunFailed(f"{r['command']}: {why} (log {r['log']}: {log_tail(r['log'])})")
        say(f" ok ({secs:.1f} s)", flush=True)
        run = runs[0]
        r.update(run_id=run["run_id"], steps=run["steps"], attrs=run["attrs"], events=run["events"])
    return recs


# --- from events and op lists to the tables --------------------------------------------------
def split_name(name):
    """An event's name -> (role, part): 'attn.proj.bias_residual' -> ('attn.proj',
    'bias_residual'), 'moe' -> ('moe', ''), 'fc.proj.fwd' -> ('fc.proj', 'fwd'), '' -> ('', ''); a
    name that no role prefixes is all part."""
    for role in sorted(ROLES, key=len, reverse=True):
        if name == role:
            return role, ""
        if name.startswith(role + "."):
            return role, name[len(role) + 1:]
    return "", name


def compute_events(events):
    """The compute ops of a run's events: dicts rank, step, op, phase, role, part, m, n, k,
    flops, seconds (communication events, whose dim names a mesh dimension, are left out).
    role and part come from the events' own columns where a file has them, else from
    split_name of the name."""
    out = []
    for e in events:
        kind = str(e["kind"])
        if str(e.get("dim", "-")) != "-" or "." not in kind:
            continue
        role, part = (str(e["role"]), str(e["part"])) if "part" in e and "role" in e \
            else split_name(str(e.get("name", "")))
        out.append({"rank": int(e["rank"]), "step": int(e["step"]), "op": kind.split(".", 1)[0],
                    "phase": str(e["phase"]), "role": role, "part": part, "m": int(e.get("m", 0)),
                    "n": int(e.get("n", 0)), "k": int(e.get("k", 0)), "flops": float(e["flops"]),
                    "seconds": float(e["t_end"]) - float(e["t_start"])})
    return out


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


def gemm_rows(runs, threads):
    """One row per distinct GEMM (part, m, n, k) over every rank and run: flops and seconds per
    call (the median), seconds_min, seconds_max, calls, runs, threads, roles (the roles whose
    calls it pools, comma-separated), source (the first run that measured it). Returns (rows,
    notes)."""
    by, notes = {}, []
    for run in runs:
        for e in compute_events(run["events"]):
            if e["op"] != GEMM_OP:
                continue
            d = by.setdefault((e["part"], e["m"], e["n"], e["k"]), {"t": [], "flops": set(), "runs": [], "roles": []})
            d["t"].append(e["seconds"])
            d["flops"].add(e["flops"])
            if e["role"] not in d["roles"]:
                d["roles"].append(e["role"])
            if run["command"] not in d["runs"]:
                d["runs"].append(run["command"])
    rows = []
    for (part, m, n, k), d in sorted(by.items()):
        if len(d["flops"]) > 1:
            notes.append(f"GEMM {part} {m}x{n}x{k}: calls carry different FLOPs {sorted(d['flops'])}: the median kept")
        rows.append({"part": part, "m": m, "n": n, "k": k, "flops": _median(list(d["flops"])),
                     "seconds": _median(d["t"]), "seconds_min": min(d["t"]), "seconds_max": max(d["t"]),
                     "calls": len(d["t"]), "runs": len(d["runs"]), "threads": threads,
                     "roles": ",".join(d["roles"]), "source": d["runs"][0]})
    return rows, notes


def run_rates(run):
    """One run's rates: rank 0's non-GEMM ops per (op, phase, part), each with its unit ('flop'
    or 'element', as the op list counts it), seconds_per_unit, units_per_step,
    seconds_per_step, calls_per_step, source, label. Returns (rows, notes): what could not be
    rated, and where the op list and the run disagree (calls, FLOPs), GEMMs included."""
    steps = run["steps"]
    label = run["label"]
    if steps < 1:
        raise ComputeError(f"{run['command']}: the run timed no step")
    ops = run["op_list"]
    agg = {}
    for e in compute_events(run["events"]):
        if e["rank"] != 0:
            continue
        d = agg.setdefault((e["op"], e["phase"], e["part"]), {"t": 0.0, "calls": 0, "flops": 0.0, "shapes": {}})
        d["t"] += e["seconds"]
        d["calls"] += 1
        d["flops"] += e["flops"]
        if e["op"] == GEMM_OP:
            shape = (e["m"], e["n"], e["k"])
            d["shapes"][shape] = d["shapes"].get(shape, 0) + 1
    rows, notes = [], []
    for key in sorted(set(agg) | set(ops)):
        op, phase, part = key
        name = f"{op} {phase} '{part}'"
        d, entry = agg.get(key), ops.get(key)
        if d is None:
            if entry.get("calls", 1):
                notes.append(f"[{label}] {name}: in the op list ({entry.get('calls', 0):g} calls) but the run "
                             "recorded none")
            continue
        calls, flops = d["calls"] / steps, d["flops"] / steps
        if entry is None:
            rated = op != GEMM_OP and flops > 0
            notes.append(f"[{label}] {name}: the run recorded {calls:g} calls per step, the op list has no entry"
                         + ("" if op == GEMM_OP or rated else ": not rated (no element count)"))
            if not rated:
                continue
            unit, units = "flop", flops
        else:
            if not _close(float(entry.get("calls", calls)), calls):
                notes.append(f"[{label}] {name}: the op list says {entry.get('calls', 0):g} calls per step, the run "
                             f"recorded {calls:g}")
            if flops > 0 and not _close(float(entry.get("flops", 0)), flops):
                notes.append(f"[{label}] {name}: the op list says {float(entry.get('flops', 0)):g} FLOPs per step, "
                             f"the run's events {flops:g}")
            if op == GEMM_OP:
                shapes = entry.get("shapes") or {}
                off = []
                for shape in sorted(set(shapes) | set(d["shapes"])) if shapes else []:
                    want, got = shapes.get(shape, 0.0), d["shapes"].get(shape, 0) / steps
                    if not _close(want, got):
                        off.append(f"[{label}] {name} {'x'.join(map(str, shape))}: the op list says {want:g} calls "
                                   f"per step, the run recorded {got:g}")
                if len(off) > MAX_SHAPE_NOTES:  # a routing drawn per step (hot-expert's other experts)
                    off = [f"[{label}] {name}: {len(off)} GEMM shapes differ from the op list's in calls per step "
                           "(the op list's expert rows are the routing's expectation, a drawn routing's vary by "
                           "step); each shape is timed as the run measured it"]
                notes += off
                continue  # the GEMM table's
            unit, units = ("flop", float(entry["flops"])) if entry.get("flops", 0) > 0 else \
                ("element", float(entry.get("elements", 0)))
            if units <= 0:
                notes.append(f"[{label}] {name}: the op list gives it neither FLOPs nor elements: not rated")
                continue
        sps = d["t"] / steps
        rows.append({"op": op, "phase": phase, "part": part, "unit": unit, "seconds_per_unit": sps / units,
                     "units_per_step": units, "seconds_per_step": sps, "calls_per_step": calls,
                     "source": run["command"], "label": label})
    return rows, notes


def pool_rates(per_run):
    """Per (op, phase, part, unit) the run of the median seconds_per_unit (the lower middle of
    an even count), with runs (how many measured it) and spread (max / min of their rates)."""
    by = {}
    for r in per_run:
        by.setdefault((r["op"], r["phase"], r["part"], r["unit"]), []).append(r)
    out = []
    for key in sorted(by):
        rs = sorted(by[key], key=lambda r: r["seconds_per_unit"])
        mid = dict(rs[(len(rs) - 1) // 2])
        lo, hi = rs[0]["seconds_per_unit"], rs[-1]["seconds_per_unit"]
        mid.update(runs=len(rs), spread=hi / lo if lo > 0 else float("inf"))
        out.append(mid)
    return out


def reduce_runs(runs, threads):
    """(gemm rows, pooled rate rows, every run's rate rows, notes) of measured runs (records of
    measure, or generated ones: label, command, steps, events, op_list)."""
    gemm, notes = gemm_rows(runs, threads)
    per_run = []
    for run in runs:
        rows, n = run_rates(run)
        per_run += rows
        notes += n
    pooled = pool_rates(per_run)
    both = {}
    for r in pooled:
        both.setdefault((r["op"], r["phase"], r["part"]), []).append(r["unit"])
    notes += [f"{op} {ph} '{part}': rated per flop in some runs and per element in others: a reader takes the "
              f"first row" for (op, ph, part), units in both.items() if len(units) > 1]
    return gemm, pooled, per_run, notes


def check_runs(runs, threads):
    """Notes on the runs: threads other than asked, oversubscribed ranks, another device."""
    notes = []
    for r in runs:
        a = r.get("attrs") or {}
        if a.get("threads") not in (None, threads):
            notes.append(f"[{r['label']}] ran {a.get('threads')} threads per rank, not {threads}")
        if a.get("threads_oversubscribed"):
            notes.append(f"[{r['label']}] oversubscribed: more ranks x threads than cores; its times are the "
                         "scheduler's")
    return notes


def device_of(runs):
    devs = sorted({str((r.get("attrs") or {}).get("device", "cpu")) for r in runs})
    return ",".join(devs) or "cpu"


def attrs(runs, threads, model, opts, predict=None):
    """The /compute group's attributes. `predict`: the collective fits (in_step_factors), or None."""
    skew, calls, per_run = arrival_skew(runs)
    factor, factors, fcalls = in_step_factors(runs, predict) if predict else (None, {}, 0)
    pfactor, pfactors, pcalls = posted_factors(runs, predict) if predict else (None, {}, 0)
    ofactor, ofactors, ocalls = overlapped_factors(runs, predict) if predict else (None, {}, 0)
    posts, post_calls = post_factors(runs, predict) if predict else ({}, 0)
    extra = {} if skew is None else {
        "arrival_skew": skew, "arrival_skew_calls": calls, "arrival_skew_runs": json.dumps(per_run),
        "arrival_skew_rule": ("per second of compute since a rank last left a communication call, how far apart "
                              "the ranks reach the next collective: per run of 2+ ranks, the sum over matched calls "
                              "(step, dim, kind, index; posted calls arriving when their wait began) of max - min "
                              "arrival over the sum of the ranks' mean segment; the median over the runs (lower "
                              "middle; runs with an uneven routing workload over ep > 1 left out: the model "
                              "times their waits); pipeline calls left out")}
    skews, skew_runs = arrival_skews(runs)
    if skews:
        extra.update({"arrival_skews": json.dumps(skews), "arrival_skews_runs": json.dumps(skew_runs),
                      "arrival_skews_rule": ("arrival_skew per call site (dim/collective): per counted run, the "
                                             "sum over its matched calls of that dimension and collective of max - "
                                             "min arrival over the sum of the ranks' mean segment; the median over "
                                             "the runs that make such calls (lower middle); a call site without an "
                                             "entry takes arrival_skew")})
    if factor is not None:
        extra.update({"in_step_factor": factor, "in_step_factors": json.dumps(factors), "in_step_factor_calls": fcalls,
                      "in_step_factor_rule": ("per collective: the sum over blocking calls matched across the ranks "
                                              "of min t_end - max t_start (from the last arrival to the first "
                                              "completion) over the sum of the fits' times for their sizes; "
                                              "all_to_allv by the all_to_all fit")})
    if pfactor is not None:
        extra.update({"posted_factor": pfactor, "posted_factors": json.dumps(pfactors), "posted_factor_calls": pcalls,
                      "posted_factor_rule": ("per collective: the sum over posted calls (t_wait after t_start) of "
                                             "the dp and edp dimensions "
                                             "matched across the ranks of min t_end - max t_wait (from the last "
                                             "rank's start of the wait to the first completion, 0 if negative) over "
                                             "the sum of the fits' times for their sizes; ZeRO-3's calls that the "
                                             "polls complete left out (overlapped_factor)")})
    if ofactor is not None:
        extra.update({"overlapped_factor": ofactor, "overlapped_factors": json.dumps(ofactors),
                      "overlapped_factor_calls": ocalls,
                      "overlapped_factor_rule": ("per collective: over ZeRO-3's calls that the polls complete while "
                                                 "the rank computes (its dp gathers posted a unit ahead by the "
                                                 "prefetch, its dp reduce-scatters before the step's last), matched "
                                                 "across the ranks, the sum of the ranks' mean t_end - t_wait over "
                                                 "the sum of the fits' times for their sizes")})
    if posts:
        extra.update({"post_factors": json.dumps(posts), "post_factor_calls": post_calls,
                      "post_factors_rule": ("per call site (dim/collective): over its calls matched across the "
                                            "ranks, blocking and posted, the sum of the ranks' mean t_posted - "
                                            "t_post (the time spent posting a call) over the sum of the fits' "
                                            "times for their sizes")})
    return {**extra, "threads": threads, "model": model, "backend": device_of(runs), "steps": opts["steps"],
            "warmup": opts["warmup"],
            "commands": json.dumps([r["command"] for r in runs]),
            "runs": json.dumps([{"label": r["label"], "ranks": r["ranks"], "command": r["command"],
                                 "plan_command": r["plan_command"], "file": r["file"], "run_id": r.get("run_id", ""),
                                 "steps": r.get("steps")} for r in runs]),
            "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "gemm_rule": ("per distinct (part, m, n, k): the median seconds per call over every call of every rank "
                          "in the timed steps of every run; part: the op's part without its role (step/events' "
                          "name role.part split)"),
            "rate_rule": ("rank 0 (the rank the op list describes), per (op, phase, part): seconds per step = the sum "
                          "over the timed steps of the events' t_end - t_start / steps, over the op list's units per "
                          "step (its flops, else its elements; without an entry the events' FLOPs); the row kept is "
                          "the run of the median rate (lower middle), runs and spread (max/min) beside it")}


def default_folder(out):
    """Where the profiled step files go: beside --out (CAL.compute/), else a temporary folder."""
    if out:
        base = out[:-3] if out.endswith(".h5") else out
        return base + ".compute", False
    return tempfile.mkdtemp(prefix="calibrate-compute-"), True


# --- printing ----------------------------------------------------------------------------------
def rate_text(r):
    if r["unit"] == "flop":
        return f"{1e-9 / r['seconds_per_unit']:.3g} GFLOP/s" if r["seconds_per_unit"] > 0 else "-"
    return f"{r['seconds_per_unit'] * 1e9:.3g} ns/element"


def table_text(gemm, pooled, notes, runs):
    out = [f"compute: {len(runs)} profiled run(s), {len(gemm)} GEMM shapes, {len(pooled)} op rates", "",
           "| part | roles | m | n | k | calls | runs | median (us) | GFLOP/s | min-max (us) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for g in gemm:
        gf = g["flops"] / g["seconds"] / 1e9 if g["seconds"] > 0 else float("nan")
        out.append(f"| {g['part'] or '-'} | {g['roles'] or '-'} | {g['m']} | {g['n']} | {g['k']} | {g['calls']} | "
                   f"{g['runs']} | "
                   f"{g['seconds'] * 1e6:.4g} | {gf:.3g} | {g['seconds_min'] * 1e6:.3g}-{g['seconds_max'] * 1e6:.3g} |")
    out += ["", "| op | phase | part | rate | per step (ms) | units per step | calls per step | runs | spread | run |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in pooled:
        out.append(f"| {r['op']} | {r['phase']} | {r['part'] or '-'} | {rate_text(r)} | "
                   f"{r['seconds_per_step'] * 1e3:.4g} | {r['units_per_step']:.4g} {r['unit']} | "
                   f"{r['calls_per_step']:g} | {r['runs']} | {r['spread']:.2f}x | {r['label']} |")
    text = "\n".join(out) + "\n"
    text += ("\nGEMM: median seconds per call over every rank's calls in the timed steps (part: without its role; "
             "roles: whose calls it pools); rates: rank 0, seconds per step over the op list's FLOPs or elements "
             "per step; per key the run of the median rate, spread = max/min over the runs that measured it.\n")
    if notes:
        text += "\nCompute notes:\n" + "".join(f"- {n}\n" for n in notes)
    return text
