#!/usr/bin/env bash
# The full 5D plan (issue 25; 16 ranks, 8x oversubscribed on 2 cores: correctness only):
# tp=2 x cp=2 x pp=2 x dp=2 on the dense grid with ep=2 (etp=1, edp=4) on the expert grid laid
# over the same ranks (Megatron's rule), sequence parallel, MoE blocks, ZeRO-1 with the dense
# state over dp x cp and the experts' over edp, under two rank orders (the second with the
# interleaved schedule). --check against the single-rank reference, every dimension's traced
# bytes equal to the plan's, memory per category equal to plan_memory (compose_check.py).
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/compose_lib.bash"
RUN_TIMEOUT=170
args=(--layers 4 --hidden 32 --heads 2 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 1 --micro-batches 2 --steps 1
      --warmup 0 --threads 1 --check --experts 4 --top-k 2 --aux-loss-coef 0.05 --sp --zero 1
      --mesh tp=2,cp=2,pp=2,dp=2,ep=2,etp=1)
dims=tp,cp,pp,dp:reduce_scatter,dp:all_gather,ep:all_to_allv,edp:reduce_scatter,edp:all_gather,embedding
compose_case "5D tp=2 x cp=2 x pp=2 x dp=2, ep=2, order tp-cp-ep-dp-pp" 16 "$dims" --group pp=0,8 \
  --memory-exact params,grads,optimizer,activations -- "${args[@]}" --order tp-cp-ep-dp-pp
compose_case "5D tp=2 x cp=2 x pp=2 x dp=2, ep=2, order cp-tp-dp-ep-pp, interleaved vpp=2" 16 "$dims" --group pp=0,8 \
  --group cp=0,1 --memory-exact params,grads,optimizer,activations -- "${args[@]}" --order cp-tp-dp-ep-pp \
  --schedule interleaved --vpp 2
finish
