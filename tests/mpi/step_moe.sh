#!/usr/bin/env bash
# MoE blocks (issue 13's one-rank layer) under the 2-rank strategies: data parallel, ZeRO-1/3,
# sequence parallel and context parallel, with --check against the single-rank reference (loss with the aux
# terms, every gradient including routers and experts, the updated parameters), dropless and
# with capacity drops (capacity and aux loss are per micro-batch on each rank, as in the
# reference); the drop totals in the HDF5 attributes are summed over the ranks.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 3 --moe-every 2 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --steps 1 --warmup 1
      --threads 1 --quiet --experts 4 --top-k 2 --aux-loss-coef 0.05)
run_check() {  # label, args...
  local label=$1; shift
  if expect_rc 0 2 step_bench "${tiny[@]}" --check "$@"; then
    grep -q "check pass" "$WORK/out" && pass "$label: check pass" || fail "$label: no 'check pass' in output"
  fi
}
run_check "dp=2 dropless, 2 micro-batches" --mesh dp=2 --micro-batches 2
run_check "dp=2 capacity 0.6" --mesh dp=2 --capacity-factor 0.6 -O "$WORK/dp.h5"
run_check "zero 1 capacity 0.6" --mesh dp=2 --zero 1 --capacity-factor 0.6
run_check "zero 3 dropless, 2 micro-batches" --mesh dp=2 --zero 3 --micro-batches 2
# Token splits (issue 25): each rank routes its own rows, the aux loss over the micro-batch's
# counts summed over the group; with ep = 1 under --sp the router's and the experts' gradients
# are summed over tp.
run_check "tp=2 --sp (etp=1, ep=1), 2 micro-batches" --mesh tp=2,etp=1 --sp --micro-batches 2
run_check "cp=2, 2 micro-batches" --mesh cp=2 --micro-batches 2
run_check "cp=2 ulysses, zero 3" --mesh cp=2 --cp-algo ulysses --zero 3
py - "$WORK/dp.h5" <<'PY' && pass "HDF5: drops summed over the ranks" || fail "HDF5 MoE attributes"
import sys
import h5py
f = h5py.File(sys.argv[1], "r")
(rid,) = f["runs"].keys()
s = f["runs"][rid]["step"]
# 2 ranks x 2 MoE blocks x 32 tokens x top-2 in the one timed step
assert s.attrs["moe_assignments"] == 2 * 2 * 32 * 2, s.attrs["moe_assignments"]
assert 0 < s.attrs["moe_dropped"] < s.attrs["moe_assignments"]
PY
# MoE with tensor parallel: etp defaults to tp (each expert split over the group: step_etp.sh);
# etp=1 keeps the experts whole, replicated on the tp ranks.
run_check "tp=2 (etp=2)" --mesh tp=2
run_check "tp=2,etp=1" --mesh tp=2,etp=1
# With --sp each tp rank routes its own rows (mpi.step_seed_systems runs it); capacity, which is
# in the micro-batch's token order, needs the whole micro-batch: exit 2 naming the rule.
if expect_rc 2 2 step_bench "${tiny[@]}" --mesh tp=2,etp=1 --sp --capacity-factor 1.0; then
  grep -q -- "with --sp and MoE blocks: capacity keeps each expert's first assignments" "$WORK/err" \
    && pass "tp=2 --sp with --experts and a capacity: exit 2 naming the rule" || fail "--sp message: $(cat "$WORK/err")"
fi
finish
