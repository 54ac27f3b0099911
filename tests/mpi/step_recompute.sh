#!/usr/bin/env bash
# --recompute selective in the engine (issue 29): the attention core's forward runs again before
# its backward, into model-wide scratch, so no layer keeps its b x heads x seq^2 probabilities
# (--attention naive) or its row log-sum-exp (flash, the default). --check against the
# single-rank reference on one rank and five families at 2 ranks (seq 70), for each attention;
# memory measured = analytic, the activations below --recompute none's by exactly the
# probabilities (log-sum-exp); a profiled step's ops equal the step model's op list (the
# recomputed forward included, phase F); the refusal with cp > 1.
source "$(dirname "$0")/lib.bash"
RUN_TIMEOUT=120
shape=(--model tiny --seq 70 --max-seq 70 --steps 1 --warmup 0 --threads 1 --attention naive)
check_families "${shape[@]}" --check --recompute selective
flash=(--model tiny --seq 70 --max-seq 70 --steps 1 --warmup 0 --threads 1 --attention flash)
check_families "${flash[@]}" --check --recompute selective

mem() {  # $1 attention, $2 recompute -> "activations_measured activations_analytic buffers_measured buffers_analytic"
  expect_rc 0 1 step_bench --model tiny --seq 70 --max-seq 70 --steps 1 --warmup 0 --threads 1 --attention "$1" \
    --recompute "$2" -O "$WORK/m-$1-$2.h5" >/dev/null &&
    py - "$WORK/m-$1-$2.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
m = {r["category"].decode(): r for r in f["runs"][list(f["runs"])[0]]["step"]["memory"][()] if r["rank"] == 0}
print(m["activations"]["measured_bytes"], m["activations"]["analytic_bytes"], m["buffers"]["measured_bytes"],
      m["buffers"]["analytic_bytes"])
PY
}
read -r sa sa_an sb sb_an < <(mem naive selective)
read -r na na_an nb nb_an < <(mem naive none)
# tiny: 2 layers x B 4 x 4 heads x 70 x 70 probabilities (each layer's entry 16-aligned)
want=$(( 2 * 4 * 4 * 70 * 70 * 4 ))
if py -c "import sys; sa, sa_an, sb, sb_an, na, w = map(float, sys.argv[1:]); \
  sys.exit(0 if sa == sa_an and sb == sb_an and na - sa == w else 1)" "$sa" "$sa_an" "$sb" "$sb_an" "$na" "$want"; then
  pass "memory: activations $sa B = analytic, $want B below --recompute none; buffers $sb B = analytic (the scratch)"
else
  fail "memory: selective activations $sa (analytic $sa_an), buffers $sb (analytic $sb_an); none $na; want a drop of $want"
fi

# HFU beside MFU: the hardware FLOPs add each micro-batch's attention forward (tiny: 2 layers x
# B 4 x 4 heads x 4 x macs(70, 16)), stored and printed.
if py - "$WORK/m-naive-selective.h5" "$WORK/m-naive-none.h5" <<'PY'
import sys, h5py
def a(path):
    f = h5py.File(path, "r")
    return f["runs"][list(f["runs"])[0]]["step"].attrs
s, n = a(sys.argv[1]), a(sys.argv[2])
macs = sum((min(70, i0 + 64) - i0) * min(70, i0 + 64) * 16 for i0 in range(0, 70, 64))
want = s["flops_per_step"] + 2 * 4 * 4 * 4 * macs
assert s["flops_per_step"] == n["flops_per_step"] == n["flops_per_step_hardware"], (s["flops_per_step"], n["flops_per_step"])
assert abs(s["flops_per_step_hardware"] - want) < 1e-6 * want, (s["flops_per_step_hardware"], want)
PY
then pass "hardware FLOPs: the model's plus the recomputed attention forwards (none: equal)"
else fail "hardware FLOPs attribute"; fi
if expect_rc 0 1 step_bench "${shape[@]}" --recompute selective && grep -q "HFU .*% of the measured GEMM peaks" "$WORK/out"
then pass "console: HFU beside MFU"; else fail "console: no HFU line: $(grep -i flops "$WORK/out" | tail -3)"; fi

# The engine runs what the step model lists: a profiled step's ops and calls equal --op-list's.
if expect_rc 0 2 step_bench --model tiny --steps 2 --warmup 0 --threads 1 --profile --mesh dp=2 --recompute selective --attention naive \
    -O "$WORK/ol.h5"; then
  if py "$MB_SRC/tests/mpi/op_list_check.py" "$WORK/ol.h5" "$MB_BIN/step_bench" --model tiny --world 2 --mesh dp=2 \
      --recompute selective --attention naive > "$WORK/check" 2>&1; then pass "op list: $(cat "$WORK/check")"
  else fail "op list: $(cat "$WORK/check")"; fi
fi

# flash: each layer's log-sum-exp (B 4 x 4 heads x 70, 16-aligned) leaves the activations and one
# becomes scratch; the output is written again in place (no output scratch)
read -r sa sa_an sb sb_an < <(mem flash selective)
read -r na na_an nb nb_an < <(mem flash none)
if py -c "import sys; sa, sa_an, sb, sb_an, na, nb = map(float, sys.argv[1:]); \
  sys.exit(0 if sa == sa_an and sb == sb_an and na - sa == 2 * 1120 * 4 and sb - nb == 1120 * 4 else 1)" \
  "$sa" "$sa_an" "$sb" "$sb_an" "$na" "$nb"; then
  pass "memory, flash: activations $sa B = analytic (2 layers' log-sum-exp below none), buffers $sb B = analytic (+ one)"
else
  fail "memory, flash: selective activations $sa (analytic $sa_an), buffers $sb (analytic $sb_an); none $na, $nb"
fi
if expect_rc 0 2 step_bench --model tiny --steps 2 --warmup 0 --threads 1 --profile --mesh dp=2 --recompute selective \
    -O "$WORK/olf.h5"; then
  if py "$MB_SRC/tests/mpi/op_list_check.py" "$WORK/olf.h5" "$MB_BIN/step_bench" --model tiny --world 2 --mesh dp=2 \
      --recompute selective > "$WORK/check" 2>&1; then pass "op list, flash: $(cat "$WORK/check")"
  else fail "op list, flash: $(cat "$WORK/check")"; fi
fi

if expect_rc 2 2 step_bench --model tiny --seq 64 --max-seq 64 --steps 1 --warmup 0 --threads 1 --mesh cp=2 \
    --recompute selective; then
  if [[ $(grep -c -- "--recompute selective with context parallel" "$WORK/err") -eq 1 ]]; then pass "refused: selective with cp"
  else fail "selective with cp: want the message once in: $(cat "$WORK/err")"; fi
fi
finish
