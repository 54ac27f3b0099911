#!/usr/bin/env bash
# GPU check: build with CUDA/NCCL and run, on a machine with N GPUs, everything that needs
# one, in this order (most important first, each under a timeout, all within GPU_CHECK_S,
# default 540 s including the build):
#   1. the GPU is usable (a GPU that nvidia-smi sees but CUDA cannot use is a failure);
#   2. the CUDA parity tests: every op and one whole step, fp32 and bf16, against the CPU
#      reference, and three steps against the bf16 host emulation (engine_tests CudaParity*);
#   3. step_bench --device cuda --check at 1 rank, fp32 and bf16;
#   4. the six collectives on the NCCL backend, verified, every dtype and op, both
#      placements, at 1 rank and at N ranks (mpiexec -n N);
#   5. a timed bf16 step_bench: MFU against the measured cuBLAS peak and the datasheet, with
#      flash attention (the default) and then the materialised one (--attention naive);
#   6. the collectives at the rank counts between (powers of two below N), float only;
#   7. step_bench --mesh dp=N --backend nccl --check at N ranks: run when step_bench accepts
#      --mesh dp=N (a refusal, exit 2, is reported as "not available in this build");
#   8. tensor and context parallel: step_bench --mesh tp=2 (all-reduce, --sp) and cp=2 (ring,
#      allgather, ulysses), --check, NCCL on two GPUs or MPI on one.
# Prints one table (check, configuration, result, detail), also written to OUT/table.md with
# every log and HDF5 file beside it, and exits 1 if anything failed or could not run in time,
# 3 if the build failed, and 4 (saying so) when there is no GPU and nothing was checked.
#
# Usage: scripts/gpu-check.sh [--quick] [--out DIR]
#   --quick   about 3 minutes: 1-3, 5 with fewer steps, and one checked step per strategy
#             (dp, tp, tp --sp, cp, pp, ZeRO-1, ep); no collective sweeps (4, 6)
#   --out DIR where the table, logs and HDF5 files go (default: a fresh results/gpu-check-*;
#             on the device tool, --out "$OUT" brings them back)
# The driver version is printed first: the CUDA 13 toolkit needs a driver of version 580 or
# later, and an older one stops the check (exit 1) before anything is built. Two ranks sharing
# one GPU (7, 8 on a one-GPU machine) need the Default compute mode; under Exclusive_Process
# those rows are skipped with a line saying why.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build-gpu}
PY=${PY:-python3}
quick=0
out=""
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed 's/^# \{0,1\}//; /^set -uo/d'; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (usage: scripts/gpu-check.sh [--quick] [--out DIR])" >&2; exit 2 ;;
  esac
  shift
done
if ((quick)); then BUDGET=${GPU_CHECK_S:-300}; else BUDGET=${GPU_CHECK_S:-540}; fi
[[ -n $out ]] || out="results/gpu-check-$(date +%Y%m%dT%H%M%S)"
mkdir -p "$out" || { echo "gpu-check: cannot create --out $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
rows="$out/rows.tsv"
: >"$rows"
failed=0

row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$rows"; }
left() { echo $((BUDGET - SECONDS)); }
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
# verdict NAME CONFIG RC LOG: one table row from an exit code.
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

# ---- 0. is there a GPU at all ---------------------------------------------------------------
ngpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >"$out/smi.txt" 2>&1; then
  ngpu=$(grep -c '^GPU ' "$out/smi.txt")
fi
if ((ngpu == 0)); then
  echo "gpu-check: CHECKED NOTHING: no GPU visible to nvidia-smi on $(hostname)"
  exit 4
fi
cat "$out/smi.txt"
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
echo "gpu-check: driver ${driver:-unknown}; the CUDA 13 toolkit needs 580 or later"
if [[ -n $driver && ${driver%%.*} =~ ^[0-9]+$ ]] && ((${driver%%.*} < 580)); then
  echo "gpu-check: STOPPED: driver $driver is older than 580, which CUDA 13 needs; nothing was checked"
  exit 1
fi
mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | head -1)
shared_ok=1  # two ranks on one GPU
[[ $mode == *Exclusive* ]] && shared_ok=0
echo "gpu-check: compute mode ${mode:-unknown}$( ((shared_ok)) || echo ": two ranks cannot share a GPU; those rows are skipped")"
counts=(1)
for ((n = 2; n < ngpu; n *= 2)); do counts+=("$n"); done
((ngpu > 1)) && counts+=("$ngpu")

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMESHBENCH_CUDA=ON >"$out/cmake.log" 2>&1 \
  || { tail -30 "$out/cmake.log"; exit 3; }
# The collectives come from the build itself (mesh_info --list-json), not from a copy here.
cmake --build "$BUILD" -j "$(nproc)" --target mesh_info >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 3; }
read -r -a benches <<<"$("$BUILD/bin/mesh_info" --list-json | sed -n 's/.*"collectives":\[\([^]]*\)\].*/\1/p' | tr -d '"' | tr ',' ' ')"
cmake --build "$BUILD" -j "$(nproc)" --target engine_tests step_bench "${benches[@]/%/_bench}" \
  >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 3; }
BIN="$BUILD/bin"
echo "gpu-check: built in ${SECONDS} s; ${ngpu} GPU(s), rank counts ${counts[*]}; logs in $out"

# ---- 1 + 2. usable GPU, CUDA parity ---------------------------------------------------------
rc=0
limited 120 "$BIN/engine_tests" --gtest_filter='CudaParity.DeviceUsable' >"$out/usable.txt" 2>&1 || rc=$?
if grep -q "SKIPPED" "$out/usable.txt"; then
  row "gpu usable" "nvidia-smi: $ngpu" "FAIL" "$(grep -m1 'no GPU' "$out/usable.txt" | cut -c1-100)"
  failed=1
else
  verdict "gpu usable" "device 0" "$rc" "$out/usable.txt" "$(grep -m1 '^device ' "$out/usable.txt" | cut -c1-100)"
fi
rc=0
limited 300 "$BIN/engine_tests" --gtest_filter='CudaParity*' >"$out/parity.txt" 2>&1 || rc=$?
if grep -q "SKIPPED" "$out/parity.txt"; then
  row "cuda parity" "engine_tests CudaParity*" "FAIL" "skipped on a machine where nvidia-smi sees $ngpu GPU(s)"
  failed=1
else
  verdict "cuda parity" "engine_tests CudaParity*" "$rc" "$out/parity.txt"
fi
# One row per parity line: "parity WHAT PRECISION OP ERR TOL ok|FAIL".
while read -r _ what prec op err tol res; do
  row "  parity $what $prec" "$op" "$res" "rel $err (tol $tol)"
done < <(grep '^parity ' "$out/parity.txt")

# ---- 3. step_bench --check at one rank --------------------------------------------------------
for dt in fp32 bf16; do
  rc=0
  limited 120 mpiexec -n 1 "$BIN/step_bench" --device cuda --dtype $dt --check --model tiny \
    --kv-heads 2 --steps 3 --warmup 1 >"$out/step_check_$dt.txt" 2>&1 || rc=$?
  verdict "step_bench --check" "n=1, $dt, tiny" "$rc" "$out/step_check_$dt.txt"
done

# ---- 4 + 6. collectives, NCCL, verified --------------------------------------------------------
collectives() {  # RANKS DTYPES MAXSIZE
  local n=$1 c rc
  for c in "${benches[@]}"; do
    rc=0
    limited 120 mpiexec -n "$n" "$BIN/${c}_bench" --backend nccl -d "$2" -o all -b 0 -e "$3" -f 4 \
      -n 5 -w 2 -O "$out/${c}_n$n.h5" -q >"$out/${c}_n$n.txt" 2>&1 || rc=$?
    echo "$c $n $rc" >>"$out/collective_rc.txt"  # the table reads the .jsonl and the log
    [[ $rc == 0 ]] || failed=1
  done
}
# n=1 up to 16 MiB: the host fill and check of 64 MiB int8/bf16 points alone took about 2 minutes
((quick)) || collectives 1 all 16M
((quick)) || ((ngpu == 1)) || collectives "$ngpu" all 64M

# ---- 5. timed bf16 step: MFU -----------------------------------------------------------------
rc=0
((quick)) && timed_steps=(--steps 4 --warmup 2) || timed_steps=(--steps 10 --warmup 3)
limited 180 mpiexec -n 1 "$BIN/step_bench" --device cuda --dtype bf16 --model medium "${timed_steps[@]}" \
  -O "$out/step_cuda.h5" >"$out/step_timed.txt" 2>&1 || rc=$?
verdict "step_bench timed" "n=1, bf16, medium, flash" "$rc" "$out/step_timed.txt" \
  "$(grep -m1 -o 'median [0-9.]* ms/step' "$out/step_timed.txt"), $(grep -m1 -o 'MFU [0-9.]*% of the measured[^;]*; datasheet MFU [^ ]*' "$out/step_timed.txt")"
rc=0
limited 180 mpiexec -n 1 "$BIN/step_bench" --device cuda --dtype bf16 --model medium "${timed_steps[@]}" \
  --attention naive -O "$out/step_cuda_naive.h5" >"$out/step_timed_naive.txt" 2>&1 || rc=$?
verdict "step_bench timed" "n=1, bf16, medium, naive" "$rc" "$out/step_timed_naive.txt" \
  "$(grep -m1 -o 'median [0-9.]* ms/step' "$out/step_timed_naive.txt"), $(grep -m1 -o 'MFU [0-9.]*% of the measured[^;]*; datasheet MFU [^ ]*' "$out/step_timed_naive.txt")"

for n in "${counts[@]}"; do
  ((quick || n == 1 || n == ngpu)) || collectives "$n" float 4M
done

# ---- 7. the data-parallel step at N ranks ----------------------------------------------------
if ((ngpu > 1)); then
  rc=0
  limited 180 mpiexec -n "$ngpu" "$BIN/step_bench" --device cuda --dtype fp32 --model tiny \
    --mesh "dp=$ngpu" --backend nccl --check --steps 3 --warmup 1 >"$out/step_dp.txt" 2>&1 || rc=$?
  if [[ $rc == 2 ]]; then
    row "step_bench dp=$ngpu" "n=$ngpu, nccl" "not available" "$(grep -m1 -o -- '--mesh.*' "$out/step_dp.txt" | cut -c1-100)"
  else
    verdict "step_bench dp=$ngpu" "n=$ngpu, nccl, --check" "$rc" "$out/step_dp.txt"
  fi
fi

# One GPU: two ranks share it over MPI (host staging), which still runs the device buffers,
# the stream ordering before each reduction and the check against the single-rank reference.
if ((ngpu == 1 && !shared_ok)); then
  row "step_bench dp=2" "n=2 on 1 GPU" "skipped" "compute mode $mode: two ranks cannot share the GPU"
elif ((ngpu == 1)); then
  rc=0
  limited 180 mpiexec -n 2 "$BIN/step_bench" --device cuda --dtype fp32 --model tiny \
    --mesh dp=2 --backend mpi --check --steps 3 --warmup 1 >"$out/step_dp.txt" 2>&1 || rc=$?
  verdict "step_bench dp=2" "n=2 on 1 GPU, mpi, --check" "$rc" "$out/step_dp.txt"
fi

# ---- 8. tensor and context parallel: TP linears, vocabulary-parallel loss, SP, CP attention --
par_n=2  # two GPUs over NCCL, or two ranks sharing one GPU over MPI
((ngpu > 1)) && par_be=nccl || par_be=mpi
plans=("tp=2" "tp=2 --sp" "cp=2" "cp=2 --cp-algo allgather" "cp=2 --cp-algo ulysses")
# --quick: one checked step per strategy instead (data, tensor, sequence, context and pipeline
# parallel, ZeRO-1, expert parallel)
((quick)) && plans=("dp=2" "tp=2" "tp=2 --sp" "cp=2" "pp=2 --micro-batches 2" "dp=2 --zero 1"
                    "ep=2 --experts 4 --top-k 2")
for plan in "${plans[@]}"; do
  rc=0
  tag=${plan// /_}
  if ((ngpu == 1 && !shared_ok)); then
    row "step_bench $plan" "n=$par_n on 1 GPU" "skipped" "compute mode $mode: two ranks cannot share the GPU"
    continue
  fi
  # shellcheck disable=SC2086
  limited 180 mpiexec -n "$par_n" "$BIN/step_bench" --device cuda --dtype fp32 --layers 2 --hidden 64 --heads 4 \
    --kv-heads 4 --seq 32 --vocab 250 --micro-batch 2 --mesh $plan --backend "$par_be" --check --steps 3 \
    --warmup 1 >"$out/step_$tag.txt" 2>&1 || rc=$?
  verdict "step_bench $plan" "n=$par_n, $par_be, --check" "$rc" "$out/step_$tag.txt"
done

# ---- the table ---------------------------------------------------------------------------------
"$PY" - "$out" "$rows" <<'PY'
import json, os, sys
out, rows_path = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("\t") for l in open(rows_path) if l.strip()]
# One row per (binary, ranks): sizes, wrong elements and peak bus bandwidth from the .jsonl.
rc_path = os.path.join(out, "collective_rc.txt")
for line in (open(rc_path) if os.path.exists(rc_path) else []):
    c, n, rc = line.split()
    path = os.path.join(out, f"{c}_n{n}.jsonl")
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
        log = os.path.join(out, f"{c}_n{n}.txt")
        err = [l.strip() for l in open(log) if "error" in l.lower() or "fail" in l.lower()] if os.path.exists(log) else []
        detail = (err[0][:100] if err else detail)
    rows.append([c + "_bench", f"n={n}, nccl", "ok" if ok else f"FAIL (exit {rc})", detail])
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
table_rc=$?
echo "gpu-check: finished in ${SECONDS} s (budget ${BUDGET} s); table, logs and HDF5 files in $out"
[[ $failed == 0 && $table_rc == 0 ]] || exit 1
