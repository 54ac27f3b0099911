#!/usr/bin/env bash
# The one-way layering of src/ (core <- compute <- comm <- results) fails the build when broken:
# 1. compile time: through each layer's include root (build/layers/<layer>/), a header of the
#    layer itself or of a lower one preprocesses, and one of a higher layer is "No such file";
# 2. configure time: cmake/check_layering.cmake passes on src/ and stops with FATAL_ERROR,
#    naming the file and the include, on a copy of src/ whose comm/mesh.hpp includes
#    results/record.hpp, or whose core/units.hpp includes "../comm/mesh.hpp".
# Usage (CTest): upward_include.sh CXX LAYERS_DIR SOURCE_DIR CMAKE
set -euo pipefail
CXX=$1 LAYERS=$2 SRC=$3 CMAKE=$4
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
[[ $rc -ne 0 ]] && flat | grep -q "comm/mesh.hpp: '#include \"results/record.hpp\"': src/comm may include only comm and" \
  || fail "upward include in comm/mesh.hpp not refused (exit $rc): $(cat "$WORK/out")"
cp "$SRC/src/comm/mesh.hpp" "$WORK/src/comm/mesh.hpp"
echo '#include "../comm/mesh.hpp"' >> "$WORK/src/core/units.hpp"
rc=0; "$CMAKE" -DMB_LAYERING_SRC="$WORK/src" -P "$SRC/cmake/check_layering.cmake" > "$WORK/out" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && flat | grep -q "core/units.hpp: .*not \.\./" || fail "../ include not refused (exit $rc): $(cat "$WORK/out")"
echo "ok   [layering]: check_layering.cmake passes on src/, refuses an upward and a ../ include"
