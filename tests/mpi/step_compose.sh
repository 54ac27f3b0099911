#!/usr/bin/env bash
# Composed plans at 8 ranks (issue 14, "Composition, proven"; oversubscribed on 2 cores:
# correctness only), each --check against the single-rank reference with the traced bytes of
# every dimension equal to the plan's and no dimension missing (compose_check.py):
#   tp=2 x pp=2 x dp=2 under the default order and under tp-pp-dp (the groups move with it);
#   tp=2 x cp=2 x dp=2;
#   pp=2 x dp=2 with ZeRO-1 and ZeRO-2 (the plan's 4 ranks), each stage's state sharded over
#   its own dp group, the state's measured bytes equal to the analytic per rank; and at 8
#   ranks pp=2 x dp=2 x cp=2 with ZeRO-1 (the shard over the stage's dp x cp group);
#   tp=2 x ep=2 x pp=2 (etp=1, so dp=2 and edp=2) with MoE blocks in every layer.
# The refusals that remain (ZeRO-3 with pp, ...) are in step_bad_plans.sh.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/compose_lib.bash"
tiny=(--layers 2 --hidden 32 --heads 2 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 1 --micro-batches 2
      --steps 1 --warmup 0 --threads 1 --check)
compose_case "tp=2 x pp=2 x dp=2, order tp-cp-ep-dp-pp" 8 tp,pp,dp,embedding --group pp=0,4 --group dp=0,2 -- \
  "${tiny[@]}" --mesh tp=2,pp=2,dp=2 --order tp-cp-ep-dp-pp
compose_case "tp=2 x pp=2 x dp=2, order tp-pp-dp" 8 tp,pp,dp,embedding --group pp=0,2 --group dp=0,4 -- \
  "${tiny[@]}" --mesh tp=2,pp=2,dp=2 --order tp-pp-dp
compose_case "tp=2 x cp=2 x dp=2" 8 tp,cp,dp -- "${tiny[@]}" --mesh tp=2,cp=2,dp=2
compose_case "pp=2 x dp=2, ZeRO-1" 4 pp,dp:reduce_scatter,dp:all_gather,embedding \
  --memory-exact params,grads,optimizer,activations -- \
  "${tiny[@]}" --mesh pp=2,dp=2 --zero 1
compose_case "pp=2 x dp=2, ZeRO-2, untied" 4 pp,dp:reduce_scatter,dp:all_gather --memory-exact params,optimizer -- \
  "${tiny[@]}" --mesh pp=2,dp=2 --zero 2 --tied false
compose_case "pp=2 x dp=2 x cp=2, ZeRO-1 over each stage's dp x cp group" 8 \
  pp,cp,dp:reduce_scatter,dp:all_gather,embedding --memory-exact params,grads,optimizer -- \
  "${tiny[@]}" --mesh pp=2,dp=2,cp=2 --zero 1
compose_case "tp=2 x ep=2 x pp=2 (etp=1), MoE 4 experts top-2" 8 tp,ep:all_to_allv,pp,dp,edp,embedding -- \
  "${tiny[@]}" --mesh tp=2,etp=1,ep=2,pp=2 --experts 4 --top-k 2 --aux-loss-coef 0.05
finish
