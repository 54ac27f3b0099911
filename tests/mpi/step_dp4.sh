#!/usr/bin/env bash
# Data parallel at 4 ranks (oversubscribed on 2 cores: correctness only): dp=4 --check with
# 2 micro-batches and both reductions; the fault on rank 3 is caught.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 1 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 1 --steps 1 --warmup 0
      --threads 1 --bucket-mb 0.02 --quiet --check)
for extra in "--micro-batches 2" "--micro-batches 2 --grad-reduce sum"; do
  # shellcheck disable=SC2086
  if expect_rc 0 4 step_bench --mesh dp=4 "${tiny[@]}" $extra; then
    grep -q "check pass" "$WORK/out" && pass "dp=4 $extra: check pass" || fail "dp=4 $extra: no 'check pass'"
  fi
done
expect_rc 1 4 step_bench --mesh dp=4 "${tiny[@]}" --inject-fault 3 && pass "dp=4 --inject-fault 3: exit 1"
finish
