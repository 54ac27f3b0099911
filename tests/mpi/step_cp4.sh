#!/usr/bin/env bash
# Context parallel at 4 ranks (oversubscribed on 2 cores: correctness only): each algorithm
# at cp=4, the contiguous split, cp=2 x dp=2, cp=2 x tp=2 (all-reduce, sequence parallel,
# Ulysses over tensor-parallel heads) and cp=2 x pp=2 (1F1B, ring and Ulysses), each --check
# against the single-rank reference with the measured bytes equal to the plan's.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 1 --hidden 32 --heads 4 --kv-heads 4 --seq 16 --vocab 62 --micro-batch 1 --steps 1 --warmup 0
      --threads 1 --check)  # not --quiet: the MISMATCH flag is in the console table
for plan in "--mesh cp=4" "--mesh cp=4 --cp-algo allgather" "--mesh cp=4 --cp-algo ulysses" \
            "--mesh cp=4 --cp-split contiguous" "--mesh cp=2,dp=2 --micro-batches 2" "--mesh cp=2,tp=2" \
            "--mesh cp=2,tp=2 --sp --cp-algo allgather" "--mesh cp=2,tp=2 --cp-algo ulysses --hidden 64 --heads 8" \
            "--mesh cp=2,pp=2 --layers 2 --micro-batches 2" "--mesh cp=2,pp=2 --layers 2 --micro-batches 2 --cp-algo ulysses"; do
  # shellcheck disable=SC2086
  if expect_rc 0 4 step_bench "${tiny[@]}" $plan; then
    if ! grep -q "check pass" "$WORK/out"; then fail "$plan: no 'check pass'"
    elif grep -q MISMATCH "$WORK/out"; then fail "$plan: measured bytes differ from the plan's"
    else pass "$plan: check pass, bytes match"; fi
  fi
done
finish
