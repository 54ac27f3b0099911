#!/usr/bin/env bash
# The time split (issue 23, docs/metrics.md) on every strategy family at 2 ranks: for every
# rank, step = compute + the exposed time of each dimension + bubble + other, exactly; no part
# is negative; only the plan's dimensions are charged; the comm table's exposed seconds are the
# split's, by kind; the console's per-rank table shows the same numbers as step/time_split; a
# group of one rank (ZeRO at dp = 1 under pp = 2) issues no call and is charged nothing (the
# dense gradients of cp and ep plans reduce over dp x cp, charged to dp); a
# pipeline's waits for the other stage are bubble, never communication. Also: a tensor-parallel
# run's GEMM trace events name their layer part and carry their shape and FLOPs, and its
# memory formula names its slices.
source "$(dirname "$0")/lib.bash"
TINY=(--layers 2 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --threads 1 --steps 3 --warmup 1)
runs=()
run() {  # name args...
  local name=$1; shift
  if expect_rc 0 2 step_bench "${TINY[@]}" -O "$WORK/$name.h5" "$@"; then
    cp "$WORK/out" "$WORK/$name.out"
    runs+=("$name")
  fi
}
run dp --mesh dp=2
run zero2 --mesh dp=2 --zero 2
run tp --mesh tp=2 --profile
run sp --mesh tp=2 --sp
run cp --mesh cp=2
run gpipe --mesh pp=2 --schedule gpipe --micro-batches 4
run 1f1b --mesh pp=2 --schedule 1f1b --micro-batches 4
run pp-zero1 --mesh pp=2 --zero 1 --micro-batches 2
run ep --mesh ep=2 --experts 2 --top-k 1
for name in "${runs[@]}"; do
  if py - "$WORK/$name.h5" "$WORK/$name.out" "$name" <<'PY'; then pass "$name: $(cat "$WORK/verdict")"; else fail "$name"; fi
import re, sys
import h5py
path, out, name = sys.argv[1:4]
f = h5py.File(path, "r")
(rid,) = f["runs"].keys()
s = f["runs"][rid]["step"]
steps = s["step_times"].shape[0]
split = {}
for row in s["time_split"][:]:
    split.setdefault(int(row["rank"]), {})[row["category"].decode()] = float(row["seconds"])
assert sorted(split) == [0, 1], split
for rank, c in split.items():
    parts = c["compute"] + c["bubble"] + c["other"] + sum(v for k, v in c.items() if k.startswith("exposed."))
    assert abs(parts - c["step"]) <= 1e-9 * c["step"], (rank, parts, c)
    assert all(v >= 0 for v in c.values()), c
    # the split's step is this rank's mean step time
    mean = float(s["step_times"][:, rank].mean())
    assert abs(c["step"] - mean) <= 1e-9 * mean, (rank, c["step"], mean)
dims = {k[len("exposed."):] for c in split.values() for k in c if k.startswith("exposed.")}
want = {"dp": {"dp"}, "zero2": {"dp"}, "tp": {"tp"}, "sp": {"tp"}, "cp": {"cp", "dp"}, "gpipe": {"pp", "embedding"},
        "1f1b": {"pp", "embedding"}, "pp-zero1": {"pp", "embedding"}, "ep": {"ep", "dp", "edp"}}[name]
assert dims <= want, (name, dims, want)
# the comm table's exposed seconds are the split's, summed over kinds, per step
for rank, c in split.items():
    by_dim = {}
    for r in s["comm"][:]:
        if int(r["rank"]) == rank:
            by_dim[r["dim"].decode()] = by_dim.get(r["dim"].decode(), 0.0) + float(r["exposed_s"]) / steps
    for d, v in by_dim.items():
        assert abs(v - c.get("exposed." + d, 0.0)) <= 1e-9 + 1e-9 * v, (rank, d, v, c)
if name == "pp-zero1":  # ZeRO over a data-parallel group of one: no call, no charge
    assert not any(r["dim"] == b"dp" for r in s["comm"][:]), "a size-1 dp group was recorded"
if name in ("gpipe", "1f1b"):  # the waits for the other stage are the bubble
    assert max(c["bubble"] for c in split.values()) > 0, split
    pipe = s["pipeline"][:]
    for p in pipe:
        c = split[int(p["rank"])]
        assert abs(float(p["bubble"]) - c["bubble"] / c["step"]) <= 1e-9, (p, c)
# the console's per-rank table shows the same numbers (ms, 3 decimals)
text = open(out).read()
head = re.search(r"^\s+rank\s+step\s+(compute.*)$", text, re.M)
assert head, "no time-split table on the console"
cols = ["step"] + head.group(1).split()
for rank, c in split.items():
    line = re.search(rf"^\s+{rank}\s+([\d.]+(?:\s+[\d.]+)+)", text[head.end():], re.M)
    vals = [float(x) for x in line.group(1).split()]
    for col, v in zip(cols, vals):
        assert abs(v - 1e3 * c.get(col, 0.0)) <= 0.0011, (rank, col, v, c.get(col))
# trace events (issue 23): every GEMM is a named part of a layer with its shape and FLOPs
ev = s["events"][:] if "events" in s else []
mm = [e for e in ev if e["kind"].decode().startswith("matmul")]
for e in mm:
    assert e["flops"] > 0 and e["m"] > 0 and e["n"] > 0 and e["k"] > 0, e
    assert abs(e["flops"] - 2.0 * e["m"] * e["n"] * e["k"] * round(e["flops"] / (2.0 * e["m"] * e["n"] * e["k"]))) < 1, e
    assert e["name"].decode().split(".")[0] in {"qkv", "attn", "fc", "head", "moe"}, e["name"]
if name == "tp":
    s_attrs = s.attrs
    assert "tensor-parallel" in s_attrs["memory_formula"], s_attrs["memory_formula"]
open(sys.argv[2].rsplit("/", 1)[0] + "/verdict", "w").write(
    "identity holds on both ranks; dims " + ",".join(sorted(dims)) +
    "; bubble %.1f/%.1f ms" % (1e3 * split[0]["bubble"], 1e3 * split[1]["bubble"]))
PY
done
finish
