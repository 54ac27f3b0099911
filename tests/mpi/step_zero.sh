#!/usr/bin/env bash
# ZeRO-1/2/3 at 2 ranks: --check against the single-rank reference (loss, every gradient
# gathered to full shape, the updated parameters) with 1 and 2 micro-batches, avg and sum,
# overlap on and off, ZeRO-3 prefetch 0 and 2 and --zero3-keep-params, an untied head; the
# injected fault is caught for every stage; the measured bytes equal the plan's exactly per
# (dim, kind); bad ZeRO options exit 2.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 2 --hidden 32 --heads 2 --kv-heads 1 --seq 16 --vocab 64 --micro-batch 2 --steps 2 --warmup 1
      --threads 1 --quiet)
run_check() {  # label, args...
  local label=$1; shift
  if expect_rc 0 2 step_bench --mesh dp=2 "${tiny[@]}" --check "$@"; then
    grep -q "check pass" "$WORK/out" && pass "$label: check pass" || fail "$label: no 'check pass' in output"
  fi
}
for z in 1 2 3; do
  run_check "zero $z" --zero $z -O "$WORK/z$z.h5"
  run_check "zero $z, 2 micro-batches, sum" --zero $z --micro-batches 2 --grad-reduce sum -O "$WORK/z${z}m2.h5"
  run_check "zero $z, no overlap, untied" --zero $z --no-overlap --tied false
  expect_rc 1 2 step_bench --mesh dp=2 "${tiny[@]}" --check --zero $z --inject-fault 1 && pass "zero $z --inject-fault 1: exit 1"
done
run_check "zero 3, prefetch 0" --zero 3 --prefetch 0
run_check "zero 3, prefetch 2, 2 micro-batches" --zero 3 --prefetch 2 --micro-batches 2
run_check "zero 3, keep params, 2 micro-batches" --zero 3 --zero3-keep-params --micro-batches 2 -O "$WORK/z3k.h5"

py - "$WORK" <<'PY' && pass "HDF5: bytes per (dim, kind) equal the plan's exactly; memory within the formulas" || fail "HDF5 contents"
import json, sys
import h5py
w = sys.argv[1]
def step(name):
    f = h5py.File(f"{w}/{name}.h5", "r")
    (rid,) = f["runs"].keys()
    return f["runs"][rid]["step"]
for name, stage, m, keep in [("z1", 1, 1, 0), ("z1m2", 1, 2, 0), ("z2", 2, 1, 0), ("z2m2", 2, 2, 0),
                             ("z3", 3, 1, 0), ("z3m2", 3, 2, 0), ("z3k", 3, 2, 1)]:
    s = step(name)
    steps = s["step_times"].shape[0]
    P = int(s.attrs["grad_elements"]) * 4
    rs, ag = P, P
    if stage == 3:
        rs, ag = P * m, (P if keep else 2 * P * m)
    got = {}
    for c in s["comm"][:]:
        got.setdefault((c["dim"].decode(), c["kind"].decode()), []).append(int(c["bytes"]))
    want = {("dp", "reduce_scatter"): rs * steps, ("dp", "all_gather"): ag * steps}
    assert set(got) == set(want), (name, got)
    for k, v in want.items():
        assert got[k] == [v, v], (name, k, got[k], v)
    summ = s["summary"][0]
    assert summ["bytes_match"] == 1 and summ["check"] == b"pass", name
    mem = {(int(r["rank"]), r["category"].decode()): r for r in s["memory"][:]}
    opt = mem[(0, "optimizer")]
    assert opt["measured_bytes"] == opt["analytic_bytes"] == 8 * P / 4 / 2, (name, opt)  # 8 bytes / element / d
    assert s.attrs["zero_stage"] == stage
    if stage == 3:
        # at its peak ZeRO-3 holds its shard plus the unit in use, the one prefetched (prefetch 1)
        # and the embeddings, which a tied head keeps gathered from the head to the end
        C, F, QKV = 32, 128, (2 + 2 * 1) * 16
        block = 4 * C + QKV * C + QKV + C * C + C + F * C + F + C * F + C
        embed = 64 * C + 64 * C  # vocab x hidden + positions x hidden
        shard = P / 2
        peak = mem[(0, "params")]["measured_bytes"]
        limit = shard + (P if keep else (2 * max(block, embed) + embed) * 4)
        assert shard < peak <= limit, (name, peak, shard, limit)
print("ok")
PY
for bad in "--zero 4:--zero 4: must be 0, 1, 2 or 3" "--zero 3 --prefetch -1:--prefetch -1: must be >= 0" \
           "--zero 3 --bucket-mb 0.001:ZeRO reduces and gathers whole units" "--zero3-keep-params:needs --zero 3" \
           "--zero 1 --progress thread:--progress thread"; do
  args=${bad%%:*}; frag=${bad#*:}
  # shellcheck disable=SC2086
  if expect_rc 2 2 step_bench --mesh dp=2 "${tiny[@]}" $args; then
    [[ "$(cat "$WORK/err")" == *"$frag"* && $(grep -c . "$WORK/err") -eq 1 ]] && pass "$args: exit 2, one line" \
      || fail "$args: message: $(cat "$WORK/err")"
  fi
done
finish
