#!/usr/bin/env bash
# Tensor parallel at 4 ranks (oversubscribed on 2 cores: correctness only): tp=4 with
# all-reduce and with sequence parallel, and tp=2 x dp=2 in both modes, each --check against
# the single-rank reference.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 1 --hidden 32 --heads 4 --kv-heads 4 --seq 16 --vocab 62 --micro-batch 1 --steps 1 --warmup 0
      --threads 1 --quiet --check)
for plan in "--mesh tp=4" "--mesh tp=4 --sp" "--mesh tp=2,dp=2" "--mesh tp=2,dp=2 --sp --micro-batches 2"; do
  # shellcheck disable=SC2086
  if expect_rc 0 4 step_bench "${tiny[@]}" $plan; then
    grep -q "check pass" "$WORK/out" && pass "$plan: check pass" || fail "$plan: no 'check pass'"
  fi
done
finish
