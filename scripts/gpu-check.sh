#!/usr/bin/env bash
# GPU check: build with CUDA/NCCL and run every collective on the NCCL backend at one rank,
# over every dtype and op, both placements, with verification. Prints one table:
# binary, dtype, op, placement, sizes, wrong elements, peak busbw. Exit 1 if any element
# was wrong or any run failed. Meant for a machine with a GPU (scripts/gpu-check.sh there).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
PY=${PY:-python3}
out=$(mktemp -d)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no GPU visible (nvidia-smi -L failed): nothing to check here"
  exit 0
fi
nvidia-smi -L
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMESHBENCH_CUDA=ON >"$out/cmake.log" 2>&1 \
  || { tail -30 "$out/cmake.log"; exit 3; }
cmake --build "$BUILD" -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 3; }

failed=0
for c in all_reduce all_gather reduce_scatter all_to_all broadcast sendrecv; do
  rc=0
  mpiexec -n 1 "$BUILD/bin/${c}_bench" --backend nccl -d all -o all -b 0 -e 64M -f 4 -n 5 -w 2 \
    -O "$out/$c.h5" -q >"$out/$c.txt" 2>&1 || rc=$?
  echo "$c $rc" >>"$out/rc.txt"
  [[ $rc == 0 ]] || { failed=1; cat "$out/$c.txt"; }
done

"$PY" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rc = dict(line.split() for line in open(os.path.join(out, "rc.txt")))
rows = {}
for c in rc:
    path = os.path.join(out, c + ".jsonl")
    if not os.path.exists(path):
        continue
    for line in open(path):
        j = json.loads(line)
        k = (c, j["dtype"], j["redop"], j["placement"])
        r = rows.setdefault(k, {"sizes": 0, "wrong": 0, "busbw": 0.0})
        r["sizes"] += 1
        r["wrong"] += j["wrong"]
        r["busbw"] = max(r["busbw"], j["busbw"])
print(f"| {'binary':<16} | {'dtype':<6} | {'op':<5} | {'placement':<12} | sizes | wrong | peak busbw GB/s | exit |")
print(f"|{'-'*18}|{'-'*8}|{'-'*7}|{'-'*14}|-------|-------|-----------------|------|")
for (c, d, o, p), r in sorted(rows.items()):
    print(f"| {c + '_bench':<16} | {d:<6} | {o:<5} | {p:<12} | {r['sizes']:>5} | {r['wrong']:>5} | {r['busbw']:>15.2f} | {rc[c]:>4} |")
bad = sum(r["wrong"] for r in rows.values())
print(f"total wrong elements: {bad}; binaries with a non-zero exit: {sum(v != '0' for v in rc.values())}")
PY
# ---- step engine (issue 4): CUDA parity and a timed step ------------------------------------
# 1. every layer (fp32, bf16) and one whole step against the CPU float32 path, by normalised
#    error (CudaParity.*; they skip without a GPU, which counts as a failure here);
# 2. step_bench --device cuda --check (whole-step parity, exit 1 on mismatch), fp32 and bf16;
# 3. a timed bf16 run: MFU against the measured cuBLAS peak and the datasheet peak.
engine_failed=0
echo "== step engine: CUDA parity tests"
"$BUILD/bin/engine_tests" --gtest_filter='CudaParity.*' >"$out/engine_parity.txt" 2>&1 || engine_failed=1
tail -8 "$out/engine_parity.txt"
if grep -q "SKIPPED" "$out/engine_parity.txt"; then echo "step engine: parity tests skipped"; engine_failed=1; fi
for dt in fp32 bf16; do
  mpiexec -n 1 "$BUILD/bin/step_bench" --device cuda --dtype $dt --check --model tiny --kv-heads 2 \
    --steps 3 --warmup 1 || engine_failed=1
done
mpiexec -n 1 "$BUILD/bin/step_bench" --device cuda --dtype bf16 --model medium --steps 10 --warmup 3 \
  -O "$out/step_cuda.h5" || engine_failed=1
# Both parts run; either failing fails the check.
[[ $failed == 0 && $engine_failed == 0 ]] || exit 1
