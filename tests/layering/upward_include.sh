#!/usr/bin/env bash
# The one-way layering of src/ (core <- compute <- comm <- results) and of parallel/ (common <-
# kernels <- {tensor_parallel, context_parallel, expert_parallel} <- model <- {pipeline_parallel,
# data_parallel} <- zero <- executor <- metrics <- report <- predict <- step) fails the build when broken:
# 1. compile time: through each layer's include root (build/layers/<layer>/), a header of the
#    layer itself or of a lower one preprocesses, and one of a higher layer is "No such file";
# 2. configure time: cmake/check_layering.cmake passes on src/ and stops with FATAL_ERROR,
#    naming the file and the include, on a copy of src/ whose comm/mesh.hpp includes
#    results/record.hpp, or whose core/units.hpp includes "../comm/mesh.hpp";
# 3. the same for parallel/: through each folder's include root (build/parallel_layers/<f>/)
#    a header of the folder itself or of a lower one is found, one of a higher folder or of a
#    sibling is not; check_layering.cmake refuses a copy of parallel/ whose common/plan.hpp
#    includes step/options.hpp, or whose tensor_parallel/linear.hpp includes a sibling's
#    context_parallel/attention.hpp.
# Usage (CTest): upward_include.sh CXX LAYERS_DIR SOURCE_DIR CMAKE [PARALLEL_LAYERS_DIR]
set -euo pipefail
CXX=$1 LAYERS=$2 SRC=$3 CMAKE=$4 PLAYERS=${5:-}
WORK=$(mktemp -d /tmp/mb-layering.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL [layering]: $*" >&2; exit 1; }
declare -A PROBE=([core]=core/units.hpp [compute]=compute/device.hpp [comm]=comm/mesh.hpp [results]=results/hang.hpp)
ORDER=(core compute comm results)
for i in "${!ORDER[@]}"; do
  layer=${ORDER[$i]}
  for j in "${!ORDER[@]}"; do
    target=${ORDER[$j]}
    printf '#include "%s"\n' "${PROBE[$target]}" > "$WORK/probe.cpp"
    rc=0; "$CXX" -std=c++20 -E -I "$LAYERS/$layer" "$WORK/probe.cpp" -o /dev/null 2> "$WORK/err" || rc=$?
    if (( j <= i )); then
      [[ $rc -eq 0 ]] || fail "$layer cannot include its own or a lower layer's ${PROBE[$target]}: $(cat "$WORK/err")"
    else
      [[ $rc -ne 0 ]] && grep -q "No such file" "$WORK/err" \
        || fail "$layer can include the higher layer's ${PROBE[$target]} (exit $rc)"
    fi
  done
done
echo "ok   [layering]: through each layer's include root, higher layers' headers are 'No such file'"

"$CMAKE" -DMB_LAYERING_SRC="$SRC/src" -P "$SRC/cmake/check_layering.cmake" || fail "check_layering fails on src/"
cp -r "$SRC/src" "$WORK/src"
echo '#include "results/record.hpp"' >> "$WORK/src/comm/mesh.hpp"
rc=0; "$CMAKE" -DMB_LAYERING_SRC="$WORK/src" -P "$SRC/cmake/check_layering.cmake" > "$WORK/out" 2>&1 || rc=$?
flat() { tr -s ' \n' ' ' < "$WORK/out"; }  # cmake wraps its messages
[[ $rc -ne 0 ]] && flat | grep -q "comm/mesh.hpp: '#include \"results/record.hpp\"': comm/ may include only comm and" \
  || fail "upward include in comm/mesh.hpp not refused (exit $rc): $(cat "$WORK/out")"
cp "$SRC/src/comm/mesh.hpp" "$WORK/src/comm/mesh.hpp"
echo '#include "../comm/mesh.hpp"' >> "$WORK/src/core/units.hpp"
rc=0; "$CMAKE" -DMB_LAYERING_SRC="$WORK/src" -P "$SRC/cmake/check_layering.cmake" > "$WORK/out" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && flat | grep -q "core/units.hpp: .*not \.\./" || fail "../ include not refused (exit $rc): $(cat "$WORK/out")"
echo "ok   [layering]: check_layering.cmake passes on src/, refuses an upward and a ../ include"

[[ -n "$PLAYERS" ]] || exit 0
# parallel/: the folders and what each may include, from check_layering.cmake itself.
declare -A DEPS PPROBE=([common]=common/plan.hpp [kernels]=kernels/layers.hpp [tensor_parallel]=tensor_parallel/linear.hpp
  [context_parallel]=context_parallel/attention.hpp [expert_parallel]=expert_parallel/moe.hpp [model]=model/model.hpp
  [pipeline_parallel]=pipeline_parallel/schedule.hpp [data_parallel]=data_parallel/data_parallel.hpp [zero]=zero/zero.hpp
  [executor]=executor/executor.hpp [metrics]=metrics/metrics.hpp [report]=report/step_console.hpp [predict]=predict/predict.hpp
  [step]=step/options.hpp)
FOLDERS=()
while IFS=: read -r f d; do
  FOLDERS+=("$f"); DEPS[$f]="$f $d"
done < <("$CMAKE" -DMB_LAYERING_SRC="$SRC/src" -DMB_LAYERING_PARALLEL="$SRC/parallel" -DMB_LAYERING_PRINT=1 \
           -P "$SRC/cmake/check_layering.cmake" 2>&1)
(( ${#FOLDERS[@]} == ${#PPROBE[@]} )) || fail "check_layering.cmake lists ${#FOLDERS[@]} folders of parallel/, the probes ${#PPROBE[@]}"
checked=0
for f in "${FOLDERS[@]}"; do
  for t in "${FOLDERS[@]}"; do
    # -MM -MG: list the headers the probe reaches; one not found is listed by its bare name.
    printf '#include "%s"\n' "${PPROBE[$t]}" > "$WORK/probe.cpp"
    "$CXX" -std=c++20 -MM -MG -I "$PLAYERS/$f" "$WORK/probe.cpp" > "$WORK/deps" 2> "$WORK/err" || fail "$(cat "$WORK/err")"
    if tr -s ' \\\n' '\n' < "$WORK/deps" | grep -qx "$PLAYERS/$f/${PPROBE[$t]}"; then found=1; else found=0; fi
    if [[ " ${DEPS[$f]} " == *" $t "* ]]; then
      (( found )) || fail "parallel/$f cannot include its own or a lower folder's ${PPROBE[$t]}"
    else
      (( !found )) || fail "parallel/$f can include ${PPROBE[$t]} of a higher or sibling folder"
    fi
    checked=$((checked + 1))
  done
done
echo "ok   [layering]: parallel/: $checked folder pairs, higher and sibling folders' headers are not found"

cp -r "$SRC/parallel" "$WORK/parallel"
echo '#include "step/options.hpp"' >> "$WORK/parallel/common/plan.hpp"
rc=0; "$CMAKE" -DMB_LAYERING_SRC="$SRC/src" -DMB_LAYERING_PARALLEL="$WORK/parallel" -P "$SRC/cmake/check_layering.cmake" > "$WORK/out" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && flat | grep -q "common/plan.hpp: '#include \"step/options.hpp\"': common/ may include only common and" \
  || fail "upward include in parallel/common/plan.hpp not refused (exit $rc): $(cat "$WORK/out")"
cp "$SRC/parallel/common/plan.hpp" "$WORK/parallel/common/plan.hpp"
echo '#include "context_parallel/attention.hpp"' >> "$WORK/parallel/tensor_parallel/linear.hpp"
rc=0; "$CMAKE" -DMB_LAYERING_SRC="$SRC/src" -DMB_LAYERING_PARALLEL="$WORK/parallel" -P "$SRC/cmake/check_layering.cmake" > "$WORK/out" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && flat | grep -q "tensor_parallel/linear.hpp: .*tensor_parallel/ may include only tensor_parallel and \[common;kernels\]" \
  || fail "sibling include in parallel/tensor_parallel/linear.hpp not refused (exit $rc): $(cat "$WORK/out")"
echo "ok   [layering]: check_layering.cmake passes on parallel/, refuses an upward and a sibling include"
