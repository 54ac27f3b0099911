#!/usr/bin/env bash
# A killed run leaves a readable file. (1) SIGKILL: a long run in its own process group is
# killed with kill -9 on the whole group once its .jsonl shows at least 2 finished sizes;
# h5py must open the file, status must still be 'running', and every series must have equal
# sizes/summary/samples row counts (>= 2) with no NaN in a finished row. (2) SIGTERM to the
# ranks: the run stops after the current size, exits 3, status 'killed', end_time set, and
# the finished sizes are complete.
source "$(dirname "$0")/lib.bash"

# Starts BINARY ARGS in a new session under a timeout; sets PGID (= the session leader's pid,
# a child of this shell, so `wait` gets its exit code).
start_group() {
  local exe="$MB_BIN/$1"; shift
  setsid timeout --kill-after=10 "$RUN_TIMEOUT" "$MB_MPIEXEC" -n 2 "$exe" "$@" \
    > "$WORK/out" 2> "$WORK/err" < /dev/null &
  PGID=$!
}

# descendants (lib.bash) lists every process below a PID. Hydra starts its proxy and each rank in sessions
# of their own, so the ranks are not in the launcher's process group: find them by parentage.

# wait_lines FILE N SECONDS: until FILE has >= N lines; 1 on timeout.
wait_lines() {
  local deadline=$((SECONDS + $3))
  while [[ $SECONDS -lt $deadline ]]; do
    [[ -f "$1" && $(wc -l < "$1") -ge $2 ]] && return 0
    sleep 0.2
  done
  return 1
}

# Many sizes, many iterations: minutes if left alone. One placement, so 1 line = 1 size.
LONG=(-b 8 -e 64M -f 2 -n 20000 -w 0 -d float --inplace no -q)

# --- (1) SIGKILL of the whole process group -------------------------------------------------
f="$WORK/killed.h5"
start_group all_reduce_bench "${LONG[@]}" -O "$f"
pgid=$PGID
if wait_lines "${f%.h5}.jsonl" 2 120; then
  # The whole job at once: launcher group, proxy and ranks, as a scheduler's kill would.
  victims=$(descendants "$pgid" | tr '\n' ' ')
  kill -9 -- "-$pgid" $victims 2>/dev/null || true
  sleep 1
  lines=$(wc -l < "${f%.h5}.jsonl")
  if py "$MB_SRC/tests/mpi/h5check.py" crash "$f" running 2 > "$WORK/check" 2>&1; then
    pass "SIGKILL after $lines .jsonl lines: $(cat "$WORK/check")"
  else
    fail "SIGKILL:"; cat "$WORK/check" >&2
  fi
else
  fail "SIGKILL: the run wrote no 2 sizes within 120 s"; tail -5 "$WORK/err" >&2
fi
kill -9 -- "-$pgid" $(descendants "$pgid") 2>/dev/null || true
wait "$pgid" 2>/dev/null || true

# --- (2) SIGTERM to the ranks -----------------------------------------------------------------
f="$WORK/term.h5"
start_group all_reduce_bench "${LONG[@]}" -O "$f"
pgid=$PGID
if wait_lines "${f%.h5}.jsonl" 2 120; then
  # The ranks of this run only: descendants of its launcher running the binary.
  ranks=""
  for p in $(descendants "$pgid"); do
    [[ "$(cat "/proc/$p/cmdline" 2>/dev/null | tr '\0' ' ')" == "$MB_BIN/all_reduce_bench "* ]] && ranks+="$p "
  done
  [[ -n "$ranks" ]] || fail "SIGTERM: no ranks found below launcher $pgid"
  [[ -z "$ranks" ]] || kill -TERM $ranks
  rc=0
  timeout 120 tail --pid="$pgid" -f /dev/null || rc=$?
  mrc=0
  wait "$pgid" 2>/dev/null || mrc=$?
  if [[ $rc -ne 0 ]]; then
    fail "SIGTERM: the run did not stop within 120 s"
  else
    [[ $mrc -eq 3 ]] || fail "SIGTERM: exit $mrc, want 3 (runtime: stopped by a signal)"
    grep -q "stopped by a signal" "$WORK/out" || fail "SIGTERM: no 'stopped by a signal' note"
    if py "$MB_SRC/tests/mpi/h5check.py" crash "$f" killed 2 > "$WORK/check" 2>&1 \
       && py -c "import h5py,sys; r=list(h5py.File(sys.argv[1],'r')['runs'].values())[0]; sys.exit(len(r.attrs['end_time']) < 10)" "$f"; then
      pass "SIGTERM: exit $mrc, $(cat "$WORK/check"), end_time set"
    else
      fail "SIGTERM:"; cat "$WORK/check" >&2
    fi
  fi
else
  fail "SIGTERM: the run wrote no 2 sizes within 120 s"; tail -5 "$WORK/err" >&2
fi
kill -9 -- "-$pgid" $(descendants "$pgid") 2>/dev/null || true

finish
