#!/usr/bin/env bash
# The step model walks the engine's own ops and calls (parallel/predict/, docs/predict.md "What
# it walks"): for each plan family at 1 and 2 ranks, a profiled step's events of rank 0 equal
# step_bench --plan-only --op-list's op and call lists exactly (op_list_check.py), and the GEMMs' and
# attention's FLOPs per step equal the list's: GEMM shapes
# and parts, attention, elementwise ops, TP/SP, CP ring/all-gather/Ulysses, EP with balanced
# routing (expert tensor parallel and tp's sliced dispatch too), ZeRO-1/2/3, data parallel's
# buckets, pipeline stages. The lists are read off the model (parallel/predict/pass_record.cpp),
# so this proves the shape-only recording equal to the run.
source "$(dirname "$0")/lib.bash"
RUN_TIMEOUT=90
tiny=(--model tiny --steps 2 --warmup 0 --threads 1 --profile)
n=0
case_() {
  local label=$1 ranks=$2; shift 2
  n=$((n + 1))
  local h5="$WORK/p$n.h5"
  if expect_rc 0 "$ranks" step_bench "${tiny[@]}" "$@" -O "$h5"; then
    if py "$MB_SRC/tests/mpi/op_list_check.py" "$h5" "$MB_BIN/step_bench" --model tiny --world "$ranks" "$@" \
        > "$WORK/check" 2>&1; then
      pass "$label: $(cat "$WORK/check")"
    else
      fail "$label: $(cat "$WORK/check")"
    fi
  fi
}
case_ "one rank, m=2" 1 --micro-batches 2
case_ "dp=2 (buckets)" 2 --mesh dp=2
case_ "ZeRO-1" 2 --mesh dp=2 --zero 1
case_ "ZeRO-2" 2 --mesh dp=2 --zero 2
case_ "ZeRO-3, m=2" 2 --mesh dp=2 --zero 3 --micro-batches 2
case_ "tp=2" 2 --mesh tp=2
case_ "tp=2 --sp" 2 --mesh tp=2 --sp
case_ "cp=2 ring" 2 --mesh cp=2
case_ "cp=2 all-gather" 2 --mesh cp=2 --cp-algo allgather
case_ "cp=2 Ulysses" 2 --mesh cp=2 --cp-algo ulysses
case_ "pp=2 1F1B, m=4" 2 --mesh pp=2 --micro-batches 4
case_ "MoE dp=2, balanced" 2 --experts 4 --top-k 2 --routing balanced --mesh dp=2
case_ "MoE ep=2, balanced" 2 --experts 4 --top-k 2 --routing balanced --mesh ep=2
# 4 ranks (oversubscribed): expert tensor parallel's gathers and reduce-scatters, and tp's
# sliced dispatch (without SP each tp rank dispatches its share of the rows, then all-reduces)
case_ "MoE ep=2 etp=2, balanced (4 ranks)" 4 --experts 4 --top-k 2 --routing balanced --mesh ep=2,etp=2
case_ "MoE tp=2 ep=2 etp=1, balanced (4 ranks)" 4 --experts 4 --top-k 2 --routing balanced --mesh tp=2,ep=2,etp=1
finish
