#!/usr/bin/env bash
# The combinations issue 25 lifted, each at its smallest sizes (2 and 4 ranks; 4 oversubscribe
# 2 cores: correctness only): --check against the single-rank reference, the traced bytes of
# every dimension equal to the plan's, no dimension missing, and the state memory equal to
# plan_memory (compose_check.py). The seed's systems and the 5D plan are step_seed_systems.sh
# and step_5d.sh; expert tensor parallel step_etp.sh; the rules that remain step_bad_plans.sh.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/compose_lib.bash"
RUN_TIMEOUT=170
tiny=(--layers 2 --hidden 32 --heads 2 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 1 --micro-batches 2
      --steps 1 --warmup 0 --threads 1 --check)
moe=(--experts 4 --top-k 2 --aux-loss-coef 0.05)
exact=(--memory-exact params,grads,optimizer,activations,buffers)
for z in 1 2 3; do
  mem=("${exact[@]}")
  ((z == 1)) || mem=(--memory-exact optimizer)  # ZeRO-2/3's peaks hold units in flight (zero.md)
  compose_case "ZeRO-$z with tp=2 x dp=2" 4 tp,dp:reduce_scatter,dp:all_gather "${mem[@]}" -- \
    "${tiny[@]}" --mesh tp=2,dp=2 --zero "$z"
  compose_case "ZeRO-$z with ep=2 (dp=4 dense, edp=2 experts)" 4 \
    ep:all_to_allv,dp:reduce_scatter,dp:all_gather,edp:reduce_scatter,edp:all_gather "${mem[@]}" -- \
    "${tiny[@]}" "${moe[@]}" --mesh ep=2 --zero "$z"
done
compose_case "ZeRO-3 with pp=2 x dp=2 (units kept)" 4 pp,dp:reduce_scatter,dp:all_gather,embedding \
  --memory-exact params,optimizer -- "${tiny[@]}" --mesh pp=2,dp=2 --zero 3
compose_case "ZeRO-3 with pp=2 x dp=2, --zero3-regather" 4 pp,dp:reduce_scatter,dp:all_gather,embedding \
  --memory-exact optimizer -- "${tiny[@]}" --mesh pp=2,dp=2 --zero 3 --zero3-regather
compose_case "--sp with pp=2 x tp=2" 4 tp,pp,embedding "${exact[@]}" -- "${tiny[@]}" --mesh pp=2,tp=2 --sp
compose_case "MoE with cp=2" 2 cp:all_reduce,dp "${exact[@]}" -- "${tiny[@]}" "${moe[@]}" --mesh cp=2
compose_case "MoE with tp=2 --sp (etp=1)" 2 tp "${exact[@]}" -- "${tiny[@]}" "${moe[@]}" --mesh tp=2,etp=1 --sp
compose_case "MoE with cp=2 x ep=2" 4 cp,ep:all_to_allv,dp,edp "${exact[@]}" -- "${tiny[@]}" "${moe[@]}" --mesh cp=2,ep=2
compose_case "MoE with tp=2 --sp x ep=2 (etp=1)" 4 tp,ep:all_to_allv,dp,edp "${exact[@]}" -- \
  "${tiny[@]}" "${moe[@]}" --mesh tp=2,etp=1,ep=2 --sp
finish
