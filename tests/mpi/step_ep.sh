#!/usr/bin/env bash
# Expert parallel at 2 ranks (issue 13): --mesh ep=2 (dp=2, edp=1; each rank holds 2 of the 4
# experts) passes --check against the single-rank reference (loss with the aux terms, every
# gradient by name over the experts each rank holds, the updated parameters), dropless and
# with capacity drops, 2 micro-batches, summed gradients and the fixed routing workloads; the
# injected fault is caught. From the HDF5 comm table and events (the trace): in dropless mode
# the rows moved over the EP group are exactly tokens x k per rank, MoE block and micro-batch
# (per block and micro-batch the dispatch and the combine each sum to it over the ranks,
# forward and backward), the counts all-to-all moves E
# values per block and forward, and the measured EP bytes equal the analytic value from the
# routing counts (bytes_match). Tensor parallel with whole experts (etp=1): tp=2 alone and
# ep=2 x tp=2 pass --check too. The rules exit 2 naming the option.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 3 --moe-every 2 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --steps 2 --warmup 1
      --threads 1 --quiet --experts 4 --top-k 2 --aux-loss-coef 0.05)
run_check() {  # label, args...
  local label=$1; shift
  if expect_rc 0 2 step_bench "${tiny[@]}" --check "$@"; then
    grep -q "check pass" "$WORK/out" && pass "$label: check pass" || fail "$label: no 'check pass' in output"
  fi
}
run_check "ep=2 dropless, 2 micro-batches" --mesh ep=2 --micro-batches 2 -O "$WORK/ep.h5" --profile
run_check "ep=2 capacity 0.6" --mesh ep=2 --capacity-factor 0.6
run_check "ep=2 capacity 0.6, sum over 2 micro-batches, no overlap" --mesh ep=2 --capacity-factor 0.6 --micro-batches 2 \
  --grad-reduce sum --no-overlap
run_check "ep=2 hot-rank routing, 8 experts" --mesh ep=2 --routing hot-rank --experts 8 -O "$WORK/hot.h5"
run_check "ep=2 balanced routing, capacity 1" --mesh ep=2 --routing balanced --capacity-factor 1
run_check "ep=2 zipf:1.2 routing, top-1" --mesh ep=2 --routing zipf:1.2 --top-k 1
run_check "ep=2 rotating routing" --mesh ep=2 --routing rotating
# Tensor parallel with whole experts (etp=1): tp=2 alone runs the MoE replicated on both
# ranks; tp=2 with ep=2 (the EP group is the TP pair) dispatches each rank's half of the
# tokens and all-reduces the halves' outputs and gradients over tp.
run_check "tp=2 etp=1 (MoE replicated over tp), capacity 0.6" --mesh tp=2,etp=1 --capacity-factor 0.6 -O "$WORK/tp.h5"
run_check "ep=2 x tp=2 etp=1 dropless, 2 micro-batches" --mesh tp=2,etp=1,ep=2 --micro-batches 2 -O "$WORK/eptp.h5"
# The analytic memory under tp: whole experts on each tp rank replace the rank's F/tp slice of
# the dense MLP (parameters and the fc activations); measured = analytic on every rank, the
# activations within 0.1% (the layout pads each activation tensor to 16 elements, which the
# closed form leaves out; the F/tp error this guards against is 7% here).
for f in tp eptp; do
  if out=$(py - "$WORK/$f.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as h:
    run = h["runs"][sorted(h["runs"])[-1]]
    tol = {"activations": 1e-3}
    off = [(r["rank"], c, r["measured_bytes"], r["analytic_bytes"]) for r in run["step/memory"][()]
           for c in [r["category"].decode()] if c in ("params", "grads", "optimizer", "activations", "buffers")
           and abs(r["measured_bytes"] - r["analytic_bytes"]) > tol.get(c, 0) * r["analytic_bytes"]]
print(off or "equal")
sys.exit(1 if off else 0)
PY
  ); then pass "$f.h5: MoE memory under tp: measured = analytic on every rank (activations within 0.1%)"
  else fail "$f.h5: MoE memory under tp: measured != analytic: $out"; fi
done
run_check "ep=2 x tp=2 etp=1 capacity 0.6, hot-rank routing" --mesh tp=2,etp=1,ep=2 --capacity-factor 0.6 --routing hot-rank
expect_rc 1 2 step_bench --mesh ep=2 "${tiny[@]}" --check --inject-fault 1 && pass "ep=2 --inject-fault 1: exit 1"

py - "$WORK/ep.h5" "$WORK/hot.h5" <<'PY' && pass "HDF5: EP rows = tokens x k exactly (dropless), counts bytes, bytes match the routing counts; per-rank EP attributes" || fail "HDF5 EP contents"
import json
import sys
import h5py
def step(path):
    f = h5py.File(path, "r")
    (rid,) = f["runs"].keys()
    return f["runs"][rid]["step"]
ranks, blocks, N, C, sb = 2, 2, 2 * 16, 32, 4
for path, E, k, m in ((sys.argv[1], 4, 2, 2), (sys.argv[2], 8, 2, 1)):
    s = step(path)
    steps = s["step_times"].shape[0]
    assert s.attrs["strategy"] == "data_parallel+expert_parallel", s.attrs["strategy"]
    got = {}
    for c in s["comm"][()]:
        if c["dim"] == b"ep":
            got[c["kind"].decode()] = got.get(c["kind"].decode(), 0) + int(c["bytes"])
    # every routed row: dispatch + combine, forward + backward, C floats each
    rows = got["all_to_allv"] // (4 * C * sb)
    assert rows == ranks * N * k * blocks * m * steps, (path, rows, ranks * N * k * blocks * m * steps)
    assert got["all_to_all"] == ranks * blocks * m * steps * E * sb, (path, got)
    assert s["summary"][0]["bytes_match"] == 1, path
    recv = json.loads(s.attrs["ep_rows_received_per_rank"])
    assert len(recv) == ranks and sum(recv) == ranks * N * k * blocks * m, (path, recv)
    assert s.attrs["ep_rows_received_worst_over_mean"] >= 1.0
# Per MoE block and micro-batch (the events, --profile): the dispatch (each rank's first
# all_to_allv of a block's forward or backward) sums over the ranks to tokens x k rows exactly,
# and so does the combine.
ev = step(sys.argv[1])["events"][()]
ev = ev[(ev["dim"] == b"ep") & (ev["kind"] == b"all_to_allv")]
calls = {}
for e in sorted(ev, key=lambda e: e["t_start"]):
    calls.setdefault((int(e["step"]), int(e["microbatch"]), int(e["layer"]), e["phase"]), {}).setdefault(int(e["rank"]), []).append(int(e["bytes"]))
assert len(calls) == 2 * 2 * blocks * 2, sorted(calls)  # steps x micro-batches x blocks x (F, B)
for key, per_rank in calls.items():
    assert sorted(per_rank) == [0, 1] and all(len(v) == 2 for v in per_rank.values()), (key, per_rank)
    for i in (0, 1):  # dispatch, combine
        rows = sum(v[i] for v in per_rank.values()) // (C * sb)
        assert rows == ranks * N * 2, (key, i, rows)
# hot-rank: one EP rank's experts take more than the even share
recv = json.loads(step(sys.argv[2]).attrs["ep_rows_received_per_rank"])
assert max(recv) > min(recv), recv
print("ok: hot-rank rows received per rank", recv)
PY

# The rules: exit 2 on every rank, one line naming the option and the rule.
rule() {  # label, message pattern, args...
  local label=$1 msg=$2; shift 2
  if expect_rc 2 2 step_bench "$@" --steps 1 --warmup 0 --quiet; then
    grep -q -- "$msg" "$WORK/err" && pass "$label: exit 2 naming the rule" || fail "$label message: $(cat "$WORK/err")"
  fi
}
dense=(--layers 1 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 1 --threads 1)
rule "ep=2 without MoE" "--mesh ep=2: expert parallel places experts on ranks; needs MoE blocks" --mesh ep=2 "${dense[@]}"
rule "ep=2 with 3 experts" "--experts 3 must be divisible by ep" --mesh ep=2 "${dense[@]}" --experts 3 --top-k 1
rule "cp=2 with a capacity" "with --mesh cp=2 and MoE blocks: capacity keeps each expert's first assignments" \
  --mesh cp=2 "${dense[@]}" --experts 4 --capacity-factor 1.0
rule "--routing bogus" "--routing" "${dense[@]}" --experts 4 --routing bogus
rule "--routing without MoE" "--routing balanced: a routing workload needs MoE blocks" "${dense[@]}" --routing balanced
finish
