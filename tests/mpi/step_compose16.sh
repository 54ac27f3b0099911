#!/usr/bin/env bash
# 16 ranks (issue 14, "Composition, proven"; 8x oversubscribed on 2 cores: correctness only):
# tp=2 x cp=2 x pp=2 x dp=2 with the interleaved 1F1B schedule (2 chunks per rank), --check
# against the single-rank reference with the traced bytes of every dimension equal to the
# plan's and no dimension missing (compose_check.py).
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/compose_lib.bash"
RUN_TIMEOUT=170
compose_case "tp=2 x cp=2 x pp=2 x dp=2, interleaved vpp=2" 16 tp,cp,pp,dp,embedding --group pp=0,8 -- \
  --layers 4 --hidden 32 --heads 2 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 1 --micro-batches 2 --steps 1 \
  --warmup 0 --threads 1 --check --mesh tp=2,cp=2,pp=2,dp=2 --schedule interleaved --vpp 2
finish
