#!/usr/bin/python3
"""tests/mpi/hdf5_readback.py FILE.h5 EXPECT.json: read a file that hdf5_readback.sh wrote
(several runs appended) with h5py and check it against docs/results.md: root and run
attributes, topology, the shapes of every series' datasets, plausible values recomputed
from the samples (h5check.check_series_values), and the .jsonl lines beside it.

EXPECT.json: {"runs": [{"binary", "world_size", "tag", "collective", "argv_has": [...],
"series": N, "env_has": {...}, "iters": I, "warmup": W}, ...]} in the order the runs were made.
Exit 0 when everything holds, else 1 listing every failed check.
"""
import json
import os
import re
import socket
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h5check  # noqa: E402
from h5check import check, errors, s  # noqa: E402

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def check_run_attrs(rid, run, want, cores):
    """The run's attributes (docs/results.md): present, and what this run was. False when some
    are missing (nothing else is checked then)."""
    a = run.attrs
    n = want["world_size"]
    for k in ("binary", "argv", "start_time", "end_time", "status", "tag", "world_size", "nodes", "ranks_per_node",
              "oversubscribed", "cores_per_node", "backend", "mem", "mpi_library", "nccl_version", "cuda_version",
              "blas", "slurm_job_id", "slurm", "env", "order", "mesh", "timing", "iters", "warmup", "check"):
        check(k in a, f"{rid}: run attribute '{k}' missing")
    if errors:
        return False
    check(s(a["status"]) == "ok", f"{rid}: status {s(a['status'])}")
    check(s(a["binary"]) == want["binary"], f"{rid}: binary {s(a['binary'])}")
    check(rid.endswith("-" + want["binary"]) or re.search(f"-{want['binary']}-\\d+$", rid),
          f"{rid}: run id does not follow <UTC time>-<binary>")
    for piece in want["argv_has"]:
        check(piece in s(a["argv"]), f"{rid}: argv '{s(a['argv'])}' lacks '{piece}'")
    check(ISO.match(s(a["start_time"])), f"{rid}: start_time '{s(a['start_time'])}' is not UTC ISO-8601")
    check(ISO.match(s(a["end_time"])), f"{rid}: end_time '{s(a['end_time'])}' is not UTC ISO-8601")
    check(s(a["start_time"]) <= s(a["end_time"]), f"{rid}: end_time before start_time")
    check(s(a["tag"]) == want["tag"], f"{rid}: tag {s(a['tag'])}")
    check(int(a["world_size"]) == n, f"{rid}: world_size {a['world_size']}, want {n}")
    check(int(a["nodes"]) == 1 and int(a["ranks_per_node"]) == n, f"{rid}: nodes/ranks_per_node {a['nodes']}/{a['ranks_per_node']}")
    check(int(a["cores_per_node"]) == cores, f"{rid}: cores_per_node {a['cores_per_node']}, want {cores}")
    check(int(a["oversubscribed"]) == int(n > cores), f"{rid}: oversubscribed {a['oversubscribed']} at {n} ranks on {cores} cores")
    check(s(a["backend"]) == "mpi" and s(a["mem"]) == "host", f"{rid}: backend/mem {s(a['backend'])}/{s(a['mem'])}")
    check("MPICH" in s(a["mpi_library"]), f"{rid}: mpi_library '{s(a['mpi_library'])}'")
    check(s(a["nccl_version"]) == "none", f"{rid}: nccl_version {s(a['nccl_version'])}")
    check(s(a["timing"]) == "isolated", f"{rid}: timing {s(a['timing'])}")
    check(int(a["iters"]) == want["iters"] and int(a["warmup"]) == want["warmup"],
          f"{rid}: iters/warmup {a['iters']}/{a['warmup']}, want {want['iters']}/{want['warmup']}")
    env = json.loads(s(a["env"]))
    check(isinstance(env, dict), f"{rid}: env is not a JSON object")
    for k, v in want.get("env_has", {}).items():
        check(env.get(k) == v, f"{rid}: env[{k}] = {env.get(k)!r}, want {v!r}")
    check(all(re.match(r"^(MPICH_|MPIR_CVAR_|UCX_|FI_|NCCL_|OMP_|OPENBLAS_|MESHBENCH_|HYDRA_|CUDA_VISIBLE)", k) for k in env),
          f"{rid}: env holds variables outside the documented prefixes: {sorted(env)}")
    check(isinstance(json.loads(s(a["slurm"])), dict), f"{rid}: slurm is not a JSON object")
    check(json.loads(s(a["mesh"])) == {}, f"{rid}: mesh {s(a['mesh'])} for a world run")
    return True


def check_topology(rid, run, n):
    """topology/ranks, topology/groups and group_members of a world run of n ranks on this host."""
    ranks = run["topology/ranks"][()]
    check(ranks.shape == (n,), f"{rid}: topology/ranks shape {ranks.shape}, want ({n},)")
    check(list(ranks["rank"]) == list(range(n)), f"{rid}: topology ranks {list(ranks['rank'])}")
    check(sorted(ranks["local_rank"]) == list(range(n)), f"{rid}: local ranks {list(ranks['local_rank'])}")
    check(set(ranks["node"]) == {0}, f"{rid}: nodes {set(ranks['node'])}")
    check({s(h) for h in ranks["host"]} == {socket.gethostname()}, f"{rid}: hosts {set(ranks['host'])} != {socket.gethostname()}")
    check(all(s(c) for c in ranks["cores"]), f"{rid}: empty core set")
    for f_ in ("rank", "host", "node", "local_rank", "cores", "device", "gpus", "nics"):
        check(f_ in ranks.dtype.names, f"{rid}: topology/ranks lacks {f_}")
    groups = run["topology/groups"][()]
    if check("group_members" in run["topology"], f"{rid}: topology/group_members missing"):
        gm = run["topology/group_members"][()]
        check(gm.shape == (len(groups), max(int(g["size"]) for g in groups)),
              f"{rid}: group_members shape {gm.shape}, groups {len(groups)} of up to {max(groups['size'])}")
        for i, g in enumerate(groups):
            members = [int(x) for x in gm[i] if x >= 0]
            check(members == [int(x) for x in s(g["ranks"]).split(",")] and len(members) == int(g["size"]),
                  f"{rid}: group {i} members {members} vs ranks '{s(g['ranks'])}' size {g['size']}")
    world = [g for g in groups if s(g["dim"]) == "world"]
    check(len(world) == 1, f"{rid}: {len(world)} world groups in topology/groups")
    if world:
        g = world[0]
        check(int(g["size"]) == n and s(g["ranks"]) == ",".join(map(str, range(n))),
              f"{rid}: world group size {g['size']} ranks '{s(g['ranks'])}'")
        check(int(g["nodes_spanned"]) == 1 and s(g["span"]) == "intra", f"{rid}: world group span {s(g['span'])}")


def check_series(rid, run, want, n):
    """Every series of the run: its attributes, dataset shapes and fields, values recomputed
    from the samples, no wrong results. Returns the summary rows with their sizes."""
    colls = run["collectives"]
    check(list(colls) == [want["collective"]], f"{rid}: collectives {list(colls)}")
    rows = []
    nser = 0
    for coll in colls:
        for name, g in colls[coll].items():
            nser += 1
            ga = g.attrs
            for k in ("collective", "dtype", "redop", "placement", "group", "root", "timing", "iters", "warmup", "rank_stat"):
                check(k in ga, f"{rid}/{name}: series attribute '{k}' missing")
            check(name == f"{s(ga['dtype'])}-{s(ga['redop'])}-{s(ga['placement'])}-{s(ga['group'])}",
                  f"{rid}/{name}: name does not match its attributes")
            n_sizes = len(g["sizes"])
            check(g["sizes"].shape == (n_sizes,) and g["summary"].shape == (n_sizes,), f"{rid}/{name}: sizes/summary shapes")
            check(g["samples"].shape == (n_sizes, want["iters"], n),  # -n given: every row has exactly that many
                  f"{rid}/{name}: samples {g['samples'].shape}, want ({n_sizes}, {want['iters']}, {n})")
            check(g["samples"].dtype == np.float64, f"{rid}/{name}: samples dtype {g['samples'].dtype}")
            for f_ in ("bytes", "count", "send_bytes_per_rank", "recv_bytes_per_rank", "total_bytes"):
                check(f_ in g["sizes"].dtype.names, f"{rid}/{name}: sizes lacks {f_}")
            for f_ in ("bytes", "count", "dtype", "redop", "inplace", "root", "t_median", "t_min", "t_mean", "t_p99",
                       "t_first", "algbw", "busbw", "wrong", "slowest_rank", "iters", "warmup_calls",
                       "warmup_converged", "t_median_max", "t_median_avg", "t_median_min", "t_median_rank0"):
                check(f_ in g["summary"].dtype.names, f"{rid}/{name}: summary lacks {f_}")
            summ, sizes = h5check.check_series_values(f"{rid}/{name}", g, coll, n)
            check(n_sizes >= 2, f"{rid}/{name}: only {n_sizes} sizes")
            for i, r in enumerate(summ):
                check(int(r["wrong"]) == 0, f"{rid}/{name} row {i}: wrong {r['wrong']}")
                rows.append((coll, s(ga["dtype"]), s(ga["redop"]), s(ga["placement"]), s(ga["group"]), r, sizes[i]))
    check(nser == want["series"], f"{rid}: {nser} series, want {want['series']}")
    return rows


def check_run(rid, run, want, cores):
    if not check_run_attrs(rid, run, want, cores):
        return None
    check_topology(rid, run, want["world_size"])
    return check_series(rid, run, want, want["world_size"])


def main(path, expect_path):
    want = json.load(open(expect_path))
    cores = os.cpu_count()
    with h5py.File(path, "r") as h:
        a = h.attrs
        check(int(a["schema_version"]) == 1, f"schema_version {a.get('schema_version')}")
        check(re.match(r"^\d+\.\d+\.\d+$", s(a["suite_version"])), f"suite_version {s(a['suite_version'])}")
        check(len(s(a["git_sha"])) >= 7, f"git_sha '{s(a['git_sha'])}'")
        rids = list(h["runs"])
        check(len(rids) == len(want["runs"]), f"{len(rids)} runs, want {len(want['runs'])}")
        by_run = {}
        for w in want["runs"]:  # one run per binary
            match = [r for r in rids if s(h["runs"][r].attrs["binary"]) == w["binary"]]
            if check(len(match) == 1, f"{len(match)} runs of {w['binary']}, want 1"):
                by_run[match[0]] = check_run(match[0], h["runs"][match[0]], w, cores) or []

    # JSON lines: one per summary row, same values.
    jl = os.path.splitext(path)[0] + ".jsonl"
    lines = [json.loads(x) for x in open(jl)]
    nrows = sum(len(v) for v in by_run.values())
    check(len(lines) == nrows, f"{jl}: {len(lines)} lines, the HDF5 summaries hold {nrows} rows")
    index = {(j["run_id"], j["collective"], j["dtype"], j["redop"], j["placement"], j["group"], j["bytes"]): j
             for j in lines}
    for rid, rows in by_run.items():
        for coll, d, op, pl, grp, r, z in rows:
            j = index.get((rid, coll, d, op, pl, grp, int(r["bytes"])))
            if not check(j is not None, f"{rid} {coll} {d}-{op}-{pl} {r['bytes']} B: no .jsonl line"):
                continue
            for k in ("t_median", "t_min", "t_mean", "t_p99", "t_first", "algbw", "busbw", "t_median_max",
                      "t_median_avg", "t_median_min", "t_median_rank0"):
                check(j[k] == float(r[k]), f"{rid} {coll} {d}-{op}-{pl} {r['bytes']} B: jsonl {k} {j[k]} != {float(r[k])}")
            for k in ("count", "wrong", "slowest_rank", "root", "iters", "warmup_calls", "warmup_converged"):
                check(j[k] == int(r[k]), f"{rid} {coll} {d}-{op}-{pl} {r['bytes']} B: jsonl {k} {j[k]} != {int(r[k])}")
            for k in ("send_bytes_per_rank", "recv_bytes_per_rank", "total_bytes"):
                check(j[k] == int(z[k]), f"{rid} {coll} {d}-{op}-{pl} {r['bytes']} B: jsonl {k}")
            check(j["backend"] == "mpi" and j["world_size"] in (2, 4) and j["binary"] == f"{coll}_bench",
                  f"{rid}: jsonl run fields {j['backend']} {j['world_size']} {j['binary']}")
    if errors:
        for e in errors[:40]:
            print(f"hdf5_readback: {e}", file=sys.stderr)
        return 1
    print(f"{path}: {len(by_run)} runs, {nrows} summary rows and .jsonl lines agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
