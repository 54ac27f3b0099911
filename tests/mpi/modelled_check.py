#!/usr/bin/python3
"""tests/mpi/modelled_check.py: step_bench --compute modelled (docs/modelled.md), for
tests/mpi/step_modelled.sh.

  modelled_check.py cal FILE          write a calibration with known costs: every GEMM 1 ns per
      FLOP, every other op 1 ns per unit, every collective at 2 and 4 ranks free (alpha = beta = 0)
  modelled_check.py run FILE.h5 STEP_BENCH WORLD CAL ARGS...   the run's checks (exit 1 listing
      every failure): status ok; compute_mode 'modelled' with its source; memory analytic only
      (measured NaN); every (dim, kind) of communication equal to the strategies' analytic bytes
      (bytes_match); and each pipeline stage's compute in the time split (the mean over its ranks)
      equal to the step model's for that pipeline rank (step_bench --plan-only --predict CAL, the
      same durations), to 1e-6; with uneven expert loads, the busiest rank's longer than the rest.
"""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

import h5py  # noqa: E402

errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)


# Seconds per FLOP and per element of the known costs: 10 GFLOP/s, so a tiny plan's modelled
# step waits tens of milliseconds (1 ns made each run about 1 s, most of the test's time).
COST = 1e-10


def write_cal(path):
    from test_predict import write_cal as w
    free = [(c, n, "shm", [(1, 1 << 34, 0.0, 0.0)])
            for c in ("all_reduce", "sendrecv", "all_gather", "reduce_scatter", "all_to_all") for n in (2, 4)]
    w(path, free, gemm_parts=("fwd", "bwd", "dinput", "dweight", "router.fwd", "router.bwd", "expert.fc.fwd",
                              "expert.proj.fwd", "expert.fc.bwd", "expert.proj.bwd"), rate=COST, ns=COST)
    # context parallel's copies and attention's row dot, by part
    from test_predict import table
    with h5py.File(path, "a") as f:
        rates = [dict(op=s(r["op"]), phase=s(r["phase"]), part=s(r["part"]), unit=s(r["unit"]),
                      seconds_per_unit=float(r["seconds_per_unit"])) for r in f["compute/rates"][()]]
        for part in ("kv.copy", "dkv.add", "heads.pack", "heads.unpack", "layout"):
            rates += [dict(op="copy", phase=ph, part=part, unit="element", seconds_per_unit=COST) for ph in "FB"]
        rates += [dict(op="attention", phase=ph, part=part, unit="flop", seconds_per_unit=COST)
                  for ph in "FB" for part in ("rowdot", "chunk.fwd", "chunk.bwd", "fwd", "bwd")]
        del f["compute/rates"]
        f.create_dataset("compute/rates", data=table(rates, [("op", "S"), ("phase", "S"), ("part", "S"), ("unit", "S"),
                                                            ("seconds_per_unit", "<f8")]))


def check_run(path, exe, world, cal, args):
    from meshbench import plans, reader
    runs, bad = reader.load_steps([path], quiet=True, who="modelled_check")
    check(not bad and len(runs) == 1, f"{path}: {bad or len(runs)} runs")
    if errors:
        return
    run = runs[0]
    row = plans.plan_rows(runs)[0]
    a = run["attrs"]
    check(row["status"] == "ok", f"status {row['status']}")
    check(s(a.get("compute_mode")) == "modelled", f"compute_mode {a.get('compute_mode')!r}")
    check(s(a.get("compute_source")) == cal, f"compute_source {a.get('compute_source')!r}, want {cal}")
    check(row.get("compute") == "modelled" and "[modelled compute]" in row["strategy"],
          f"the report's row does not name the mode: {row.get('compute')!r}, {row['strategy']!r}")
    check(row.get("bytes_match") == 1, f"bytes_match {row.get('bytes_match')}: measured bytes differ from the analytic")
    for m in run["memory"]:
        if s(m["category"]) in ("params", "grads", "optimizer", "activations", "buffers"):
            check(math.isnan(float(m["measured_bytes"])) and float(m["analytic_bytes"]) > 0,
                  f"memory {s(m['category'])}: measured {m['measured_bytes']}, analytic {m['analytic_bytes']}")
    p = subprocess.run([exe, "--plan-only", "--world", str(world), "--predict", cal, *args], capture_output=True, text=True)
    check(p.returncode == 0, f"--plan-only --predict: {p.stderr.strip()}")
    if p.returncode != 0:
        return
    predicted = json.loads(p.stdout)["predicted"]
    pred = {r["pp_rank"]: r["compute_s"] for r in predicted["per_rank"]}
    deg = a.get("degrees") if isinstance(a.get("degrees"), dict) else {}
    split = run.get("time_split") or []
    compute = {}
    for r in split:
        if s(r["category"]) == "compute":
            compute[int(r["rank"])] = float(r["seconds"])
    check(len(compute) == world, f"time split compute rows for {sorted(compute)}, want {world} ranks")
    pp = int(deg.get("pp", 1))
    # ranks of one pipeline stage compute alike: rank r's stage from the plan's pp group
    stages = pp_ranks(run, world, pp)
    # per pipeline stage, the mean over its ranks: uneven expert loads make ep rank 0 (the busiest)
    # wait longer and the others less, their mean the step model's mean rank
    by_stage = {}
    for r, c in compute.items():
        by_stage.setdefault(stages[r], []).append(c)
    for st, cs in sorted(by_stage.items()):
        got, want = sum(cs) / len(cs), pred[st]
        check(abs(got - want) <= 1e-6 * max(want, 1e-9) + 1e-9,
              f"pipeline rank {st}: modelled compute {got:.9f} s (mean of {len(cs)} ranks), the step model's {want:.9f} s")
        if predicted["exposed_s"].get("ep", 0) > 0:  # uneven loads: the busiest rank waits longer
            check(max(cs) - min(cs) > 0.5 * predicted["exposed_s"]["ep"],
                  f"pipeline rank {st}: the ranks' compute {cs} does not show the expected ep imbalance "
                  f"({predicted['exposed_s']['ep']:.6f} s)")


def pp_ranks(run, world, pp):
    """World rank -> pipeline rank, from the run's pp groups (topology/groups); all 0 without."""
    out = {r: 0 for r in range(world)}
    if pp <= 1:
        return out
    with h5py.File(run["fields"]["file"], "r") as f:
        for row in f["runs"][run["fields"]["run_id"]]["topology"]["groups"][()]:
            if s(row["dim"]) == "pp":
                for i, m in enumerate(s(row["ranks"]).split(",")):
                    out[int(m)] = i
    return out


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "cal":
        write_cal(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) >= 6 and sys.argv[1] == "run":
        check_run(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:])
        for e in errors:
            print(f"  {e}")
        sys.exit(1 if errors else 0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
