# tests/mpi/lib.bash: shared by the collective MPI tests (sourced; not a test itself, since
# only *.sh files become CTest tests). CTest sets MB_BIN, MB_SRC, MB_PYTHON, MB_MPIEXEC and
# MB_UCX_YIELD; the defaults let a developer run one by hand: `MB_BIN=build/bin bash
# tests/mpi/inject_fault.sh`. KEEP=1 keeps the work folder.
set -euo pipefail
MB_SRC="${MB_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
MB_BIN="${MB_BIN:-$MB_SRC/build/bin}"
MB_PYTHON="${MB_PYTHON:-/usr/bin/python3}"
MB_MPIEXEC="${MB_MPIEXEC:-mpiexec}"
# The LD_PRELOAD shim (tests/support/ucx_yield.c) used for oversubscribed runs; MB_UCX_YIELD=
# (empty) turns it off, e.g. to measure what it saves.
MB_UCX_YIELD="${MB_UCX_YIELD-$(ls "$MB_BIN"/../tests/libucx_yield.so 2>/dev/null || true)}"
TEST_NAME="$(basename "$0" .sh)"
# Every launch has a limit: MPICH can hang in MPI_Finalize (docs/testing.md, "The machine").
RUN_TIMEOUT="${RUN_TIMEOUT:-120}"
CORES="$(nproc)"

[[ -x "$MB_BIN/all_reduce_bench" ]] || { echo "FAIL [$TEST_NAME]: no binaries in $MB_BIN" >&2; exit 1; }
if [[ -n "$MB_UCX_YIELD" && ! -f "$MB_UCX_YIELD" ]]; then
  echo "note [$TEST_NAME]: $MB_UCX_YIELD missing: oversubscribed runs busy-poll (slow)" >&2
  MB_UCX_YIELD=""
fi

WORK="$(mktemp -d "/tmp/mb-$TEST_NAME.XXXXXX")"
cleanup() { [[ -n "${KEEP:-}" ]] || rm -rf "$WORK"; }
trap cleanup EXIT

FAILS=0
fail() { echo "FAIL [$TEST_NAME]: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok   [$TEST_NAME]: $*"; }
# The verdict: call last. Exits 1 if any check failed.
finish() {
  if [[ $FAILS -ne 0 ]]; then echo "FAILED [$TEST_NAME]: $FAILS check(s)" >&2; exit 1; fi
  echo "PASSED [$TEST_NAME] in ${SECONDS}s"
}

# mpirun N BINARY ARGS...: one run with a timeout; stdout/stderr go to $WORK/out, $WORK/err.
# Returns the exit code (never aborts the script). Ranks beyond the core count get the yield
# shim when it exists.
mpirun() {
  local n=$1 exe="$MB_BIN/$2"; shift 2
  local -a pre=()
  if [[ -n "$MB_UCX_YIELD" && $n -gt $CORES ]]; then pre=(-genv LD_PRELOAD "$MB_UCX_YIELD"); fi
  local rc=0
  timeout --kill-after=10 "$RUN_TIMEOUT" "$MB_MPIEXEC" "${pre[@]}" -n "$n" "$exe" "$@" \
    > "$WORK/out" 2> "$WORK/err" || rc=$?
  return $rc
}

# batch_check LIST: tests/mpi/h5check.py's checks, one a line of LIST, in one Python process;
# a verdict line each (ok / FAIL with the check's words).
batch_check() {
  [[ -s "$1" ]] || { fail "batch_check: no files to check in $1"; return; }
  local line rc=0 ok=0
  py "$MB_SRC/tests/mpi/h5check.py" batch "$1" > "$WORK/batch.out" 2>&1 || rc=$?
  while IFS= read -r line; do
    case "$line" in
      "ok   "*) pass "${line#ok   }"; ok=$((ok + 1)) ;;
      "FAIL "*) fail "${line#FAIL }" ;;
      *) echo "$line" ;;
    esac
  done < "$WORK/batch.out"
  # every line of the list passed, and the checker said so with its exit code
  [[ $rc -eq 0 && $ok -eq $(grep -c . "$1") ]] || fail "h5check.py batch: exit $rc, $ok of $(grep -c . "$1") checks passed"
}

# expect_rc WANT N BINARY ARGS...: run and require exit code WANT; on a mismatch print the tail.
expect_rc() {
  local want=$1; shift
  local rc=0
  mpirun "$@" || rc=$?
  if [[ $rc -ne $want ]]; then
    fail "mpiexec -n $* -> exit $rc, want $want"
    tail -5 "$WORK/err" >&2 || true
    tail -5 "$WORK/out" >&2 || true
    return 1
  fi
  return 0
}

py() { "$MB_PYTHON" "$@"; }

# check_families ARGS...: check_case on one rank and on five families at 2 ranks (dp, ZeRO-3,
# tp with sp, pp 1F1B, ep), each with ARGS (a shape, --check and the mode under test).
check_families() {
  check_case "one rank" 1 "$@"
  check_case "dp=2" 2 "$@" --mesh dp=2
  check_case "ZeRO-3, m=2" 2 "$@" --mesh dp=2 --zero 3 --micro-batches 2
  check_case "tp=2 --sp" 2 "$@" --mesh tp=2 --sp
  check_case "pp=2 1F1B, m=4" 2 "$@" --mesh pp=2 --micro-batches 4
  check_case "ep=2" 2 "$@" --experts 4 --top-k 2 --mesh ep=2
}

# check_case LABEL N ARGS...: step_bench ARGS (with --check) on N ranks must exit 0 and print at
# least three "check ... ok" rows (loss, grads and more); passes or fails LABEL.
check_case() {
  local label=$1 ranks=$2; shift 2
  if expect_rc 0 "$ranks" step_bench "$@"; then
    if [[ $(grep -c "^  check .* ok$" "$WORK/out") -ge 3 ]]; then pass "$label: --check ok"
    else fail "$label: $(grep check "$WORK/out" | head -5)"; fi
  fi
}

# descendants PID: every process below PID (the ranks under an mpiexec), one per line.
descendants() {
  local c
  for c in $(pgrep -P "$1" || true); do echo "$c"; descendants "$c"; done
}

# start_job FILE CMD...: runs CMD (an mpiexec line) in the background in a session of its own,
# stdout and stderr to $WORK/out and $WORK/err; sets `launcher` to its pid and returns once FILE
# exists (60 s at most), then SETTLE seconds more (default 1: some steps land in the file).
start_job() {
  local f=$1; shift
  setsid "$@" > "$WORK/out" 2> "$WORK/err" < /dev/null &
  launcher=$!
  local deadline=$((SECONDS + 60))
  until [[ -f "$f" ]] || [[ $SECONDS -ge $deadline ]]; do sleep 0.1; done
  sleep "${SETTLE:-1}"
}

# find_ranks LAUNCHER EXE N: sets `ranks` to the processes below LAUNCHER running EXE; when
# there are not N of them, fails, kills the job and ends the test.
find_ranks() {
  local p
  ranks=()
  for p in $(descendants "$1"); do
    [[ "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)" == "$2 "* ]] && ranks+=("$p")
  done
  if [[ ${#ranks[@]} -ne $3 ]]; then
    fail "found ${#ranks[@]} ranks below launcher $1, want $3"
    kill -9 -- "-$1" "${ranks[@]}" 2>/dev/null || true
    finish
  fi
}
