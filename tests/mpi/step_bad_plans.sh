#!/usr/bin/env bash
# Impossible plans exit 2 on every rank, with one message from rank 0 naming the option and
# the rule, and no rank hangs (each run has a timeout).
source "$(dirname "$0")/lib.bash"
RUN_TIMEOUT=60
# bad RANKS FRAGMENT ARGS...: a plan rule. The run exits 2 on every rank with one message naming
# the option and the rule, and --plan-only --world RANKS gives the same verdict (exit 2, the same
# message, "valid": false): every rule lives in the plan's validation, so a sweep's pruning and
# the run agree. bad_run: a check of the run's surroundings (its files, this host's memory),
# which --plan-only does not judge; the run alone is checked.
SHAPE=(--layers 1 --hidden 32 --heads 2 --seq 8 --vocab 16 --steps 1 --warmup 0)
bad_run() {
  local n=$1 frag=$2; shift 2
  if expect_rc 2 "$n" step_bench "${SHAPE[@]}" "$@"; then
    local lines
    lines=$(grep -c . "$WORK/err" || true)
    if [[ "$(cat "$WORK/err")" != *"$frag"* ]]; then fail "$*: message lacks '$frag': $(cat "$WORK/err")"
    elif [[ $lines -ne 1 ]]; then fail "$*: want one message line, got $lines: $(cat "$WORK/err")"
    else pass "$n ranks $*: exit 2: $(cat "$WORK/err")"; return 0; fi
  fi
  return 1
}
bad() {
  local n=$1 frag=$2 rc=0
  bad_run "$@" || return 0
  shift 2
  "$MB_BIN/step_bench" --plan-only --world "$n" "${SHAPE[@]}" "$@" > "$WORK/plan.json" 2> "$WORK/plan.err" || rc=$?
  if [[ $rc -ne 2 ]]; then fail "--plan-only --world $n $*: exit $rc, but the run refuses it: $(cat "$WORK/plan.err")"
  elif [[ "$(cat "$WORK/plan.err")" != *"$frag"* ]]; then fail "--plan-only --world $n $*: message lacks '$frag': $(cat "$WORK/plan.err")"
  elif ! grep -q '"valid":false' "$WORK/plan.json"; then fail "--plan-only --world $n $*: JSON not invalid: $(cat "$WORK/plan.json")"
  else pass "  --plan-only agrees: exit 2, the same rule"; fi
}
bad 2 "dp=3" --mesh dp=3
bad 2 "--mesh tp=2: --ffn 255 must be divisible by tp" --mesh tp=2 --ffn 255
# pipeline parallel: the layer split, the schedule's shape rules, ZeRO
bad 2 "--layers 3 is not divisible by pp x vpp = 2 x 1" --mesh pp=2 --layers 3
bad 2 "--layers 10 is not divisible by pp x vpp = 2 x 4" --mesh pp=2 --layers 10 --schedule interleaved --vpp 4 --micro-batches 4
# fewer layers than virtual stages: no --layers-per-stage can help, and the message does not offer one
bad 2 "--layers 4 with pp x vpp = 2 x 4: every virtual stage needs at least one layer, so --layers must be at least 8" --mesh pp=2 --layers 4 --schedule interleaved --vpp 4 --micro-batches 4
bad 4 "--layers 2 with pp x vpp = 4 x 1" --mesh pp=4 --layers 2
bad 2 "m % G = 1 micro-batches (G = 2), which must be 0 or at least P = 2" --mesh pp=2 --layers 4 --schedule interleaved --vpp 2 --micro-batches 3 --vpp-group 2
bad 2 "P <= G <= m" --mesh pp=2 --layers 4 --schedule interleaved --vpp 2 --micro-batches 1
bad 2 "--micro-batches 0: must be at least 1" --mesh pp=2 --layers 2 --micro-batches 0
bad 2 "--layers-per-stage: the entries sum to 5, not to --layers 4" --mesh pp=2 --layers 4 --layers-per-stage 3,2
bad 2 "--layers-per-stage: 3 entries, but pp x vpp = 2 x 1 virtual stages need 2" --mesh pp=2 --layers 4 --layers-per-stage 2,1,1
bad 2 "--layers-per-stage 2,x: 'x' is not an integer" --mesh pp=2 --layers 4 --layers-per-stage 2,x
bad 2 "--vpp 2: model chunks per rank need --schedule interleaved" --mesh pp=2 --layers 4 --vpp 2
# ZeRO-3 and --sp run under pp (mpi.step_compose, mpi.step_seed_systems); what remains are rules
bad 2 "--zero3-regather: applies to --zero 3 under a pipeline" --mesh dp=2 --zero 3 --zero3-regather
bad 2 "--zero3-regather: applies to --zero 3 under a pipeline" --mesh pp=2 --layers 2 --zero 1 --zero3-regather
bad 2 "--zero3-keep-params excludes --zero3-regather" --mesh pp=2 --layers 2 --zero 3 --zero3-keep-params --zero3-regather
bad 2 "--capacity-factor 1.25 with --mesh cp=2 and MoE blocks: capacity keeps each expert's first assignments" --mesh cp=2 --experts 4 --capacity-factor 1.25
bad 2 "--routing with --sp: a fixed workload assigns the whole micro-batch's tokens" --mesh tp=2,etp=1 --sp --experts 4 --routing balanced
bad 2 "--inject-fault: corrupts a gradient before its data-parallel reduction; this plan has none" --mesh pp=2 --layers 2 --inject-fault 1
bad 4 "--layers-per-stage: every virtual stage needs at least 1 layer (got 0)" --mesh pp=4 --layers 4 --layers-per-stage 2,1,1,0
bad 2 "--micro-batches 0: must be at least 1" --mesh dp=2 --micro-batches 0
bad 2 "--recompute selective with context parallel (cp > 1)" --mesh cp=2 --recompute selective
bad 2 "--bucket-mb -1" --mesh dp=2 --bucket-mb -1
# the engine's 32-bit tensor limit, on what one rank holds: b x seq/cp x vocab/tp logits of 2^31
bad 2 "(the logits: b x seq/cp rows, vocab/tp columns): a tensor of 2147483648 elements on each rank at tp=1 cp=1 exceeds 2^31-1" \
  --mesh dp=2 --micro-batch 8 --vocab 33554432
bad 2 "--backend nccl: needs --device cuda" --mesh dp=2 --backend nccl
bad 2 "--schedule interleaved with --backend nccl: NCCL pairs point-to-point calls in posting order" \
  --mesh pp=2 --layers 4 --schedule interleaved --vpp 2 --micro-batches 2 --backend nccl --device cuda
bad 2 "--inject-fault 5: no such rank" --mesh dp=2 --inject-fault 5
bad 2 "--export" --mesh dp=2 --export "$WORK/x"
# issue 22: inputs the run itself used to find late, or not at all
bad 2 "--lr inf: must be finite and positive" --lr inf
bad 2 "--lr nan: must be finite and positive" --lr nan
bad 2 "--dtype bf16: the CPU path computes in fp32" --dtype bf16
bad_run 2 "--trace /proc/meshbench-none/t.json: cannot create folder /proc/meshbench-none" --trace /proc/meshbench-none/t.json
echo "not hdf5" > "$WORK/notes.txt"
bad_run 2 "-O/--output $WORK/notes.txt: not an HDF5 file" -O "$WORK/notes.txt" --append
bad_run 2 "cannot create the lock file" -O /proc/meshbench-none.h5
# The collectives' MESHBENCH_WARMUP=auto (warm-up calls) is not step_bench's: it reads MESHBENCH_STEP_*
# for its own options, and a bad one names the variable.
MESHBENCH_WARMUP=auto expect_rc 0 1 step_bench --layers 1 --hidden 32 --heads 2 --seq 8 --vocab 16 --steps 1 --quiet \
  && pass "MESHBENCH_WARMUP=auto (the collectives') leaves step_bench alone"
if MESHBENCH_STEP_WARMUP=auto expect_rc 2 2 step_bench --steps 1; then
  grep -q "from the environment: MESHBENCH_STEP_WARMUP=auto" "$WORK/err" && pass "a bad MESHBENCH_STEP_WARMUP names the variable: $(cat "$WORK/err")" \
    || fail "MESHBENCH_STEP_WARMUP=auto: the message does not name the variable: $(cat "$WORK/err")"
fi
MESHBENCH_TAG=shared MESHBENCH_STEP_STEPS=2 expect_rc 0 1 step_bench --layers 1 --hidden 32 --heads 2 --seq 8 --vocab 16 \
  -O "$WORK/env.h5" --quiet && py -c "
import h5py, sys
r = list(h5py.File(sys.argv[1])['runs'].values())[0]
assert r.attrs['tag'] == 'shared' and r['step/step_times'].shape[0] == 2, (r.attrs['tag'], r['step/step_times'].shape)
" "$WORK/env.h5" && pass "MESHBENCH_TAG (shared) and MESHBENCH_STEP_STEPS (step_bench's own) both act" || fail "shared and own variables"

# over-memory: refused with the estimate before anything is allocated (the host's memory, the plan's need);
# --plan-only calls the plan valid and says it does not fit here (it may be meant for another machine)
"$MB_BIN/step_bench" --plan-only --world 2 "${SHAPE[@]}" --layers 96 --hidden 16384 --heads 64 --kv-heads 64 --seq 64 \
  --vocab 512 2>&1 >/dev/null | grep -q "at 2 ranks here: does NOT fit" && pass "--plan-only: the over-memory plan does NOT fit here" \
  || fail "--plan-only does not say the over-memory plan does not fit"
bad_run 2 "the plan needs about" --layers 96 --hidden 16384 --heads 64 --kv-heads 64 --seq 64 --vocab 512
bad 4 "dp=3" --mesh dp=3
finish
