#!/usr/bin/env bash
# scripts/gpu-check.sh without a GPU (issue 44, items 1-4): its parsers on recorded fixtures
# (tests/golden/gpu_check/) and its plan (--dry-run). Sourcing the script defines its functions
# and runs nothing.
# - parity lines whose label has a space ("step flash") keep their fields: every row reads ok,
#   and the table exits 0; a FAIL line fails the table;
# - the driver gate follows the toolkit the build uses (CUDA 12: 525, 13: 580), and leaves an
#   unknown one to the device probe;
# - a cmake log with missing packages names each with its install line;
# - the plan: the step checks before any collective sweep; an N-rank sweep above 16 MiB is float
#   only; the estimates fit 5 minutes (--quick, 1 GPU) and 10 (full, 8 GPUs);
# - the CUDA probe (device count through CUDA, so CUDA_VISIBLE_DEVICES applies) compiles with
#   the toolkit's nvcc where there is one, and without a GPU says so and exits non-zero.
set -euo pipefail
MB_SRC="${MB_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
MB_PYTHON="${MB_PYTHON:-/usr/bin/python3}"
G="$MB_SRC/tests/golden/gpu_check"
fail() { echo "FAIL [gpu_check_parse]: $*" >&2; exit 1; }
WORK=$(mktemp -d /tmp/mb-gpu_check_parse.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# shellcheck source=../../scripts/gpu-check.sh
. "$MB_SRC/scripts/gpu-check.sh"
PY=$MB_PYTHON

# 1. parity rows: one per "parity " line, fields from the right
parse_parity "$G/parity.txt" >"$WORK/rows.tsv"
want=$(grep -c '^parity ' "$G/parity.txt")
[[ $(wc -l <"$WORK/rows.tsv") == "$want" ]] || fail "$(wc -l <"$WORK/rows.tsv") rows for $want parity lines"
flash=$(grep -c $'^  parity step flash \(fp32\|bf16\)\t' "$WORK/rows.tsv" || true)
[[ $flash == 8 ]] || fail "expected 8 'step flash' rows, got $flash: $(cat "$WORK/rows.tsv")"
awk -F'\t' '$3 != "ok" { print; bad = 1 } END { exit bad }' "$WORK/rows.tsv" >&2 || fail "a passing parity row does not read ok"
grep -q $'^  parity step flash bf16\tgrads\tok\trel 3.118e-03 (tol 2.0e-02)$' "$WORK/rows.tsv" \
  || fail "the flash bf16 grads row lost its fields: $(grep 'flash bf16' "$WORK/rows.tsv")"
summarize "$WORK" "$WORK/rows.tsv" >"$WORK/table.txt" || fail "an all-ok table exits non-zero: $(cat "$WORK/table.txt")"
grep -q '| ok ' "$WORK/table.txt" || fail "no table printed"
# a failed parity line, and a short one, fail the table
printf 'parity step flash fp32 grads 5.0e-03 1.0e-04 FAIL\nparity short line\n' >"$WORK/bad.txt"
parse_parity "$WORK/bad.txt" >"$WORK/bad.tsv"
grep -q $'\tgrads\tFAIL\t' "$WORK/bad.tsv" || fail "a FAIL line is not a FAIL row: $(cat "$WORK/bad.tsv")"
grep -q $'unreadable.*\tFAIL\t' "$WORK/bad.tsv" || fail "a short line is not a failed row"
mkdir "$WORK/b" && cp "$WORK/bad.tsv" "$WORK/b/rows.tsv"
if summarize "$WORK/b" "$WORK/b/rows.tsv" >/dev/null; then fail "a table with a FAIL row exits 0"; fi
# collectives rows come from the rc file and the .jsonl files
mkdir "$WORK/c" && : >"$WORK/c/rows.tsv"
echo "all_reduce 8 float_32M-512M 0" >"$WORK/c/collective_rc.txt"
printf '{"wrong": 0, "busbw": 180.5}\n{"wrong": 0, "busbw": 361.2}\n' >"$WORK/c/all_reduce_n8_float_32M-512M.jsonl"
summarize "$WORK/c" "$WORK/c/rows.tsv" >"$WORK/c/out.txt" || fail "a clean collective sweep fails the table"
grep -q 'all_reduce_bench .*n=8, nccl, float_32M-512M .*| ok .*2 points, 0 wrong, peak busbw 361.2 GB/s' "$WORK/c/out.txt" \
  || fail "collective row: $(cat "$WORK/c/out.txt")"

# 2. the driver gate
driver_gate 12.8 535.104.05 >/dev/null || fail "CUDA 12.8 refused driver 535"
driver_gate 12.4 525.60.13 >/dev/null || fail "CUDA 12.4 refused driver 525"
if driver_gate 12.8 520.61.05 >/dev/null; then fail "CUDA 12 accepted driver 520"; fi
if driver_gate 13.0 570.124.06 >"$WORK/gate.txt"; then fail "CUDA 13 accepted driver 570"; fi
grep -q "older than 580" "$WORK/gate.txt" || fail "the refusal does not name 580: $(cat "$WORK/gate.txt")"
driver_gate 13.0 580.65.06 >/dev/null || fail "CUDA 13 refused driver 580"
driver_gate "" "" >"$WORK/gate.txt" || fail "an unknown driver/toolkit stops the check"
grep -q "probe decides" "$WORK/gate.txt" || fail "an unknown pair is not left to the probe"

# 3. missing prerequisites, named with their install line
prereq_hints "$G/cmake_missing.log" >"$WORK/hints.txt" || fail "no prerequisite named from the fixture"
grep -q "missing CLI11: apt-get install -y libcli11-dev" "$WORK/hints.txt" || fail "CLI11: $(cat "$WORK/hints.txt")"
grep -q "missing hwloc: apt-get install -y libhwloc-dev" "$WORK/hints.txt" || fail "hwloc: $(cat "$WORK/hints.txt")"
[[ $(wc -l <"$WORK/hints.txt") == 2 ]] || fail "more than the two missing packages named: $(cat "$WORK/hints.txt")"
echo "CMake Error at CMakeLists.txt:12: some other error" >"$WORK/other.log"
if prereq_hints "$WORK/other.log" >/dev/null; then fail "a failure that is not a missing package names one"; fi

# 4. the plan
for g in 1 8; do
  for q in 0 1; do
    plan_checks "$g" "$q" 1 >"$WORK/plan.tsv"
    first_coll=$(awk -F'\t' '$1 == "coll" { print NR; exit }' "$WORK/plan.tsv")
    last_step=$(awk -F'\t' '$1 != "coll" { n = NR } END { print n }' "$WORK/plan.tsv")
    [[ -z $first_coll || $last_step -lt $first_coll ]] || fail "gpus=$g quick=$q: a step check after a collective sweep"
    ((q == 0)) || [[ -z $first_coll ]] || fail "--quick runs collective sweeps"
    # ARGS of a sweep: RANKS DTYPES OPS MIN MAX; above 16 MiB only float
    awk -F'\t' '$1 == "coll" { split($6, a, " "); m = a[5]; v = m + 0; u = substr(m, length(m));
      b = (u == "M" ? v * 1024 * 1024 : (u == "K" ? v * 1024 : (u == "G" ? v * 1024 ^ 3 : v)));
      if (b > 16 * 1024 * 1024 && a[2] != "float") { print; bad = 1 } } END { exit bad }' "$WORK/plan.tsv" >&2 \
      || fail "gpus=$g: a sweep above 16 MiB with more than float"
  done
done
grep -q $'^parity\t' <(plan_checks 8 0 1 | sed -n 2p) || fail "parity is not the second check"
quick1=$(plan_checks 1 1 1 | plan_totals | awk '{ print $4 }')
full8=$(plan_checks 8 0 1 | plan_totals | awk '{ print $4 }')
((quick1 <= 300)) || fail "--quick on 1 GPU is budgeted $quick1 s (> 300)"
((full8 <= 600)) || fail "the full check on 8 GPUs is budgeted $full8 s (> 600)"
bash "$MB_SRC/scripts/gpu-check.sh" --dry-run --gpus 8 >"$WORK/dry.txt" || fail "--dry-run exits non-zero"
grep -q "estimate $full8 s" "$WORK/dry.txt" || fail "--dry-run's total: $(tail -1 "$WORK/dry.txt")"
if bash "$MB_SRC/scripts/gpu-check.sh" --dry-run --gpus x >/dev/null 2>&1; then fail "--gpus x accepted"; fi

# 5. the CUDA probe builds with the toolkit, and says so when there is no device
nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
if [[ -x $nvcc ]]; then
  probe_source >"$WORK/probe.cu"
  "$nvcc" -o "$WORK/probe" "$WORK/probe.cu" >"$WORK/nvcc.log" 2>&1 || fail "the probe does not compile: $(tail -5 "$WORK/nvcc.log")"
  rc=0
  "$WORK/probe" >"$WORK/probe.txt" 2>&1 || rc=$?
  if [[ $rc == 0 ]]; then
    grep -qE '^runtime [0-9]+ driver [0-9]+ devices [0-9]+$' "$WORK/probe.txt" || fail "probe: $(cat "$WORK/probe.txt")"
  else
    grep -q '^error cuda' "$WORK/probe.txt" || fail "a failing probe does not name the error: $(cat "$WORK/probe.txt")"
  fi
else
  echo "note [gpu_check_parse]: no nvcc at $nvcc: the probe's build is not checked here"
fi
echo "ok   [gpu_check_parse]: parity rows ($want, 8 flash), driver gate, prerequisites, plan ($quick1 s quick/1, $full8 s full/8), probe"
