#!/usr/bin/env bash
# Impossible plans exit 2 on every rank, with one message from rank 0 naming the option and
# the rule, and no rank hangs (each run has a timeout).
source "$(dirname "$0")/lib.bash"
RUN_TIMEOUT=60
bad() {  # ranks, fragment, args...
  local n=$1 frag=$2; shift 2
  if expect_rc 2 "$n" step_bench --layers 1 --hidden 32 --heads 2 --seq 8 --vocab 16 --steps 1 --warmup 0 "$@"; then
    local lines
    lines=$(grep -c . "$WORK/err" || true)
    if [[ "$(cat "$WORK/err")" != *"$frag"* ]]; then fail "$*: message lacks '$frag': $(cat "$WORK/err")"
    elif [[ $lines -ne 1 ]]; then fail "$*: want one message line, got $lines: $(cat "$WORK/err")"
    else pass "$n ranks $*: exit 2: $(cat "$WORK/err")"; fi
  fi
}
bad 2 "dp=3" --mesh dp=3
bad 2 "--mesh tp=2: --ffn 255 must be divisible by tp" --mesh tp=2 --ffn 255
bad 2 "--mesh pp=2: pipeline parallel is not available in this build" --mesh pp=2,dp=1
bad 2 "--micro-batches 0: must be at least 1" --mesh dp=2 --micro-batches 0
bad 2 "--bucket-mb -1" --mesh dp=2 --bucket-mb -1
bad 2 "--backend nccl: needs --device cuda" --mesh dp=2 --backend nccl
bad 2 "--inject-fault 5: no such rank" --mesh dp=2 --inject-fault 5
bad 2 "--export" --mesh dp=2 --export "$WORK/x"
bad 4 "dp=3" --mesh dp=3
finish
