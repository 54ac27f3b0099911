#!/usr/bin/env bash
# Pipeline parallel at 4 ranks (oversubscribed on 2 cores: correctness only): pp=4 with
# GPipe, 1F1B (m = P and m = 2P) and interleaved V=2, and pp=2 x dp=2 (the data-parallel
# reduction over each stage's own flat array) for 1F1B and interleaved, and tp=2 x pp=2; --check against the
# single-rank reference, the measured bytes equal the plan's (summary bytes_match); the
# fault injected on rank 3 before its DP reduction is caught (exit 1).
source "$(dirname "$0")/lib.bash"
tiny=(--layers 8 --hidden 32 --heads 2 --kv-heads 1 --seq 16 --vocab 64 --micro-batch 1 --steps 1 --warmup 0
      --threads 1 --quiet --check --bucket-mb 0.02)
n=0
run_check() {  # label, args...
  local label=$1; shift
  n=$((n + 1))
  if expect_rc 0 4 step_bench "${tiny[@]}" -O "$WORK/r$n.h5" "$@"; then
    if ! grep -q "check pass" "$WORK/out"; then fail "$label: no 'check pass' in output"; return; fi
    py - "$WORK/r$n.h5" <<'PY' && pass "$label: check pass, bytes match" || fail "$label: HDF5 summary"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
(rid,) = f["runs"].keys()
s = f["runs"][rid]["step"]["summary"][0]
assert s["bytes_match"] == 1 and s["check"] == b"pass", s
PY
  fi
}
run_check "pp=4 gpipe m=4" --mesh pp=4 --schedule gpipe --micro-batches 4
run_check "pp=4 1f1b m=8 (m = 2P)" --mesh pp=4 --schedule 1f1b --micro-batches 8
run_check "pp=4 interleaved V=2 m=4" --mesh pp=4 --schedule interleaved --vpp 2 --micro-batches 4
run_check "pp=4 uneven 3,1,1,3" --mesh pp=4 --layers-per-stage 3,1,1,3 --micro-batches 4
run_check "pp=2 x dp=2 1f1b m=2, no overlap" --mesh pp=2,dp=2 --schedule 1f1b --micro-batches 2 --no-overlap
run_check "pp=2 x dp=2 interleaved m=4, sum, buckets overlapped per chunk" --mesh pp=2,dp=2 --schedule interleaved --vpp 2 --micro-batches 4 --grad-reduce sum
run_check "tp=2 x pp=2 1f1b m=2, vocabulary 63 padded" --mesh tp=2,pp=2 --heads 2 --kv-heads 2 --vocab 63 --micro-batches 2
run_check "tp=2 x pp=2 interleaved m=4, untied" --mesh tp=2,pp=2 --heads 2 --kv-heads 2 --schedule interleaved --vpp 2 --micro-batches 4 --tied false
expect_rc 1 4 step_bench "${tiny[@]}" --mesh pp=2,dp=2 --micro-batches 2 --inject-fault 3 && pass "pp=2 x dp=2 --inject-fault 3: exit 1"
finish
