#!/usr/bin/python3
"""tests/scripts/h5truth.py: independent reader for the script tests. Reads the HDF5 files with
h5py directly (not through scripts/report) and checks a report's output against them.

  h5truth.py json REPORT.json FILE.h5...     every row equals the file (exact floats), none missing
  h5truth.py csv REPORT.csv FILE.h5...       same for CSV (full-precision floats)
  h5truth.py md report.md FILE.h5...         one Markdown row per summary row (a table per collective),
                                            time column = t_median in us
  h5truth.py compare REPORT.json A.h5 B.h5   ratio_t = t_median(B)/t_median(A) for every size of every group
  h5truth.py status FILE.h5 [STATUS]         print the status of every run (exit 1 unless all == STATUS)
  h5truth.py attr FILE.h5 NAME               print a run attribute of the first run
  h5truth.py steps FILE.h5                   print step_truth(FILE.h5) as JSON

From Python (sys.path.insert(0, "tests/scripts"); import h5truth): step_truth(path[, run_id]),
the plan table's quantities of a step run, read here from the datasets (the time split as
step/time_split stores it: nothing derived), and step_runs(path).
Exit 0 when every check holds, 1 with the first mismatch.
"""
import csv
import json
import sys

import h5py


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def truth(files):
    """{(file, run_id, collective, placement, group, bytes): summary row dict}."""
    out = {}
    for f in files:
        with h5py.File(f, "r") as h:
            for rid, run in h["runs"].items():
                sizes = {}
                if "topology/groups" in run:
                    for g in run["topology/groups"][()]:
                        sizes.setdefault(s(g["dim"]), int(g["size"]))
                for cname, coll in run["collectives"].items():
                    for gname, g in coll.items():
                        for row in g["summary"][()]:
                            d = {k: (s(row[k]) if row.dtype[k].kind == "S" else row[k].item())
                                 for k in row.dtype.names}
                            d["tag"] = s(run.attrs["tag"])
                            d["ranks"] = int(run.attrs["world_size"])
                            d["group_size"] = sizes.get(s(g.attrs["group"]))
                            key = (f, rid, cname, s(g.attrs["placement"]), s(g.attrs["group"]), d["bytes"])
                            out[key] = d
    return out


def step_truth(path, run_id=None):
    """The plan-table quantities of one step run in path (its only run, or run_id), from the
    datasets (README, "Reading the report"; docs/metrics.md): summary numbers; 'split', the mean
    over ranks of every step/time_split category (absent in files before it: {}), and
    'exposed' its exposed.<dim> per dim; 'split_ranks' the per-rank rows; the worst stage's
    bubble (step/pipeline, only with a time split); the largest engine_peak (and the ranks at
    it); per-rank totals of the five memory parts ('mem_totals'); 'step_samples', each timed
    step's slowest rank; 'global_batch' and 'tokens_per_step' (global_batch x seq); dims whose
    groups cross nodes."""
    with h5py.File(path, "r") as h:
        if run_id is None:
            (run_id,) = h["runs"].keys()
        rid = run_id
        run = h["runs"][rid]
        st = run["step"]
        summ = st["summary"][0]
        steps, ranks = st["step_times"].shape
        t = {"run_id": rid, "status": s(run.attrs["status"]), "tag": s(run.attrs["tag"]), "ranks": ranks,
             "check": s(summ["check"]), "global_batch": int(st.attrs["global_batch"]),
             "tokens_per_step": int(st.attrs["global_batch"]) * int(st.attrs["seq"]),
             "step_samples": [float(x) for x in st["step_times"][()].max(axis=1)]}
        for k in ("step_time_median", "tokens_per_s", "mfu_measured_peak"):
            t[k] = float(summ[k])
        per_rank = {}
        if "time_split" in st:
            for row in st["time_split"][()]:
                per_rank.setdefault(int(row["rank"]), {})[s(row["category"])] = float(row["seconds"])
        t["split_ranks"] = per_rank
        cats = sorted({c for d in per_rank.values() for c in d})
        t["split"] = {c: sum(d.get(c, 0.0) for d in per_rank.values()) / len(per_rank) for c in cats}
        t["exposed"] = {c.split(".", 1)[1]: v for c, v in t["split"].items() if c.startswith("exposed.")}
        pipe = st["pipeline"][()] if "pipeline" in st else []
        if len(pipe) and per_rank:
            t["bubble_worst"] = float(max(p["bubble"] for p in pipe))
        peaks = [(float(m["measured_bytes"]), int(m["rank"])) for m in st["memory"][()]
                 if s(m["category"]) == "engine_peak"]
        t["mem_peak"] = max(peaks)[0]
        t["mem_peak_ranks"] = [r for v, r in peaks if v == t["mem_peak"]]
        totals = {}
        for m in st["memory"][()]:
            if s(m["category"]) in ("params", "grads", "optimizer", "activations", "buffers"):
                totals[int(m["rank"])] = totals.get(int(m["rank"]), 0.0) + float(m["measured_bytes"])
        t["mem_totals"] = totals
        t["cross_nodes"] = sorted({s(g["dim"]) for g in run["topology/groups"][()]
                                   if s(g["dim"]) != "world" and s(g["span"]) in ("inter", "mixed")})
    return t


def step_runs(path):
    """The run ids of a file's step runs, in file order."""
    with h5py.File(path, "r") as h:
        return [rid for rid, r in h["runs"].items() if "step" in r]


def die(msg):
    print(f"h5truth: MISMATCH: {msg}", file=sys.stderr)
    sys.exit(1)


def check_rows(rows, files):
    t = truth(files)
    if len(rows) != len(t):
        die(f"report has {len(rows)} rows, the files hold {len(t)} summary rows")
    seen = set()
    for r in rows:
        key = (r["file"], r["run_id"], r["collective"], r["placement"], r["group"], int(r["bytes"]))
        if key not in t:
            die(f"report row {key} is not in the files")
        seen.add(key)
        want = t[key]
        for k in ("t_median", "t_min", "t_mean", "t_p99", "t_first", "algbw", "busbw"):
            if float(r[k]) != want[k]:
                die(f"{key} {k}: report {r[k]!r} != file {want[k]!r}")
        for k in ("count", "wrong", "slowest_rank"):
            if int(r[k]) != want[k]:
                die(f"{key} {k}: report {r[k]!r} != file {want[k]!r}")
        if want["group_size"] is not None and int(r["group_size"]) != want["group_size"]:
            die(f"{key}: group_size {r['group_size']} != topology's {want['group_size']}")
        if r["tag"] != want["tag"] or int(r["ranks"]) != want["ranks"]:
            die(f"{key}: tag/ranks {r['tag']}/{r['ranks']} != {want['tag']}/{want['ranks']}")
    if len(seen) != len(t):
        die("duplicate rows in the report")
    print(f"h5truth: {len(rows)} rows equal to the files")


def main():
    mode, arg = sys.argv[1], sys.argv[2]
    files = sys.argv[3:]
    if mode == "json":
        check_rows(json.load(open(arg)), files)
    elif mode == "csv":
        check_rows(list(csv.DictReader(open(arg))), files)
    elif mode == "md":
        t = truth(files)
        text = [l.rstrip("\n") for l in open(arg)]
        rows = []  # (its table's header, the row): a table per collective, each under its heading
        for i, l in enumerate(text):
            if not l.startswith("|") or l.startswith("|---"):
                continue
            if i + 1 < len(text) and text[i + 1].startswith("|---"):
                head = [c.strip() for c in l.strip("|").split("|")]
                continue
            rows.append((head, l))
        if len(rows) != len(t):
            die(f"markdown has {len(rows)} rows, files hold {len(t)}")
        want = sorted(f"{d['t_median'] * 1e6:.2f}" for d in t.values())
        got = sorted(l.strip("|").split("|")[h.index("time (us)")].strip() for h, l in rows)
        lines = rows
        if want != got:
            die(f"markdown times {got} != files {want}")
        print(f"h5truth: {len(lines)} markdown rows, times equal to the files")
    elif mode == "compare":
        a, b = truth([files[0]]), truth([files[1]])
        rows = json.load(open(arg))
        ka = {(k[2], k[3], k[4], k[5]): v for k, v in a.items()}
        kb = {(k[2], k[3], k[4], k[5]): v for k, v in b.items()}
        common = set(ka) & set(kb)
        if len(rows) != len(common) or not common:
            die(f"compare has {len(rows)} rows, expected {len(common)} common points")
        for r in rows:
            k = (r["collective"], r.get("placement", "out-of-place"), r.get("group", "world"), int(r["bytes"]))
            if k not in common:
                # placement/group are dropped from the table when they do not vary: match loosely.
                cand = [c for c in common if c[0] == r["collective"] and c[3] == int(r["bytes"])]
                if len(cand) != 1:
                    die(f"compare row {k} has no unique partner")
                k = cand[0]
            want = kb[k]["t_median"] / ka[k]["t_median"]
            if abs(float(r["ratio_t"]) - want) > 1e-12 * want:
                die(f"{k}: ratio {r['ratio_t']} != {want}")
            if float(r["t_a"]) != ka[k]["t_median"] or float(r["t_b"]) != kb[k]["t_median"]:
                die(f"{k}: times {r['t_a']}/{r['t_b']} != {ka[k]['t_median']}/{kb[k]['t_median']}")
        print(f"h5truth: {len(rows)} ratios equal t_B/t_A from the files")
    elif mode == "status":
        want = files[0] if files else None
        with h5py.File(arg, "r") as h:
            st = [s(r.attrs["status"]) for r in h["runs"].values()]
        print(" ".join(st))
        if want is not None and any(x != want for x in st):
            sys.exit(1)
    elif mode == "steps":
        print(json.dumps(step_truth(arg)))
    elif mode == "attr":
        with h5py.File(arg, "r") as h:
            run = next(iter(h["runs"].values()))
            print(s(run.attrs[files[0]]) if not hasattr(run.attrs[files[0]], "item") or isinstance(run.attrs[files[0]], (bytes, str)) else run.attrs[files[0]].item())
    else:
        die(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
