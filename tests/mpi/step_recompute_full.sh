#!/usr/bin/env bash
# --recompute full in the engine (issue 29): a recomputed block keeps only its output per
# micro-batch; its other activations live in one model-wide scratch and its forward runs again
# before its backward. --check against the single-rank reference (which recomputes nothing) on
# one rank, five families and ZeRO-1/2 at 2 ranks, tp x pp at 4 (oversubscribed), context
# parallel (ring, Ulysses), flash attention, a fixed MoE routing workload, and
# --recompute-layers under a pipeline, at seq 70 (no multiple of the tiles); memory measured =
# analytic on every rank; the profiled ops equal the step model's op list; the hardware FLOPs
# add each recomputed block's forward; the refusal of --recompute-layers without --recompute full.
source "$(dirname "$0")/lib.bash"
RUN_TIMEOUT=150
shape=(--model tiny --seq 70 --max-seq 70 --steps 1 --warmup 0 --threads 1)
check_families "${shape[@]}" --check --recompute full
check_case "ZeRO-1" 2 "${shape[@]}" --check --recompute full --mesh dp=2 --zero 1
check_case "ZeRO-2, m=2" 2 "${shape[@]}" --check --recompute full --mesh dp=2 --zero 2 --micro-batches 2
check_case "tp=2 x pp=2 --sp, 4 ranks (oversubscribed)" 4 "${shape[@]}" --check --recompute full --layers 4 \
  --mesh tp=2,pp=2 --sp --micro-batches 2
check_case "cp=2 ring" 2 "${shape[@]}" --check --recompute full --seq 64 --max-seq 64 --mesh cp=2
check_case "cp=2 ulysses" 2 "${shape[@]}" --check --recompute full --seq 64 --max-seq 64 --mesh cp=2 --cp-algo ulysses
check_case "flash, one rank" 1 "${shape[@]}" --check --recompute full --attention flash
check_case "ep=2, zipf routing" 2 "${shape[@]}" --check --recompute full --experts 4 --top-k 1 --mesh ep=2 \
  --routing zipf:1.2
check_case "pp=2 interleaved, 4 layers, --recompute-layers 1" 2 "${shape[@]}" --check --recompute full --layers 4 \
  --mesh pp=2 --schedule interleaved --vpp 2 --micro-batches 4 --recompute-layers 1
check_case "pp=2 1F1B, 4 layers, --recompute-layers 1" 2 "${shape[@]}" --check --recompute full --layers 4 \
  --mesh pp=2 --micro-batches 4 --recompute-layers 1

# Memory: every rank's measured activations and buffers equal the analytic (plan_memory) ones.
mem() {  # $1 label, then step_bench args -> rows "rank act act_an buf buf_an"
  local label=$1 ranks=$2; shift 2
  expect_rc 0 "$ranks" step_bench "${shape[@]}" "$@" -O "$WORK/m-$label.h5" >/dev/null &&
    py - "$WORK/m-$label.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
rows = f["runs"][list(f["runs"])[0]]["step"]["memory"][()]
for r in sorted(set(int(x) for x in rows["rank"])):
    m = {x["category"].decode(): x for x in rows if x["rank"] == r}
    print(r, m["activations"]["measured_bytes"], m["activations"]["analytic_bytes"],
          m["buffers"]["measured_bytes"], m["buffers"]["analytic_bytes"])
PY
}
read -r _ fa fa_an fb fb_an < <(mem full 1 --recompute full)
read -r _ na na_an nb nb_an < <(mem none 1)
# tiny has 2 blocks: each leaves all but its output (the drop, per block) and one block's worth
# becomes scratch
if py -c "import sys; fa, fa_an, fb, fb_an, na, nb = map(float, sys.argv[1:]); \
  sys.exit(0 if fa == fa_an and fb == fb_an and na - fa > 0 and na - fa == 2 * (fb - nb) else 1)" \
  "$fa" "$fa_an" "$fb" "$fb_an" "$na" "$nb"; then
  pass "memory: activations $fa B = analytic ($((${na%.*} - ${fa%.*})) B below none: 2 blocks), buffers $fb B = analytic (+ one block's scratch)"
else
  fail "memory: full activations $fa (analytic $fa_an), buffers $fb (analytic $fb_an); none $na, $nb"
fi
# Under pp=2, every rank's activations equal plan_memory's, and its buffers too (the estimate
# counts one gradient-send buffer; the exchange takes another when the previous send is still
# in flight, so a rank may measure whole messages of 280 x 64 floats more).
pp_mem() {  # LABEL ARGS...: the pp=2 run of ARGS, checked on both ranks
  local label=$1; shift
  mem "$label" 2 --recompute full --layers 4 --mesh pp=2 --micro-batches 4 "$@" > "$WORK/$label-mem"
  if [[ $(wc -l < "$WORK/$label-mem") -eq 2 ]] && py - "$WORK/$label-mem" <<'PY'
import sys
for line in open(sys.argv[1]):
    r, a, a_an, b, b_an = map(float, line.split())
    assert a == a_an and b >= b_an and (b - b_an) % (280 * 64 * 4) == 0, line
PY
  then pass "memory, pp=2, $label: each stage's activations and buffers = plan_memory's"
  else fail "memory, pp=2, $label: $(cat "$WORK/$label-mem")"; fi
}
pp_mem "--recompute-layers 1" --recompute-layers 1
pp_mem "MoE blocks recomputed" --experts 4 --top-k 2 --moe-every 2  # every other block MoE, all recomputed

# Hardware FLOPs: the model's plus each recomputed block's forward per micro-batch (tiny, dense:
# its GEMMs and its attention products), stored and printed as HFU.
if py - "$WORK/m-full.h5" <<'PY'
import sys, h5py
a = h5py.File(sys.argv[1], "r")["runs"]
a = a[list(a)[0]]["step"].attrs
B, T, C, F, NH, KVH, L = (int(a[k]) for k in ("micro_batch", "seq", "hidden", "ffn", "heads", "kv_heads", "layers"))
hs, N = C // NH, B * T
macs = sum((min(T, i0 + 64) - i0) * min(T, i0 + 64) * hs for i0 in range(0, T, 64))
block = 2 * (N * (NH + 2 * KVH) * hs * C + N * C * C + 2 * N * F * C) + 4 * B * NH * macs
want = a["flops_per_step"] + L * block
assert abs(a["flops_per_step_hardware"] - want) < 1e-9 * want, (a["flops_per_step_hardware"], want)
text = lambda v: v.decode() if isinstance(v, bytes) else str(v)
assert (text(a["attention"]), text(a["recompute"]), int(a["recompute_layers"])) == ("flash", "full", 0)
PY
then pass "hardware FLOPs: the model's plus both blocks' forward; attrs attention, recompute, recompute_layers"
else fail "hardware FLOPs attribute"; fi

# The engine runs what the step model lists, the recomputed forwards included (phase F).
if expect_rc 0 2 step_bench --model tiny --layers 4 --steps 2 --warmup 0 --threads 1 --profile --mesh pp=2 \
    --micro-batches 2 --recompute full --recompute-layers 1 -O "$WORK/ol.h5"; then
  if py "$MB_SRC/tests/mpi/op_list_check.py" "$WORK/ol.h5" "$MB_BIN/step_bench" --model tiny --layers 4 --world 2 \
      --mesh pp=2 --micro-batches 2 --recompute full --recompute-layers 1 > "$WORK/check" 2>&1; then
    pass "op list: $(cat "$WORK/check")"
  else fail "op list: $(cat "$WORK/check")"; fi
fi

if expect_rc 2 1 step_bench "${shape[@]}" --recompute-layers 1; then
  if [[ $(grep -c -- "--recompute-layers 1: chooses the blocks --recompute full recomputes" "$WORK/err") -eq 1 ]]
  then pass "refused: --recompute-layers without --recompute full"
  else fail "want the --recompute-layers message once in: $(cat "$WORK/err")"; fi
fi
finish
