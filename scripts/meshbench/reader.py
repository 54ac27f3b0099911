"""meshbench.reader: the one reader of meshbench HDF5 files (layout: docs/results.md).

Returns plain tables: a list of dicts per collective point, and one dict per step_bench run
holding its attributes (JSON-valued ones parsed), arrays (step_times, phases, loss) and its
compound tables (summary, comm, memory, check) as lists of dicts. Strings come back as str.
It only reads: it computes nothing the binaries already stored (bandwidths, medians, MFU) and
never changes a file. The one derived step table (step_table) divides stored totals by the
step count and picks rank 0's memory; the rules are stated where it does.

  from meshbench import reader
  rows, bad = reader.load_collectives(["results/1234/"])     # one dict per (run, group, size)
  runs, bad = reader.load_steps(["zero.h5"])                  # one dict per step_bench run
  table = reader.step_table(runs)                             # one flat row per run

Beside the results files it reads the calibration file scripts/calibrate writes (docs/results.md,
"Calibration files"): read_calibration, and calibration_attrs for its root attributes alone.
"""
import glob
import json
import math
import os
import sys

# Collective row fields, in output order for CSV/JSON. Times in seconds, bandwidth in GB/s.
COLLECTIVE_FIELDS = [
    "file", "run_id", "binary", "collective", "tag", "backend", "mem", "timing", "status",
    "ranks", "nodes", "ranks_per_node", "oversubscribed", "group", "group_size", "span",
    "mesh", "dtype", "redop", "placement", "root", "bytes", "count", "send_bytes_per_rank",
    "recv_bytes_per_rank", "total_bytes", "t_median", "t_min", "t_mean", "t_p99", "t_first",
    "algbw", "busbw", "wrong", "slowest_rank", "iters", "warmup_calls", "warmup_converged",
    "rank_stat", "t_median_max", "t_median_avg", "t_median_min", "t_median_rank0",
    "slurm_job_id", "start_time"]
COLLECTIVE_NUMERIC = {
    "ranks", "nodes", "ranks_per_node", "oversubscribed", "group_size", "root", "bytes", "count",
    "send_bytes_per_rank", "recv_bytes_per_rank", "total_bytes", "t_median", "t_min", "t_mean",
    "t_p99", "t_first", "algbw", "busbw", "wrong", "slowest_rank", "iters", "warmup_calls",
    "warmup_converged", "t_median_max", "t_median_avg", "t_median_min", "t_median_rank0"}

# Fixed step-table fields (step_table adds bytes.<dim>.<kind>, mem.<category> and
# mem_analytic.<category> columns for what each file holds).
STEP_FIELDS = [
    "file", "run_id", "binary", "tag", "status", "ranks", "strategy", "zero_stage", "degrees",
    "dp", "tp", "pp", "cp", "ep", "microbatches", "global_batch", "steps", "step_time_median",
    "step_time_min", "step_time_p99", "tokens_per_s", "model_flops_per_s", "mfu_measured_peak",
    "mfu_datasheet", "exposed_comm_fraction", "exposed_comm_fraction_dp", "bytes_match", "check",
    "loss_last", "straggler_rank", "start_time", "compute"]
STEP_NUMERIC = {
    "ranks", "zero_stage", "dp", "tp", "pp", "cp", "ep", "microbatches", "global_batch", "steps",
    "step_time_median", "step_time_min", "step_time_p99", "tokens_per_s", "model_flops_per_s",
    "mfu_measured_peak", "mfu_datasheet", "exposed_comm_fraction", "exposed_comm_fraction_dp",
    "bytes_match", "loss_last", "straggler_rank"}
# Memory categories a step run stores per rank (docs/results.md), the five that add up first.
MEMORY_PARTS = ["params", "grads", "optimizer", "activations", "buffers"]
MEMORY_CATEGORIES = MEMORY_PARTS + ["engine_peak", "process_peak_rss"]
# Calibration files (scripts/calibrate writes them, format_version meshbench.calibrate.FORMAT_VERSION):
# their kind attribute and the format_versions read_calibration reads.
CALIBRATION_KIND = "meshbench calibration"
CALIBRATION_READS = (1, 2)  # format_version 1: the collective fits alone (its compute group is empty)


def mode_suffix(attrs):
    """' [attention naive]', ' [recompute full]', ' [recompute full x2]' (--recompute-layers 2):
    a run's attention and recomputation where they are not the defaults (flash, none); '' for
    a file that does not record them."""
    text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
    s = ""
    if attrs.get("attention") is not None and text(attrs["attention"]) != "flash":
        s += f" [attention {text(attrs['attention'])}]"
    rc = None if attrs.get("recompute") is None else text(attrs["recompute"])
    if rc is not None and rc != "none":
        layers = int(attrs.get("recompute_layers", 0) or 0)
        s += f" [recompute {rc}{f' x{layers}' if layers > 0 else ''}]"
    return s


def text(v):
    """An HDF5 string (bytes, numpy bytes_ or str) as a Python str."""
    if hasattr(v, "tobytes") and not isinstance(v, (bytes, str)):
        v = v.tobytes() if v.dtype.kind == "S" else v.item()
    if isinstance(v, bytes):
        return v.rstrip(b"\0").decode("utf-8", "replace")
    return str(v)


def scalar(v):
    """A numpy scalar as a Python number; anything else unchanged."""
    try:
        return v.item() if hasattr(v, "item") else v
    except ValueError:
        return v


def attrs_dict(obj, json_keys=()):
    """Every attribute of an HDF5 object as str/int/float; json_keys are parsed as JSON."""
    out = {}
    for k, v in obj.attrs.items():
        v = scalar(v)
        if isinstance(v, (bytes, str)) or (hasattr(v, "dtype") and v.dtype.kind == "S"):
            v = text(v)
            if k in json_keys and v:
                try:
                    v = json.loads(v)
                except ValueError:
                    pass
        out[k] = v
    return out


def table(dset):
    """A compound dataset as a list of dicts (strings decoded, numbers as Python numbers)."""
    arr = dset[()]
    names = arr.dtype.names or ()
    return [{k: (text(row[k]) if arr.dtype[k].kind == "S" else scalar(row[k])) for k in names}
            for row in arr]


class FormatError(ValueError):
    """A file HDF5 can read whose content is not the schema's (docs/results.md): a dataset of
    strings where numbers belong, a table without its fields. The scripts print its one line,
    which names the file and the dataset, and exit 2 (bad input), as for a missing file."""


def numbers(path, dset):
    """A dataset of numbers as a float array; FormatError naming the file, the dataset and what it
    holds instead."""
    import numpy as np
    if dset.dtype.kind not in "biuf":
        what = {"S": "strings", "U": "strings", "O": "strings or objects", "V": "a table"}.get(dset.dtype.kind,
                                                                                               str(dset.dtype))
        raise FormatError(f"{path}: {dset.name} holds {what} ({dset.dtype}), not numbers: not a file the binaries "
                          f"wrote, or a damaged one (docs/results.md)")
    return np.asarray(dset[()], dtype=float)


def expand_paths(paths):
    """Files and folders (searched recursively for *.h5) -> a list of files. Below a folder,
    subfolders named `stale` are left out: scripts/sweep keeps there the earlier files of rounds
    it ran again (meshbench.launch.set_aside); name such a folder itself to read it."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            found = glob.glob(os.path.join(p, "**", "*.h5"), recursive=True)
            files += sorted(f for f in found if "stale" not in os.path.relpath(f, p).split(os.sep)[:-1])
        else:
            files.append(p)
    return files


def _run_fields(path, run_id, a):
    return {
        "file": path, "run_id": run_id, "binary": text(a.get("binary", "")),
        "tag": text(a.get("tag", "")), "backend": text(a.get("backend", "")),
        "mem": text(a.get("mem", "")), "timing": text(a.get("timing", "")),
        "status": text(a.get("status", "")), "ranks": int(scalar(a.get("world_size", 0))),
        "nodes": int(scalar(a.get("nodes", 0))),
        "ranks_per_node": int(scalar(a.get("ranks_per_node", 0))),
        "oversubscribed": int(scalar(a.get("oversubscribed", 0))),
        "mesh": text(a.get("mesh", "{}")), "iters": int(scalar(a.get("iters", 0))),
        "slurm_job_id": text(a.get("slurm_job_id", "")),
        "start_time": text(a.get("start_time", "")),
    }


def run_statuses(path):
    """{run_id: status} of one file (raises OSError if it cannot be opened)."""
    import h5py  # here, so that `--help` works without h5py
    with h5py.File(path, "r") as f:
        runs = f.get("runs")
        return {} if runs is None else {rid: text(r.attrs.get("status", "")) for rid, r in runs.items()}


def read_file_attrs(path):
    """One file's root attributes and every run's, as attrs_dict reads them (strings as str,
    nothing parsed): ({name: value}, {run_id: {name: value}}), the second {} without /runs
    (raises OSError if it cannot be opened)."""
    import h5py
    with h5py.File(path, "r") as f:
        runs = f.get("runs")
        return attrs_dict(f), {rid: attrs_dict(r) for rid, r in (runs.items() if runs is not None else [])}


def group_spans(run):
    """Group size and the set of node spans per mesh dimension, from a run's topology/groups
    (issue 3): ({dim: size}, {dim: {"intra", "inter", ...}})."""
    gsize, gspan = {}, {}
    tg = run.get("topology/groups")
    if tg is not None:
        for g in tg[()]:
            dim = text(g["dim"])
            gsize.setdefault(dim, int(g["size"]))
            gspan.setdefault(dim, set()).add(text(g["span"]))
    return gsize, gspan


def group_ranks(run):
    """[(dim, [member ranks])] for every group of a run's topology/groups, in order: the members
    from topology/group_members (every rank), else from the groups' `ranks` text (cut at 255
    characters in the file); [] without a topology."""
    tg = run.get("topology/groups")
    if tg is None:
        return []
    gm = run.get("topology/group_members")
    members = gm[()] if gm is not None else None
    out = []
    for i, g in enumerate(tg[()]):
        if members is not None and i < len(members):
            ranks = [int(x) for x in members[i] if x >= 0]
        else:
            ranks = [int(x) for x in text(g["ranks"]).split(",") if x.strip().isdigit()]
        out.append((text(g["dim"]), ranks))
    return out


def read_collectives(path, with_samples=False):
    """All collective rows of one file. with_samples adds 'samples' ([iters, ranks] seconds)."""
    import h5py
    rows = []
    with h5py.File(path, "r") as f:
        runs = f.get("runs")
        if runs is None:
            return rows
        for run_id, run in runs.items():
            colls = run.get("collectives")
            if colls is None:
                continue
            ra = _run_fields(path, run_id, run.attrs)
            gsize, gspan = group_spans(run)
            for coll_name, coll in colls.items():
                for g in coll.values():
                    if "summary" in g:
                        try:
                            rows += _collective_group_rows(g, coll_name, ra, gsize, gspan, with_samples)
                        except (ValueError, TypeError, KeyError) as e:
                            raise FormatError(f"{path}: {g.name}: {e}: not the summary table the binaries write, "
                                              f"or a damaged one (docs/results.md)") from None
    return rows


def _collective_group_rows(g, coll_name, ra, gsize, gspan, with_samples):
    ga = g.attrs
    summary = g["summary"][()]
    sizes = g["sizes"][()] if "sizes" in g else None
    samples = g["samples"] if with_samples and "samples" in g else None
    names = summary.dtype.names
    rows = []
    for i, srow in enumerate(summary):
        r = dict(ra)
        r["collective"] = text(ga.get("collective", coll_name))
        r["group"] = text(ga.get("group", "world"))
        r["group_size"] = gsize.get(r["group"], ra["ranks"] if r["group"] == "world" else None)
        spans = gspan.get(r["group"], set())
        r["span"] = next(iter(spans)) if len(spans) == 1 else ("mixed" if spans else "")
        r["placement"] = text(ga.get("placement", ""))
        r["dtype"] = text(srow["dtype"])
        r["redop"] = text(srow["redop"])
        for k in ("bytes", "count", "root", "wrong", "slowest_rank"):
            r[k] = int(srow[k])
        for k in ("t_median", "t_min", "t_mean", "t_p99", "t_first", "algbw", "busbw"):
            r[k] = float(srow[k])
        # Files from before adaptive warm-up: -n and -w from the attributes.
        r["iters"] = int(srow["iters"]) if "iters" in names else ra["iters"]
        r["warmup_calls"] = int(srow["warmup_calls"]) if "warmup_calls" in names else int(scalar(ga.get("warmup", 0)))
        r["warmup_converged"] = int(srow["warmup_converged"]) if "warmup_converged" in names else -1
        r["rank_stat"] = text(ga.get("rank_stat", "max"))
        for k in ("t_median_max", "t_median_avg", "t_median_min", "t_median_rank0"):
            r[k] = float(srow[k]) if k in names else (r["t_median"] if k == "t_median_max" else None)
        if sizes is not None and i < len(sizes):
            for k in ("send_bytes_per_rank", "recv_bytes_per_rank", "total_bytes"):
                r[k] = int(sizes[i][k])
        if samples is not None and i < samples.shape[0]:
            r["samples"] = samples[i]
        rows.append(r)
    return rows


def read_steps(path):
    """Every step_bench run of one file: a dict with 'file', 'run_id', 'run' (run attributes,
    mesh/env parsed), 'attrs' (step attributes, degrees parsed), 'phase_names', arrays
    'step_times' [steps, ranks], 'phases' [steps, ranks, n_phases], 'loss' [steps], and tables
    'summary' (one dict, or {} before the run finished), 'comm', 'memory', 'check' and
    'time_split' (lists; time_split: rank, category, seconds per timed step; empty in files
    written before it existed); 'groups' (group_ranks: [(dim, member ranks)]); pipeline runs
    also 'pipeline' (a row per rank: stored
    activations, bubble), 'activation_slots' and 'passes' (forwards F, backwards B, sends S,
    receives R per rank and step); 'predicted' (read_predicted: step/predicted of a run given
    --predict, else None)."""
    import h5py
    import numpy as np
    out = []
    with h5py.File(path, "r") as f:
        runs = f.get("runs")
        if runs is None:
            return out
        for run_id, run in runs.items():
            step = run.get("step")
            if step is None:
                continue
            attrs = attrs_dict(step, json_keys=("degrees",))
            names = attrs.get("phase_names", "")
            summary = table(step["summary"]) if "summary" in step else []
            r = {"file": path, "run_id": run_id,
                 "run": attrs_dict(run, json_keys=("mesh", "env", "slurm")),
                 "fields": _run_fields(path, run_id, run.attrs), "attrs": attrs,
                 "phase_names": json.loads(names) if names.startswith("[") else
                 [n for n in names.replace(",", " ").split() if n],
                 "summary": summary[0] if summary else {}}
            for k in ("step_times", "phases", "loss"):
                r[k] = numbers(path, step[k]) if k in step else np.zeros((0,))
            for k in ("comm", "memory", "check", "time_split", "pipeline", "activation_slots", "passes"):
                r[k] = table(step[k]) if k in step else []
            r["spans"] = group_spans(run)[1]
            r["groups"] = group_ranks(run)
            r["predicted"] = read_predicted(step)
            out.append(r)
    return out


def read_predicted(step):
    """A step run's step/predicted group (step_bench --predict CAL.h5: the model's prediction
    stored beside the measurement; docs/results.md) as {'attrs': its attributes (step_time_s,
    tokens_per_s, bubble, extrapolated, calibration, fabric), 'exposed': [{dim, seconds}],
    'per_rank': [{rank, step_time_s, compute_s, bubble_s, exposed_s}]}; None when the run was
    not given --predict."""
    g = step.get("predicted")
    if g is None:
        return None
    return {"attrs": attrs_dict(g), "exposed": table(g["exposed"]) if "exposed" in g else [],
            "per_rank": table(g["per_rank"]) if "per_rank" in g else []}


def read_events(path):
    """The step_bench runs of one file that stored step/events (--profile, --trace): one dict
    per run, {'file', 'run_id', 'status', 'attrs' (step attributes), 'steps' (the timed steps:
    rows of step_times; the events' `step` counts them from 0), 'events' (step/events as a list
    of dicts: rank, step, microbatch, chunk, layer, kind ('matmul.fwd', 'all_reduce'), dim ('-'
    for a compute op), phase, group, bytes, flops, t_start, t_end, name, m, n, k, ...)}. Kept out
    of read_steps: a profile holds thousands of rows that the step tables never need."""
    import h5py
    out = []
    with h5py.File(path, "r") as f:
        runs = f.get("runs")
        if runs is None:
            return out
        for run_id, run in runs.items():
            step = run.get("step")
            if step is None or "events" not in step:
                continue
            shape = step["step_times"].shape if "step_times" in step else (0,)
            out.append({"file": path, "run_id": run_id, "status": text(run.attrs.get("status", "")),
                        "attrs": attrs_dict(step), "steps": int(shape[0]) if len(shape) else 0,
                        "events": table(step["events"])})
    return out


def calibration_attrs(path):
    """A calibration file's root attributes (kind, format_version, tool, argv and sources parsed
    from JSON, created), whatever kind of file it is (raises OSError if it cannot be opened)."""
    import h5py
    with h5py.File(path, "r") as f:
        return attrs_dict(f, json_keys=("sources", "argv"))


def read_calibration(path):
    """A calibration file as {'attrs' (calibration_attrs), 'collective_attrs', 'fits', 'points',
    'unfitted', 'compute'} (lists of dicts, strings as str); compute: {'attrs' (commands, runs
    and notes parsed), 'gemm', 'rates', 'rate_runs'}, its tables empty in format_version 1 (which
    had none). FormatError unless it is a calibration file (CALIBRATION_KIND) of a format_version
    in CALIBRATION_READS; OSError if it cannot be opened; KeyError for a group or table it lacks."""
    import h5py
    a = calibration_attrs(path)
    if a.get("kind") != CALIBRATION_KIND or a.get("format_version") not in CALIBRATION_READS:
        raise FormatError(f"{path}: not a calibration file of format_version "
                          f"{' or '.join(map(str, CALIBRATION_READS))} (kind {a.get('kind')!r}, format_version "
                          f"{a.get('format_version')!r})")
    with h5py.File(path, "r") as f:
        c = f["collectives"]
        g = f["compute"]
        comp = {"attrs": attrs_dict(g, json_keys=("commands", "runs", "notes"))}
        for t in ("gemm", "rates", "rate_runs"):
            comp[t] = table(g[t]) if a["format_version"] >= 2 else []
        return {"attrs": a, "collective_attrs": attrs_dict(c), "fits": table(c["fits"]),
                "points": table(c["points"]), "unfitted": table(c["unfitted"]), "compute": comp}


def _load(reader, paths, quiet, who):
    got, bad = [], []
    for p in expand_paths(paths):
        try:
            got += reader(p)
        except (OSError, KeyError) as e:
            bad.append(p)
            if not quiet:
                print(f"{who}: cannot read {p}: {e}", file=sys.stderr)
    return got, bad


def load_collectives(paths, with_samples=False, quiet=False, who="report"):
    """Collective rows of every readable file under paths; unreadable files are listed in bad
    (and reported on stderr as '<who>: cannot read ...'), not fatal."""
    return _load(lambda p: read_collectives(p, with_samples), paths, quiet, who)


def load_steps(paths, quiet=False, who="report"):
    """Step runs of every readable file under paths, and the unreadable files."""
    return _load(read_steps, paths, quiet, who)


def step_table(runs):
    """One flat row per step run (STEP_FIELDS, then per-file columns):
    - bytes.<dim>.<kind>: payload bytes per rank and step, the largest rank's comm 'bytes'
      (a total over the timed steps) divided by the number of timed steps (step_times rows);
    - mem.<category> / mem_analytic.<category>: rank 0's measured peak and analytic bytes;
      mem.total / mem_analytic.total: their sums over MEMORY_PARTS."""
    rows = []
    for run in runs:
        a, s, f = run["attrs"], run["summary"], run["fields"]
        deg = a.get("degrees") if isinstance(a.get("degrees"), dict) else {}
        steps = int(run["step_times"].shape[0]) if run["step_times"].ndim == 2 else 0
        r = {k: f[k] for k in ("file", "run_id", "binary", "tag", "status", "ranks", "oversubscribed", "start_time")}
        r.update(strategy=str(a.get("strategy", "")), zero_stage=int(a.get("zero_stage", 0) or 0),
                 degrees=",".join(f"{k}={v}" for k, v in deg.items() if v != 1) or "single",
                 microbatches=a.get("microbatches"), global_batch=a.get("global_batch"), steps=steps)
        for k in ("dp", "tp", "pp", "cp", "ep"):
            r[k] = deg.get(k, 1)
        for k in ("step_time_median", "step_time_min", "step_time_p99", "tokens_per_s",
                  "model_flops_per_s", "mfu_measured_peak", "mfu_datasheet", "exposed_comm_fraction",
                  "exposed_comm_fraction_dp", "bytes_match", "check", "loss_last", "straggler_rank"):
            r[k] = s.get(k)
        per = {}
        for c in run["comm"]:
            key = f"bytes.{c['dim']}.{c['kind']}"
            per[key] = max(per.get(key, 0), int(c["bytes"]))
        for key in sorted(per):
            r[key] = per[key] / steps if steps else math.nan
        for dim, spans in sorted(run.get("spans", {}).items()):
            r[f"span.{dim}"] = next(iter(spans)) if len(spans) == 1 else "mixed"
        r["sequence_parallel"] = bool(a.get("sequence_parallel", False))
        # --compute modelled (docs/modelled.md): no model ran; marked in the strategy so no table or
        # plot mixes it with a real run
        r["compute"] = str(a.get("compute_mode", "real"))
        if r["compute"] == "modelled":
            r["strategy"] += " [modelled compute]"
        # the attention and recomputation (files before 2026-12-03 do not say: None), marked in
        # the strategy when not the default (flash, none) so no table mixes them
        r["attention"] = a.get("attention")
        r["recompute"] = a.get("recompute")
        r["strategy"] += mode_suffix(a)
        for m in run["memory"]:
            if int(m["rank"]) == 0:
                r[f"mem.{m['category']}"] = float(m["measured_bytes"])
                r[f"mem_analytic.{m['category']}"] = float(m["analytic_bytes"])
        if run["memory"]:
            # The five categories that add up (not engine_peak / process_peak_rss, which are
            # peaks of their own); the analytic total is NaN where a part has no formula.
            r["mem.total"] = sum(r.get(f"mem.{c}", 0.0) for c in MEMORY_PARTS)
            r["mem_analytic.total"] = sum(r.get(f"mem_analytic.{c}", math.nan) for c in MEMORY_PARTS)
        rows.append(r)
    return rows
