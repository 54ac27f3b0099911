#!/usr/bin/env bash
# Expert parallel at 4 ranks (oversubscribed on 2 cores: correctness only): ep=4 (one expert
# per rank, edp=1) and ep=2 x edp=2 (dp=4: the expert gradients all-reduce over the expert
# data-parallel pairs, the dense ones over all 4) pass --check against the single-rank
# reference, dropless and with capacity drops; the edp all-reduce moves exactly the expert
# tensors and the dp one the rest; ep=2 and ep=4 with tp=2 (etp=1) pass --check. Every run's
# traced bytes equal the plan's in every dimension (bytes_match), tp's included under MoE.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 2 --moe-every 2 --hidden 32 --heads 2 --seq 8 --vocab 64 --micro-batch 1 --steps 1 --warmup 0
      --threads 1 --quiet --experts 4 --top-k 2 --aux-loss-coef 0.05 --check)
n_run=0
run_check() {  # label, args...: check pass, and every dimension's traced bytes equal the plan's
  local label=$1; shift
  n_run=$((n_run + 1))
  last_h5="$WORK/r$n_run.h5"
  if expect_rc 0 4 step_bench "${tiny[@]}" -O "$last_h5" "$@"; then
    grep -q "check pass" "$WORK/out" || { fail "$label: no 'check pass' in output"; return; }
    py - "$last_h5" <<'PY' && pass "$label: check pass, bytes match" || fail "$label: bytes_match is not 1"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    run = f["runs"][sorted(f["runs"])[-1]]
    sys.exit(0 if run["step/summary"][0]["bytes_match"] == 1 else 1)
PY
  fi
}
run_check "ep=4 dropless" --mesh ep=4
run_check "ep=4 capacity 0.6" --mesh ep=4 --capacity-factor 0.6
run_check "ep=2 x edp=2 dropless" --mesh ep=2
edp_h5=$last_h5
run_check "ep=2 x edp=2 capacity 0.6, hot-expert routing" --mesh ep=2 --capacity-factor 0.6 --routing hot-expert
run_check "ep=2 x tp=2 (etp=1) x edp=2 capacity 0.6" --mesh tp=2,etp=1,ep=2 --capacity-factor 0.6
run_check "ep=4 x tp=2 (etp=1) dropless" --mesh tp=2,etp=1,ep=4
py - "$edp_h5" <<'PY' && pass "HDF5: edp all-reduce present, bytes match the plan" || fail "HDF5 edp contents"
import sys
import h5py
f = h5py.File(sys.argv[1], "r")
(rid,) = f["runs"].keys()
s = f["runs"][rid]["step"]
dims = {(c["dim"].decode(), c["kind"].decode()) for c in s["comm"][()]}
assert ("edp", "all_reduce") in dims and ("dp", "all_reduce") in dims, dims
assert s["summary"][0]["bytes_match"] == 1
PY
finish
