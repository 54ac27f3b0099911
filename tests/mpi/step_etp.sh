#!/usr/bin/env bash
# Expert tensor parallel (issue 25; --mesh etp=T > 1, Megatron's --expert-tensor-parallel-size;
# etp defaults to tp): each expert's MLP split over the etp group, fc by rows and proj by
# columns, the group's rows gathered after the dispatch and the partial outputs
# reduce-scattered back. Each plan runs --check against the single-rank reference with the
# traced bytes of every dimension equal to the plan's (the etp rows from the routing counts)
# and no dimension missing (compose_check.py); 4 and 8 ranks oversubscribe: correctness only.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/compose_lib.bash"
RUN_TIMEOUT=170
tiny=(--layers 2 --hidden 32 --heads 2 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 1 --micro-batches 2
      --steps 1 --warmup 0 --threads 1 --check --experts 4 --top-k 2 --aux-loss-coef 0.05)
mem=(--memory-exact params,grads,optimizer,activations,buffers)
compose_case "etp=2 alone (dp=2, edp=1)" 2 etp,dp "${mem[@]}" -- "${tiny[@]}" --mesh etp=2
compose_case "tp=2 (etp defaults to tp)" 2 tp,etp "${mem[@]}" -- "${tiny[@]}" --mesh tp=2
compose_case "tp=2 --sp, etp=2" 2 tp,etp "${mem[@]}" -- "${tiny[@]}" --mesh tp=2 --sp
compose_case "tp=2 x ep=2, etp=2, ZeRO-1" 4 tp,etp,ep:all_to_allv,dp:reduce_scatter,dp:all_gather \
  --memory-exact params,grads,optimizer -- "${tiny[@]}" --mesh tp=2,ep=2 --zero 1
for order in tp-cp-ep-dp-pp ep-tp-dp-pp; do
  compose_case "tp=2 x ep=2 --sp, etp=2, order $order" 4 tp,etp,ep:all_to_allv,dp -- \
    "${tiny[@]}" --mesh tp=2,ep=2 --sp --order "$order"
done
compose_case "etp=2 x ep=2, ZeRO-3" 4 etp,ep:all_to_allv,dp:reduce_scatter,dp:all_gather -- \
  "${tiny[@]}" --mesh etp=2,ep=2 --zero 3
compose_case "tp=2 x pp=2 x dp=2 --sp, etp=2 (edp=2), ZeRO-1" 8 \
  tp,etp,pp,dp:reduce_scatter,dp:all_gather,edp:reduce_scatter,edp:all_gather,embedding \
  --memory-exact params,grads,optimizer,activations -- "${tiny[@]}" --mesh tp=2,pp=2,dp=2 --sp --zero 1
finish
