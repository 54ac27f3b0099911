#!/usr/bin/env bash
# step_bench --compute modelled (docs/modelled.md): every compute action a wait of the step
# model's duration, the communication real. At 2 ranks for every plan family (dp, ZeRO-1/2/3,
# tp, tp+sp, pp 1F1B, cp ring and Ulysses, ep balanced and hot-expert) and at 4 ranks
# (oversubscribed: correctness only), from a calibration with known costs: exit 0, the mode and
# its source in the attributes and the report's row, memory analytic only, every dimension's
# bytes equal to the strategies' analytic bytes, and each stage's compute (the mean over its
# ranks) equal to the step model's, the busiest ep rank longer under a hot expert. A cluster
# description runs a 405B block's tensor-parallel slice (bf16 activations on the wire). Bad input: exit 2 naming the option and the rule.
source "$(dirname "$0")/lib.bash"
RUN_TIMEOUT=120
CAL="$WORK/cal.h5"
py "$MB_SRC/tests/mpi/modelled_check.py" cal "$CAL"
n=0
case_() {
  local label=$1 ranks=$2; shift 2
  n=$((n + 1))
  local h5="$WORK/m$n.h5"
  local -a run=(--steps 2 --warmup 1 --threads 1 --compute modelled --predict "$CAL" -O "$h5" "$@")
  if expect_rc 0 "$ranks" step_bench "${run[@]}"; then
    if py "$MB_SRC/tests/mpi/modelled_check.py" run "$h5" "$MB_BIN/step_bench" "$ranks" "$CAL" "$@" > "$WORK/check" 2>&1; then
      pass "$label"
    else
      fail "$label: $(cat "$WORK/check")"
    fi
  fi
}
case_ "dp=2, buckets overlapped" 2 --model tiny --mesh dp=2
case_ "ZeRO-1" 2 --model tiny --mesh dp=2 --zero 1
case_ "ZeRO-2" 2 --model tiny --mesh dp=2 --zero 2
case_ "ZeRO-3, m=2" 2 --model tiny --mesh dp=2 --zero 3 --micro-batches 2
case_ "tp=2" 2 --model tiny --mesh tp=2
case_ "tp=2 --sp" 2 --model tiny --mesh tp=2 --sp
case_ "pp=2 1F1B, m=4" 2 --model tiny --mesh pp=2 --micro-batches 4
case_ "pp=2 interleaved, m=4" 2 --model tiny --layers 4 --mesh pp=2 --micro-batches 4 --schedule interleaved --vpp 2
case_ "cp=2 ring" 2 --model tiny --mesh cp=2
case_ "cp=2 Ulysses" 2 --model tiny --mesh cp=2 --cp-algo ulysses
case_ "ep=2 balanced" 2 --model tiny --experts 4 --top-k 2 --routing balanced --mesh ep=2
case_ "ep=2 hot-expert (uneven loads)" 2 --model tiny --experts 8 --top-k 1 --routing hot-expert --mesh ep=2
case_ "--recompute full" 2 --model tiny --mesh dp=2 --recompute full
case_ "4 ranks: tp=2 dp=2 ZeRO-1" 4 --model tiny --mesh tp=2,dp=2 --zero 1
case_ "4 ranks: pp=2 dp=2, m=2" 4 --model tiny --mesh pp=2,dp=2 --micro-batches 2
case_ "4 ranks: cp=2 tp=2 --sp" 4 --model tiny --mesh cp=2,tp=2 --sp

# The trace names its compute track as modelled.
if expect_rc 0 2 step_bench --model tiny --mesh dp=2 --steps 1 --warmup 0 --compute modelled --predict "$CAL" \
    --trace "$WORK/t.json"; then
  if grep -q '"compute (modelled)"' "$WORK/t.json"; then pass "--trace: the compute track is 'compute (modelled)'"
  else fail "--trace: no 'compute (modelled)' track in $WORK/t.json"; fi
fi

# A 405B block's tensor-parallel slice at H100 speed: 256 MiB bf16 all-reduces at s = 8192.
h5="$WORK/h100.h5"
if expect_rc 0 2 step_bench --model llama3-405b --layers 1 --mesh tp=2 --compute modelled \
    --predict "$MB_SRC/examples/clusters/dgx-h100.toml" --steps 1 --warmup 0 -O "$h5"; then
  if grep -q "a GPU's: activations and their gradients bf16" "$WORK/out" &&
     py - "$h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
run = f["runs"][list(f["runs"])[0]]["step"]
rows = [r for r in run["comm"][()] if r["dim"] == b"tp" and r["kind"] == b"all_reduce"]
# one all-reduce of b s h bf16 = 8192 x 16384 x 2 B = 256 MiB; the step's calls are multiples of it and the loss's few
assert rows and all(int(r["bytes"]) >= 256 << 20 for r in rows), rows
PY
  then pass "405B tp=2 slice, H100 compute: bf16 activations, 256 MiB all-reduces"
  else fail "405B tp=2 slice: $(tail -3 "$WORK/out")"; fi
fi

# Bad input: exit 2, the option and the rule named once.
bad() {
  local label=$1 want=$2; shift 2
  if expect_rc 2 2 step_bench --model tiny --steps 1 --warmup 0 "$@"; then
    if [[ $(grep -c -- "$want" "$WORK/err") -eq 1 ]]; then pass "refused: $label"
    else fail "$label: want '$want' once in: $(cat "$WORK/err")"; fi
  fi
}
bad "modelled without --predict" "--compute modelled: needs --predict FILE" --mesh dp=2 --compute modelled
bad "modelled with --check" "--compute modelled with --check" --mesh dp=2 --compute modelled --predict "$CAL" --check
bad "modelled with --profile" "--compute modelled with --profile" --mesh dp=2 --compute modelled --predict "$CAL" --profile
bad "unknown mode" "--compute" --mesh dp=2 --compute simulated --predict "$CAL"
bad "buffers beyond memory" "communication buffers, at the model's message sizes" --model llama3-405b --layers 16 \
  --mesh dp=2 --compute modelled --predict "$MB_SRC/examples/clusters/dgx-h100.toml"
finish
