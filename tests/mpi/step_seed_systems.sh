#!/usr/bin/env bash
# The seed's systems, scaled down (issue 25, "Every combination the seed names"; 4 and 8 ranks
# oversubscribe 2 cores: correctness only). Each runs --check against the single-rank
# reference under two rank orders, with the traced bytes of every dimension equal to the
# plan's, no dimension missing, and the memory per category equal to plan_memory
# (compose_check.py; ZeRO-1's state and a pipeline's activations are exact):
#   Llama-3-like: TP + PP + DP with ZeRO-1 and SP, and with CP in place of DP;
#   Mixtral-like: DP + EP + TP with SP (each tp rank routes its sequence shard);
#   GPT-4-like: DP + TP + PP + EP;
#   Gemini-like: DP + TP + CP with MoE blocks (each cp rank routes its chunks);
#   DeepSeek-V3-like: PP + EP + ZeRO-1 (the experts' state sharded over edp).
# The full 5D plan at 16 ranks is mpi.step_5d.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/compose_lib.bash"
RUN_TIMEOUT=170
tiny=(--layers 2 --hidden 32 --heads 2 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 1 --micro-batches 2
      --steps 1 --warmup 0 --threads 1 --check)
moe=(--experts 4 --top-k 2 --aux-loss-coef 0.05)
state=(--memory-exact params,grads,optimizer,activations)
all=(--memory-exact params,grads,optimizer,activations,buffers)
for order in tp-cp-ep-dp-pp cp-tp-dp-ep-pp; do
  compose_case "Llama-3-like tp=2 x pp=2 x dp=2, SP, ZeRO-1, order $order" 8 \
    tp,pp,dp:reduce_scatter,dp:all_gather,embedding "${state[@]}" -- \
    "${tiny[@]}" --mesh tp=2,pp=2,dp=2 --sp --zero 1 --order "$order"
  compose_case "Llama-3-like tp=2 x cp=2 x pp=2, SP, ZeRO-1 over dp x cp, order $order" 8 \
    tp,cp,pp,dp:reduce_scatter,dp:all_gather,embedding "${state[@]}" -- \
    "${tiny[@]}" --mesh tp=2,cp=2,pp=2 --sp --zero 1 --order "$order"
  compose_case "Mixtral-like tp=2 x ep=2 (etp=1) x dp=2, SP, order $order" 4 tp,ep:all_to_allv,dp,edp "${all[@]}" -- \
    "${tiny[@]}" "${moe[@]}" --mesh tp=2,etp=1,ep=2 --sp --order "$order"
  compose_case "GPT-4-like tp=2 x pp=2 x ep=2 (etp=1) x dp=2, order $order" 8 tp,pp,ep:all_to_allv,dp,edp,embedding \
    "${all[@]}" -- \
    "${tiny[@]}" "${moe[@]}" --mesh tp=2,etp=1,pp=2,ep=2 --order "$order"
  compose_case "Gemini-like tp=2 x cp=2 x dp=2, MoE, order $order" 8 tp,cp,dp "${all[@]}" -- \
    "${tiny[@]}" "${moe[@]}" --mesh tp=2,etp=1,cp=2,dp=2 --order "$order"
done
# DeepSeek-V3-like under two orders with pp slowest (the expert grid's rule: with pp not last,
# etp x ep must equal tp x cp)
for order in tp-cp-ep-dp-pp dp-ep-tp-cp-pp; do
  compose_case "DeepSeek-V3-like pp=2 x ep=2 x dp=4 (edp=2), ZeRO-1, order $order" 8 \
    pp,ep:all_to_allv,dp:reduce_scatter,dp:all_gather,edp:reduce_scatter,edp:all_gather,embedding "${state[@]}" -- \
    "${tiny[@]}" "${moe[@]}" --mesh pp=2,ep=2 --zero 1 --order "$order"
done
finish
