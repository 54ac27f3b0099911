#!/usr/bin/env bash
# Bad configurations exit 2 with one message naming the option and the rule.
set -u
bin="$MB_BIN/step_bench"
fail=0
expect() {  # expect <exit code> <message fragment> <args...>
  local want=$1 frag=$2; shift 2
  local err rc
  err=$(timeout 60 "$bin" --steps 1 --warmup 0 "$@" 2>&1 >/dev/null); rc=$?
  if [[ $rc -ne $want ]]; then echo "FAIL [step_bench_bad_config]: step_bench $* exited $rc, want $want: $err"; fail=1; return; fi
  if [[ "$err" != *"$frag"* ]]; then echo "FAIL [step_bench_bad_config]: step_bench $*: message '$err' lacks '$frag'"; fail=1; return; fi
  if [[ $want -eq 2 && $(grep -c . <<<"$err") -ne 1 ]]; then echo "FAIL [step_bench_bad_config]: step_bench $*: want one line, got: $err"; fail=1; return; fi
  echo "ok   [step_bench_bad_config]: step_bench $* -> $rc: $err"
}
expect 2 "--heads 3 must divide --hidden 64" --heads 3
expect 2 "--kv-heads 3 must divide --heads 4" --kv-heads 3
expect 2 "--seq 128 exceeds the position table (--max-seq 64)" --seq 128 --max-seq 64
expect 2 "--seq 2048 exceeds the position table (--max-seq 1024)" --model gpt2-124m --seq 2048
expect 2 "--model huge: unknown preset" --model huge
expect 2 "--steps 0: must be at least 1" --steps 0
expect 2 "--device" --device tpu
MESHBENCH_STEP_HEADS=5 expect 2 "--heads 5 must divide --hidden 64"
expect 2 "--device cuda: no usable GPU" --device cuda
expect 2 "--sp: sequence parallel splits the tensor-parallel group" --sp
expect 2 "--micro-batches 0: must be at least 1" --micro-batches 0
expect 2 "--export with --zero 3" --zero 3 --export /tmp/mb-never-written
expect 2 "--inject-fault: corrupts a gradient before its data-parallel reduction" --inject-fault 0
expect 2 "--mesh" --mesh dp=2
expect 2 "" --mesh bogus=2
expect 2 "--backend" --backend gloo
# MoE (issue 13)
expect 2 "--top-k 5: must be between 1 and --experts 4 (top-k <= E)" --experts 4 --top-k 5
expect 2 "--experts -2: must be 0 (dense) or at least 1" --experts -2
expect 2 "--capacity-factor -1: must be >= 0 (0: dropless)" --experts 4 --capacity-factor -1
expect 2 "MoE options need --experts E >= 1" --top-k 2
# the shared flags a sweep passes are accepted at their single-rank values
expect 0 "" --mesh tp=1,pp=1 --order tp-cp-ep-dp-pp --group world --backend mpi --layers 1 --hidden 32 --heads 2 --seq 8 --vocab 16 --micro-batch 1 --quiet
# a good configuration still runs (the test can tell the difference)
expect 0 "" --layers 1 --hidden 32 --heads 2 --seq 8 --vocab 16 --micro-batch 1 --quiet
exit $fail
