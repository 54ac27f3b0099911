#!/usr/bin/env bash
# `make run`: every collective benchmark on local ranks (8 B .. 64 MiB), into one HDF5
# file with a JSON-lines summary beside it, then a small step_bench. Prints every table and
# where the files went. RANKS (default 2) sets the rank count; more ranks than cores is
# allowed but flagged as oversubscribed, and its timings are not meaningful.
#   scripts/run-local.sh                   (no arguments; RANKS=2 MAX=64M BUILD=build)
set -euo pipefail
case "${1:-}" in
  -h | --help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "run-local: takes no arguments, got '$1' (RANKS=N, MAX=SIZE and BUILD=DIR set it up; --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RANKS=${RANKS:-2}
MAX=${MAX:-64M}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=results/$stamp
mkdir -p "$out"
h5=$out/collectives.h5
launch=(mpiexec -n "$RANKS")

first=1
status=0
# The collectives the binaries have (mesh_info --list-json), not a copied list.
colls=$("$BUILD/bin/mesh_info" --list-json \
        | /usr/bin/python3 -c 'import json, sys; print(" ".join(json.load(sys.stdin)["collectives"]))') \
  || { echo "make run: cannot read the collectives from $BUILD/bin/mesh_info --list-json (build first)" >&2; exit 2; }
for c in $colls; do
  echo
  echo "=== ${c}_bench on $RANKS ranks ==="
  args=(-b 8 -e "$MAX" -O "$h5")
  [[ $first == 1 ]] || args+=(--append)
  first=0
  rc=0
  "${launch[@]}" "$BUILD/bin/${c}_bench" "${args[@]}" || rc=$?
  if [[ $rc != 0 ]]; then
    echo "make run: ${c}_bench exited $rc" >&2
    status=$rc
  fi
done

step_note=""
if [[ -x $BUILD/bin/step_bench ]]; then
  echo
  echo "=== step_bench (one rank, CPU) ==="
  rc=0
  "${launch[@]:0:2}" 1 "$BUILD/bin/step_bench" --model tiny --steps 10 --warmup 2 --check -O "$out/step.h5" || rc=$?
  [[ $rc == 0 ]] || { echo "make run: step_bench exited $rc" >&2; status=$rc; }
  step_note="  $out/step.h5 (+ step.jsonl): step_bench, one rank"
  if [[ $RANKS -gt 1 ]]; then
    echo
    echo "=== step_bench, data parallel over $RANKS ranks (checked against the single-rank reference) ==="
    rc=0
    "${launch[@]}" "$BUILD/bin/step_bench" --model tiny --mesh "dp=$RANKS" --threads 1 --steps 10 --warmup 2 \
      --check -O "$out/step-dp.h5" --trace "$out/step-dp.json" || rc=$?
    [[ $rc == 0 ]] || { echo "make run: step_bench --mesh dp=$RANKS exited $rc" >&2; status=$rc; }
    step_note+=$'\n'"  $out/step-dp.h5 (+ .jsonl): step_bench --mesh dp=$RANKS; $out/step-dp.json: its timeline (ui.perfetto.dev)"
  fi
fi

echo
echo "make run: results in $out/"
echo "  $h5: every collective, every sample (h5dump -H $h5 shows the layout; docs/results.md documents it)"
echo "  ${h5%.h5}.jsonl: one JSON line per size and placement"
[[ -z $step_note ]] || echo "$step_note"
exit $status
