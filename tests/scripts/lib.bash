# tests/scripts/lib.bash: shared by the script tests (sourced, not a test itself).
# CTest sets MB_BIN, MB_SRC, MB_PYTHON, MB_MPIEXEC; the defaults let a developer run a test by
# hand from the source tree: `bash tests/scripts/report_roundtrip.sh`.
set -euo pipefail
MB_SRC="${MB_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
MB_BIN="${MB_BIN:-$MB_SRC/build/bin}"
MB_PYTHON="${MB_PYTHON:-/usr/bin/python3}"
MB_MPIEXEC="${MB_MPIEXEC:-mpiexec}"
export MB_SRC MB_BIN MB_PYTHON MB_MPIEXEC
TEST_NAME="$(basename "$0" .sh)"
# Every launch has a limit: MPICH can hang in MPI_Finalize over TCP (docs/testing.md, "The machine").
RUN_TIMEOUT="${RUN_TIMEOUT:-120}"

fail() { echo "FAIL [$TEST_NAME]: $*" >&2; exit 1; }
pass() { echo "ok   [$TEST_NAME]: $*"; }

[[ -x "$MB_BIN/all_reduce_bench" ]] || fail "no binaries in $MB_BIN (build first)"
"$MB_PYTHON" -c 'import h5py, numpy, matplotlib' 2>/dev/null || fail "$MB_PYTHON lacks h5py/numpy/matplotlib"

WORK="$(mktemp -d "/tmp/mb-$TEST_NAME.XXXXXX")"
cleanup() { [[ -n "${KEEP:-}" ]] || rm -rf "$WORK"; }
trap cleanup EXIT

# run2 FABRIC_ENV... -- BINARY ARGS...: one 2-rank run with a timeout; returns its exit code.
# Example: run2 UCX_TLS=self,sm -- all_reduce_bench -b 8 -e 1K -O x.h5
# A run that printed "# results: ..." (files closed) but is still alive 15 s later is stuck in
# MPI_Finalize (MPICH 4.0 over TCP, docs/testing.md): it is killed, with a warning, and counts
# as its printed verdict. These tests check the scripts, not that MPICH bug.
run2() {
  local -a envs=()
  while [[ "$1" != -- ]]; do envs+=("$1"); shift; done
  shift
  local exe="$MB_BIN/$1"; shift
  local log="$WORK/last-run.log" rc=0 start=$SECONDS done_at=""
  env "${envs[@]}" setsid "$MB_MPIEXEC" -n 2 "$exe" "$@" > "$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [[ -z "$done_at" ]] && grep -q '^# results: ' "$log"; then done_at=$SECONDS; fi
    if [[ -n "$done_at" && $((SECONDS - done_at)) -gt 15 ]]; then
      echo "WARNING [$TEST_NAME]: $(basename "$exe") hung at exit after writing its results; killed" >&2
      kill -TERM -- "-$pid" 2>/dev/null; sleep 2; kill -KILL -- "-$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      grep -q 'status: ok' "$log" && return 0 || return 1
    fi
    if [[ $((SECONDS - start)) -gt $RUN_TIMEOUT ]]; then
      kill -TERM -- "-$pid" 2>/dev/null; sleep 2; kill -KILL -- "-$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      echo "--- $exe $*: timed out after $RUN_TIMEOUT s" >&2; tail -20 "$log" >&2
      return 124
    fi
    sleep 0.2
  done
  wait "$pid" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "--- $exe $* (exit $rc):" >&2; tail -20 "$log" >&2
  fi
  return $rc
}

py() { "$MB_PYTHON" "$@"; }
