#!/usr/bin/env bash
# GPU check: build with CUDA/NCCL and run, on a machine with N visible GPUs, everything that
# needs one, most important first, each under a timeout. The clock (GPU_CHECK_S: 300 s with
# --quick, 600 s otherwise) starts AFTER the build, so a cold build never eats the checks;
# --build-only builds and stops (a call of its own on a device tool with a per-call limit).
#   0. prerequisites: a missing library is named with its install line (not a cmake log tail);
#      the GPUs are counted through CUDA (a probe built with the build's own nvcc), so
#      CUDA_VISIBLE_DEVICES is honoured; the driver is gated on what the build's toolkit needs
#      (CUDA 11: 450, 12: 525, 13: 580 or later), and the probe decides the rest;
#   1. the GPU is usable (a GPU that nvidia-smi sees but CUDA cannot use is a failure);
#   2. the CUDA parity tests: every op and one whole step, fp32 and bf16, against the CPU
#      reference, and three steps against the bf16 host emulation (engine_tests CudaParity*);
#   3. step_bench --device cuda --check at 1 rank, fp32 and bf16; a profiled CUDA step's ops
#      against the op list the step model reads off the model (tests/mpi/op_list_check.py);
#   4. a timed bf16 step_bench: MFU against the measured cuBLAS peaks and the datasheet, with
#      flash attention and then the materialised one (--attention naive);
#   5. the data-parallel step at N ranks (--mesh dp=N --backend nccl --check; on one GPU two
#      ranks share it over MPI), then tensor and context parallel (--quick: one checked step
#      per strategy: dp, tp, tp --sp, cp, pp, ZeRO-1, ep);
#   6. (not --quick) the six collectives on NCCL, verified: 1 rank every dtype and op to 1 MiB;
#      N ranks every dtype and op to 16 MiB, then float sum only from 32 MiB to 512 MiB;
#      the rank counts between (powers of two below N) float sum to 4 MiB.
# Each part's estimate (a budget, never a measurement) is printed by --dry-run; the estimates
# sum to under 5 minutes for --quick on one GPU and under 10 for the full check on 8.
# Prints one table (check, configuration, result, detail), also written to OUT/table.md with
# every log and HDF5 file beside it, and exits 1 if anything failed or could not run in time,
# 3 if the build failed (2 for a missing prerequisite, named), and 4 (saying so) when there is
# no GPU and nothing was checked.
#
# Usage: scripts/gpu-check.sh [--quick] [--out DIR] [--build-only] [--dry-run [--gpus N]]
#   --quick       one GPU's essentials: 1-5 with fewer steps; no collective sweeps (6)
#   --out DIR     where the table, logs and HDF5 files go (default: a fresh results/gpu-check-*;
#                 on the device tool, --out "$OUT" brings them back)
#   --build-only  configure and build the binaries the check runs, then stop
#   --dry-run     print the plan (each check with its estimate and time cap) and its totals;
#                 runs nothing; --gpus N plans for N GPUs (default 1)
# Two ranks sharing one GPU (5 on a one-GPU machine) need the Default compute mode; under
# Exclusive_Process those rows are skipped with a line saying why.
# Sourcing this file (`. scripts/gpu-check.sh`) defines its functions and runs nothing
# (tests/scripts/gpu_check_parse.sh tests the parsers and the plan that way).

# ---- functions (no side effects) --------------------------------------------------------------

# parse_parity FILE: one table row (TSV: check, configuration, result, detail) per line
# "parity LABEL... PRECISION OP ERR TOL ok|FAIL" of the parity test's output. The fields are
# read from the right, so a label with spaces ("step flash") cannot shift them; a line with too
# few fields is a failed row naming it.
parse_parity() {
  awk 'BEGIN { OFS = "\t" }
    /^parity / {
      n = NF
      if (n < 7) { print "  parity (unreadable)", substr($0, 1, 60), "FAIL", "fewer than 7 fields"; next }
      label = $2
      for (i = 3; i <= n - 5; ++i) label = label " " $i
      print "  parity " label " " $(n - 4), $(n - 3), $n, "rel " $(n - 2) " (tol " $(n - 1) ")"
    }' "$1"
}

# min_driver_for CUDA_MAJOR: the oldest Linux driver a toolkit of that major version needs
# (minor-version compatibility: any 12.x runs on 525+, any 13.x on 580+); empty if unknown.
min_driver_for() {
  case $1 in 11) echo 450 ;; 12) echo 525 ;; 13) echo 580 ;; *) echo "" ;; esac
}

# driver_gate TOOLKIT DRIVER: 0 when the driver (e.g. 570.124.06) is new enough for the
# toolkit (e.g. 12.8) or either is unknown (then the device probe decides); 1, saying why, when
# the driver is older than the toolkit's minimum.
driver_gate() {
  local tk=$1 drv=$2 major need
  major=${tk%%.*}
  need=$(min_driver_for "$major")
  if [[ -z $need || ! ${drv%%.*} =~ ^[0-9]+$ ]]; then
    echo "gpu-check: driver ${drv:-unknown}, toolkit CUDA ${tk:-unknown}: no rule here; the device probe decides"
    return 0
  fi
  if ((${drv%%.*} < need)); then
    echo "gpu-check: STOPPED: driver $drv is older than $need, which the build's CUDA $tk toolkit needs;" \
      "build with a CUDA $((major - 1)) toolkit (CUDACXX=/path/to/cuda-$((major - 1)).x/bin/nvcc) or update the driver"
    return 1
  fi
  echo "gpu-check: driver $drv, toolkit CUDA $tk (needs $need or later): ok"
  return 0
}

# prereq_hints CMAKE_LOG: one line per missing prerequisite cmake reported, with what to
# install (Debian/Ubuntu package, as scripts/install-deps.sh installs it; elsewhere a module).
# Prints nothing when the failure is not a missing package.
prereq_hints() {
  local log=$1 found=0 key pkg
  local -a table=(
    "HDF5|parallel HDF5|libhdf5-mpich-dev"
    "serial one|parallel HDF5 (a serial one was found)|libhdf5-mpich-dev"
    "CLI11|CLI11|libcli11-dev"
    "fmt|fmt|libfmt-dev"
    "nlohmann_json|nlohmann-json|nlohmann-json3-dev"
    "tomlplusplus|toml++|libtomlplusplus-dev"
    "hwloc|hwloc|libhwloc-dev"
    "openblas|OpenBLAS|libopenblas-dev"
    "GTest|GoogleTest|libgtest-dev libgmock-dev"
    "benchmark|Google Benchmark|libbenchmark-dev"
    "MPI|MPI (MPICH)|mpich libmpich-dev"
    "OpenMP|OpenMP|libgomp1 (part of build-essential)"
  )
  for entry in "${table[@]}"; do
    IFS='|' read -r key name pkg <<<"$entry"
    # cmake's own wording: find_package ("Could NOT find X", "package configuration file provided
    # by "X"") and pkg-config ("No package 'x' found", "Package 'x' ... not found")
    if grep -qE "Could NOT find $key|provided by \"$key\"|No package '$key' found|Package '$key'.*not found|found a $key" "$log"; then
      echo "gpu-check: missing $name: apt-get install -y $pkg (elsewhere: module load, or scripts/install-deps.sh lists them)"
      found=1
    fi
  done
  ((found)) && return 0 || return 1
}

_plan_row() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@"; }
# plan_checks NGPU QUICK SHARED_OK: the checks in the order they run, one per line:
# KIND<TAB>NAME<TAB>CONFIG<TAB>ESTIMATE_S<TAB>CAP_S<TAB>ARGS (ARGS: the kind's arguments,
# space-separated). Estimates are budgets for a Hopper-class node, not measurements; a
# collectives line runs each of the six binaries under CAP_S, its estimate is for all six.
plan_checks() {
  local ngpu=$1 quick=$2 shared_ok=$3 n plan dt
  local -a plans
  _plan_row usable "gpu usable" "device 0" 10 120 ""
  _plan_row parity "cuda parity" "engine_tests CudaParity*" 45 240 ""
  for dt in fp32 bf16; do _plan_row stepcheck "step_bench --check" "n=1, $dt, tiny" 15 120 "$dt"; done
  _plan_row oplist "op list" "n=1, fp32, tiny, events vs --op-list" 10 120 ""
  for plan in flash naive; do _plan_row timed "step_bench timed" "n=1, bf16, medium, $plan" 35 180 "$plan"; done
  # the strategies: two GPUs over NCCL, or two ranks sharing one GPU over MPI
  if ((ngpu > 1)); then
    _plan_row stepdp "step_bench dp=$ngpu" "n=$ngpu, nccl, --check" 30 180 "$ngpu nccl"
  elif ((shared_ok)); then
    ((quick)) || _plan_row stepdp "step_bench dp=2" "n=2 on 1 GPU, mpi, --check" 20 180 "2 mpi"
  fi
  plans=("tp=2" "tp=2 --sp" "cp=2" "cp=2 --cp-algo allgather" "cp=2 --cp-algo ulysses")
  ((quick)) && plans=("dp=2" "tp=2" "tp=2 --sp" "cp=2" "pp=2 --micro-batches 2" "dp=2 --zero 1"
    "ep=2 --experts 4 --top-k 2")
  for plan in "${plans[@]}"; do _plan_row strategy "step_bench $plan" "n=2" 15 180 "$plan"; done
  ((quick)) && return 0
  # the collectives: correctness of every dtype and op at small sizes, bandwidth in float only
  _plan_row coll "collectives n=1" "all dtypes and ops, to 1M" 60 60 "1 all all 0 1M"
  if ((ngpu > 1)); then
    _plan_row coll "collectives n=$ngpu" "all dtypes and ops, to 16M" 150 90 "$ngpu all all 0 16M"
    _plan_row coll "collectives n=$ngpu" "float sum, 32M to 512M" 60 60 "$ngpu float sum 32M 512M"
    for ((n = 2; n < ngpu; n *= 2)); do
      _plan_row coll "collectives n=$n" "float sum, to 4M" 30 40 "$n float sum 0 4M"
    done
  fi
}

# plan_totals: reads plan_checks' lines; prints "checks N estimate S s".
plan_totals() { awk -F'\t' '{ n++; s += $4 } END { printf "checks %d estimate %d s\n", n, s }'; }

# summarize OUT ROWS: the table from the rows file and the collectives' .jsonl files; exit 1 if
# any row failed or did not run.
summarize() {
  "${PY:-python3}" - "$1" "$2" <<'PY'
import json, os, sys
out, rows_path = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("\t") for l in open(rows_path) if l.strip()]
# One row per (binary, ranks, sweep): sizes, wrong elements and peak bus bandwidth from the .jsonl.
rc_path = os.path.join(out, "collective_rc.txt")
for line in (open(rc_path) if os.path.exists(rc_path) else []):
    c, n, tag, rc = line.split()
    stem = f"{c}_n{n}_{tag}"
    path = os.path.join(out, stem + ".jsonl")
    recs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    wrong = sum(r["wrong"] for r in recs)
    busbw = max((r["busbw"] for r in recs), default=0.0)
    ok = rc == "0" and wrong == 0 and recs
    detail = f"{len(recs)} points, {wrong} wrong, peak busbw {busbw:.1f} GB/s"
    if rc in ("124", "137"):
        detail = "timed out; " + detail
    elif rc == "125":
        detail = "not run: out of time"
    elif not ok:
        log = os.path.join(out, stem + ".txt")
        err = [l.strip() for l in open(log) if "error" in l.lower() or "fail" in l.lower()] if os.path.exists(log) else []
        detail = (err[0][:100] if err else detail)
    res = "ok" if ok else ("NOT RUN" if rc == "125" else f"FAIL (exit {rc})")
    rows.append([c + "_bench", f"n={n}, nccl, {tag}", res, detail])
w = [max(len(r[i]) for r in rows + [["check", "configuration", "result", "detail"]]) for i in range(4)]
line = lambda r: "| " + " | ".join(x.ljust(w[i]) for i, x in enumerate(r)) + " |"
table = [line(["check", "configuration", "result", "detail"]), "|" + "|".join("-" * (x + 2) for x in w) + "|"]
table += [line(r) for r in rows]
print("\n".join(table))
with open(os.path.join(out, "table.md"), "w") as f:
    f.write("\n".join(table) + "\n")
bad = [r for r in rows if not (r[2] in ("ok", "not available", "skipped"))]
print(f"gpu-check: {len(rows)} rows, {len(bad)} failed or not run")
sys.exit(1 if bad else 0)
PY
}

# The probe: the CUDA runtime the build uses, the driver's CUDA version and the devices CUDA
# sees (CUDA_VISIBLE_DEVICES applies). Prints "runtime R driver D devices N" or "error ...".
probe_source() {
  cat <<'CU'
#include <cstdio>
#include <cuda_runtime.h>
int main() {
  int rt = 0, drv = 0, n = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    std::printf("error %s: %s (runtime %d driver %d)\n", cudaGetErrorName(e), cudaGetErrorString(e), rt, drv);
    return 1;
  }
  std::printf("runtime %d driver %d devices %d\n", rt, drv, n);
  return 0;
}
CU
}

if [[ ${BASH_SOURCE[0]} != "$0" ]]; then return 0; fi

# ---- the run ------------------------------------------------------------------------------------
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build-gpu}
PY=${PY:-python3}
quick=0 out="" build_only=0 dry=0 dry_gpus=1
usage="usage: scripts/gpu-check.sh [--quick] [--out DIR] [--build-only] [--dry-run [--gpus N]]"
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    --build-only) build_only=1 ;;
    --dry-run) dry=1 ;;
    --gpus) dry_gpus=${2:?--gpus needs a count}; shift
      [[ $dry_gpus =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --gpus '$dry_gpus' is not a positive count" >&2; exit 2; } ;;
    -h | --help) sed -n '2,/^# (tests\/scripts/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' ($usage)" >&2; exit 2 ;;
  esac
  shift
done
if ((quick)); then BUDGET=${GPU_CHECK_S:-300}; else BUDGET=${GPU_CHECK_S:-600}; fi

if ((dry)); then
  echo "gpu-check: plan for $dry_gpus GPU(s)$( ((quick)) && echo ", --quick"); budget $BUDGET s after the build"
  plan_checks "$dry_gpus" "$quick" 1 | awk -F'\t' '{ printf "%3d. %-40s %-28s est %4d s  cap %4d s\n", NR, $2, $3, $4, $5 }'
  echo "gpu-check: $(plan_checks "$dry_gpus" "$quick" 1 | plan_totals) (estimates are budgets, not measurements)"
  exit 0
fi

[[ -n $out ]] || out="results/gpu-check-$(date +%Y%m%dT%H%M%S)"
mkdir -p "$out" || { echo "gpu-check: cannot create --out $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
rows="$out/rows.tsv"
: >"$rows"
: >"$out/collective_rc.txt"
failed=0

row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$rows"; }
left() { echo $((BUDGET - (SECONDS - clock0))); }
# limited CAP CMD...: CMD under a timeout of CAP seconds or what is left of the budget;
# exit 125 without running it when less than 20 s are left.
limited() {
  local cap=$1 l
  shift
  l=$(left)
  ((l < 20)) && return 125
  ((cap > l)) && cap=$l
  timeout -k 5 "$cap" "$@"
}
# verdict NAME CONFIG RC LOG [DETAIL]: one table row from an exit code.
verdict() {
  local detail
  case $3 in
    125) row "$1" "$2" "NOT RUN" "out of time (GPU_CHECK_S=$BUDGET)"; failed=1; return ;;
    124 | 137) row "$1" "$2" "FAIL" "timed out"; failed=1; return ;;
  esac
  if [[ $3 == 0 ]]; then row "$1" "$2" "ok" "${5:-}"; else
    detail=$(grep -m1 -E "FAIL|failed|error|Error" "$4" | cut -c1-100)
    row "$1" "$2" "FAIL (exit $3)" "${detail:-see $4}"
    failed=1
  fi
}

# ---- 0. prerequisites, toolkit, driver, devices ---------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$out/smi.txt" 2>&1 || ! grep -q '^GPU ' "$out/smi.txt"; then
  echo "gpu-check: CHECKED NOTHING: no GPU visible to nvidia-smi on $(hostname)"
  exit 4
fi
if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMESHBENCH_CUDA=ON >"$out/cmake.log" 2>&1; then
  if prereq_hints "$out/cmake.log"; then
    echo "gpu-check: STOPPED: the build lacks the prerequisites above; nothing was checked (log: $out/cmake.log)"
    exit 2
  fi
  echo "gpu-check: cmake failed (log: $out/cmake.log):"
  grep -m5 -E "CMake Error|error" "$out/cmake.log"
  exit 3
fi
nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
toolkit=$("${nvcc:-nvcc}" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
driver_gate "$toolkit" "$driver" || exit 1
probe_source >"$out/gpu_probe.cu"
if ! "${nvcc:-nvcc}" -o "$out/gpu_probe" "$out/gpu_probe.cu" >"$out/gpu_probe.log" 2>&1; then
  echo "gpu-check: STOPPED: $nvcc cannot build a 15-line CUDA program (log: $out/gpu_probe.log)"
  exit 3
fi
probe=$("$out/gpu_probe" 2>&1) || { echo "gpu-check: STOPPED: CUDA cannot use the GPU: $probe"; exit 1; }
ngpu=$(sed -n 's/.* devices \([0-9]*\)$/\1/p' <<<"$probe")
echo "gpu-check: CUDA probe: $probe (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
if ((ngpu == 0)); then
  echo "gpu-check: CHECKED NOTHING: CUDA sees no device (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
  exit 4
fi
mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)
shared_ok=1 # two ranks on one GPU
[[ $mode == *Exclusive* ]] && shared_ok=0
echo "gpu-check: compute mode ${mode:-unknown}$( ((shared_ok)) || echo ": two ranks cannot share a GPU; those rows are skipped")"

# The collectives come from the build itself (mesh_info --list-json), not from a copy here.
cmake --build "$BUILD" -j "$(nproc)" --target mesh_info >"$out/build.log" 2>&1 || { grep -m10 -E "error" "$out/build.log"; exit 3; }
read -r -a benches <<<"$("$BUILD/bin/mesh_info" --list-json | sed -n 's/.*"collectives":\[\([^]]*\)\].*/\1/p' | tr -d '"' | tr ',' ' ')"
cmake --build "$BUILD" -j "$(nproc)" --target engine_tests step_bench "${benches[@]/%/_bench}" \
  >"$out/build.log" 2>&1 || { grep -m10 -E "error" "$out/build.log"; echo "gpu-check: build failed (log: $out/build.log)"; exit 3; }
BIN="$BUILD/bin"
echo "gpu-check: built in ${SECONDS} s; ${ngpu} GPU(s); logs in $out"
((build_only)) && exit 0
clock0=$SECONDS # the budget starts now, after the build
echo "gpu-check: plan ($(plan_checks "$ngpu" "$quick" "$shared_ok" | plan_totals), budget $BUDGET s):"

# ---- the checks, in the plan's order ------------------------------------------------------------
timed_steps=(--steps 10 --warmup 3)
((quick)) && timed_steps=(--steps 4 --warmup 2)
((ngpu > 1)) && par_be=nccl || par_be=mpi
run_check() { # KIND NAME CONFIG CAP ARGS
  local kind=$1 name=$2 config=$3 cap=$4 args=$5 rc=0 log tag dt n be c
  case $kind in
    usable)
      limited "$cap" "$BUILD/tests/engine_tests" --gtest_filter='CudaParity.DeviceUsable' >"$out/usable.txt" 2>&1 || rc=$?
      if grep -q "SKIPPED" "$out/usable.txt"; then
        row "$name" "CUDA: $ngpu" "FAIL" "$(grep -m1 'no GPU' "$out/usable.txt" | cut -c1-100)"
        failed=1
      else
        verdict "$name" "$config" "$rc" "$out/usable.txt" "$(grep -m1 '^device ' "$out/usable.txt" | cut -c1-100)"
      fi ;;
    parity)
      limited "$cap" "$BUILD/tests/engine_tests" --gtest_filter='CudaParity*' >"$out/parity.txt" 2>&1 || rc=$?
      if grep -q "SKIPPED" "$out/parity.txt"; then
        row "$name" "$config" "FAIL" "skipped on a machine where CUDA sees $ngpu GPU(s)"
        failed=1
      else
        verdict "$name" "$config" "$rc" "$out/parity.txt"
      fi
      parse_parity "$out/parity.txt" >>"$rows" ;;
    stepcheck)
      dt=$args log="$out/step_check_$args.txt"
      limited "$cap" mpiexec -n 1 "$BIN/step_bench" --device cuda --dtype "$dt" --check --model tiny \
        --kv-heads 2 --steps 3 --warmup 1 >"$log" 2>&1 || rc=$?
      verdict "$name" "$config" "$rc" "$log" ;;
    oplist) # the CUDA step's profiled ops against the list the step model reads off the model
      log="$out/op_list.txt"
      if ! python3 -c 'import h5py' 2>/dev/null; then
        row "$name" "$config" "skipped" "python3 has no h5py (scripts/install-deps.sh installs it)"
        return
      fi
      limited "$cap" mpiexec -n 1 "$BIN/step_bench" --device cuda --dtype fp32 --model tiny --attention flash \
        --steps 2 --warmup 0 --profile -O "$out/op_list.h5" >"$log" 2>&1 || rc=$?
      if [[ $rc == 0 ]]; then
        python3 tests/mpi/op_list_check.py "$out/op_list.h5" "$BIN/step_bench" --model tiny --world 1 \
          --attention flash >>"$log" 2>&1 || rc=$?
      fi
      verdict "$name" "$config" "$rc" "$log" "$(tail -n 1 "$log" | cut -c1-100)" ;;
    timed)
      log="$out/step_timed_$args.txt"
      limited "$cap" mpiexec -n 1 "$BIN/step_bench" --device cuda --dtype bf16 --model medium "${timed_steps[@]}" \
        --attention "$args" -O "$out/step_cuda_$args.h5" >"$log" 2>&1 || rc=$?
      verdict "$name" "$config" "$rc" "$log" \
        "$(grep -m1 -o 'median [0-9.]* ms/step' "$log"), $(grep -m1 -o 'MFU [0-9.]*% of the measured[^;]*; datasheet MFU [^ ]*' "$log")" ;;
    stepdp)
      read -r n be <<<"$args"
      log="$out/step_dp.txt"
      limited "$cap" mpiexec -n "$n" "$BIN/step_bench" --device cuda --dtype fp32 --model tiny \
        --mesh "dp=$n" --backend "$be" --check --steps 3 --warmup 1 >"$log" 2>&1 || rc=$?
      if [[ $rc == 2 ]]; then
        row "$name" "$config" "not available" "$(grep -m1 -o -- '--mesh.*' "$log" | cut -c1-100)"
      else
        verdict "$name" "$config" "$rc" "$log"
      fi ;;
    strategy)
      if ((ngpu == 1 && !shared_ok)); then
        row "$name" "n=2 on 1 GPU" "skipped" "compute mode $mode: two ranks cannot share the GPU"
        return
      fi
      tag=${args// /_} log="$out/step_${args// /_}.txt"
      # shellcheck disable=SC2086
      limited "$cap" mpiexec -n 2 "$BIN/step_bench" --device cuda --dtype fp32 --layers 2 --hidden 64 --heads 4 \
        --kv-heads 4 --seq 32 --vocab 250 --micro-batch 2 --mesh $args --backend "$par_be" --check --steps 3 \
        --warmup 1 >"$log" 2>&1 || rc=$?
      verdict "$name" "n=2, $par_be, --check" "$rc" "$log" ;;
    coll) # RANKS DTYPES OPS MIN MAX
      local -a a
      read -r -a a <<<"$args"
      tag="${a[1]}_${a[3]}-${a[4]}"
      for c in "${benches[@]}"; do
        rc=0
        limited "$cap" mpiexec -n "${a[0]}" "$BIN/${c}_bench" --backend nccl -d "${a[1]}" -o "${a[2]}" \
          -b "${a[3]}" -e "${a[4]}" -f 4 -n 5 -w 2 -O "$out/${c}_n${a[0]}_$tag.h5" -q \
          >"$out/${c}_n${a[0]}_$tag.txt" 2>&1 || rc=$?
        echo "$c ${a[0]} $tag $rc" >>"$out/collective_rc.txt" # the table reads the .jsonl and the log
        [[ $rc == 0 ]] || failed=1
      done ;;
  esac
}
mapfile -t plan < <(plan_checks "$ngpu" "$quick" "$shared_ok")
for line in "${plan[@]}"; do # stdin stays away from mpiexec, which forwards it to rank 0
  IFS=$'\t' read -r kind name config est cap args <<<"$line"
  echo "gpu-check: [$((SECONDS - clock0)) s] $name ($config; budget $est s)"
  run_check "$kind" "$name" "$config" "$cap" "$args" </dev/null
done

# ---- the table ---------------------------------------------------------------------------------
summarize "$out" "$rows"
table_rc=$?
echo "gpu-check: checks took $((SECONDS - clock0)) s after the build (budget $BUDGET s); table, logs and HDF5 files in $out"
[[ $failed == 0 && $table_rc == 0 ]] || exit 1
