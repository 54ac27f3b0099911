"""tests/mpi/op_list_check.py H5 STEP_BENCH PLAN_ARGS...: the step model's op and call lists
(step_bench --plan-only --op-list, parallel/predict/) against a profiled run's events: every
compute op (kind, phase, part, GEMM shape) and every collective (dimension, kind, payload) of
rank 0 per timed step, counted on both sides, must agree exactly, and so must the FLOPs per
step of every GEMM and attention entry (the events' flops summed against the list's). Pipeline sends and receives
are the schedule's (not in the lists). Prints the mismatches; exit 1 on any, 0 with a summary."""
import collections
import json
import subprocess
import sys

import h5py

ROLES = ("attn.proj", "attention", "fc.proj", "head", "qkv", "moe", "fc")  # model.cpp's runners


def part_of(name):
    for role in ROLES:
        if name == role:
            return ""
        if name.startswith(role + "."):
            return name[len(role) + 1:]
    return name


def main(h5, exe, args):
    with h5py.File(h5, "r") as f:
        run = f["runs"][list(f["runs"])[-1]]
        ev = run["step"]["events"][()]
    ev = ev[ev["rank"] == 0]
    steps = len(set(int(s) for s in ev["step"]))
    ops, calls, flops = collections.Counter(), collections.Counter(), collections.Counter()
    for e in ev:
        dim = e["dim"].decode()
        if dim == "pp":
            continue
        if dim != "-":
            calls[(dim, e["kind"].decode(), int(e["bytes"]))] += 1
            continue
        key = (e["kind"].decode().split(".")[0], e["phase"].decode(), part_of(e["name"].decode()),
               int(e["m"]), int(e["n"]), int(e["k"]))
        ops[key] += 1
        flops[key] += float(e["flops"])
    out = subprocess.run([exe, "--plan-only", "--op-list", *args], capture_output=True, text=True, check=True)
    plan = json.loads(out.stdout)
    lops, lcalls, lflops = collections.Counter(), collections.Counter(), collections.Counter()
    for o in plan["op_list"]:
        key = (o["op"], o["phase"], o["part"], o["m"], o["n"], o["k"])
        lops[key] += o["calls"]
        lflops[key] += o["flops"]
    for c in plan["comm_list"]:
        lcalls[(c["dim"], c["collective"], c["bytes"])] += c["calls"]
    bad = []
    for what, run_side, listed in (("op", ops, lops), ("call", calls, lcalls)):
        for k in sorted(set(run_side) | set(listed)):
            if abs(run_side[k] / steps - listed[k]) > 1e-9:
                bad.append(f"{what} {k}: the run {run_side[k] / steps:g} per step, the list {listed[k]:g}")
    for k in sorted(set(lflops) | set(flops)):
        if lflops[k] > 0 or flops[k] > 0:  # the GEMMs and attention (the events' flops: 0 elsewhere)
            got = flops[k] / steps
            if abs(got - lflops[k]) > 1e-9 * max(abs(lflops[k]), 1.0):
                bad.append(f"flops {k}: the run {got:.6g} per step, the list {lflops[k]:.6g}")
    if bad:
        print("; ".join(bad[:8]) + (f" (+{len(bad) - 8} more)" if len(bad) > 8 else ""))
        return 1
    print(f"{sum(lops.values()):g} ops ({sum(lflops.values()):.4g} FLOPs) and {sum(lcalls.values()):g} calls per step "
          f"agree over {steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
