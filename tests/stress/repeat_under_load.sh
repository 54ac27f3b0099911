#!/usr/bin/env bash
# Repeats MPI tests under load: `tests/stress/repeat_under_load.sh N TEST...` runs each
# tests/mpi/TEST.sh N times while two busy loops hold both cores of a 2-core machine, and
# prints each test's pass count. Not part of `make test` (minutes): the proof that a test's
# verdict does not depend on timing (issue 22: the hang tests, 20 of 20 under load).
# MB_BIN as for the MPI tests (default build/bin).
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
export MB_BIN="${MB_BIN:-$here/build/bin}"
n=${1:?usage: repeat_under_load.sh N TEST...}
shift
load=()
for _ in 1 2; do
  (while :; do :; done) &
  load+=($!)
done
trap 'kill "${load[@]}" 2>/dev/null' EXIT
status=0
for t in "$@"; do
  ok=0
  for ((i = 1; i <= n; ++i)); do
    if bash "$here/tests/mpi/$t.sh" > "/tmp/repeat-$t.log" 2>&1; then
      ok=$((ok + 1))
    else
      echo "$t run $i failed: $(grep -m2 FAIL "/tmp/repeat-$t.log" | tr '\n' ' ')"
      cp "/tmp/repeat-$t.log" "/tmp/repeat-$t.fail$i.log"
    fi
  done
  echo "$t: $ok of $n passed under load (2 busy loops, $(nproc) cores)"
  [[ $ok -eq $n ]] || status=1
done
exit $status
