#!/usr/bin/env bash
# Fault probes of a new user's second hour (issue 45; docs/reliability.md), each with its exit
# code, the run's status and what is left on disk. tests/mpi/faults.sh holds the first set;
# tests/scripts/sweep_faults.sh the sweeps'.
#  2 a compute phase that stops progressing (--inject-stall R spins in a forward, as OpenBLAS
#    does when mmap fails under `ulimit -v`): exit 3 within --op-timeout of the stall, the cause
#    named (no progress in forward), status hung, the flight record's kind 'stall'; with the
#    watchdog off, SIGTERM still ends the stuck run after the grace: exit 3, status killed
#  3 an -O name over NAME_MAX, a path over PATH_MAX: exit 2 with one line, no abort
#  4 --plan-only with a --predict file that cannot predict the plan: the JSON says valid false
#    and the exit is 2 (they agree)
#  6 SIGHUP to the ranks: handled as SIGTERM, exit 3, status killed. (MPICH's mpiexec itself dies
#    on SIGHUP and SIGKILLs its ranks, which no handler of theirs can see: docs/reliability.md)
#  7 -e 1T: refused (exit 2) before anything is written: no .h5, no .jsonl, no lock
#  8 0 bytes free at create: exit 3 (a runtime fault, as a full disk mid-run), no 0-byte .jsonl
# 10 --hidden 2147483647 and 1200000000: exit 2 naming --hidden, never --ffn, never a wrap
# (11, the hang report naming the stopped rank that holds the group up: tests/mpi/step_hang.sh)
# 12 nan and inf for --time-limit and --op-timeout: exit 2 with the same rule
# 19 the header names both parameter counts: the model's and this rank's slice
# 21-24 a flag typo names the nearest flag; a mesh launched without mpiexec says how; the step's
#    JSON lines carry status and oversubscribed; degenerate plans are said
source "$(dirname "$0")/lib.bash"
RUN_TIMEOUT=90
SB=(--layers 1 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --threads 1 --quiet)
status_of() {  # FILE: the status of its one run
  py -c "import h5py,sys; f=h5py.File(sys.argv[1]); print(list(f['runs'].values())[0].attrs['status'])" "$1" 2>&1
}
once() {  # NAME FRAGMENT: stderr is one line containing FRAGMENT
  if [[ $(grep -c . "$WORK/err") -eq 1 && "$(cat "$WORK/err")" == *"$2"* ]]; then pass "$1: $(cut -c1-170 "$WORK/err")"
  else fail "$1: want one line containing '$2': $(head -c 600 "$WORK/err")"; fi
}

# --- 2 a stalled compute phase ----------------------------------------------------------------
# Two reports can end it, whichever watchdog polls first: rank 1's own (no progress in its
# forward, flight record kind 'stall') or rank 0's, waiting for it in the gradient all-reduce
# and naming rank 1 as holding it up, in no call, in its forward. Either names the cause.
f="$WORK/stall.h5"
t0=$SECONDS
rc=0
mpirun 2 step_bench "${SB[@]}" --mesh dp=2 --steps 3 --warmup 1 --inject-stall 1 --op-timeout 4 -O "$f" || rc=$?
took=$((SECONDS - t0))
own="rank 1 (.*): no progress in forward (--inject-stall) (micro-batch 0) for [0-9.]* s (--op-timeout 4)"
peer="holding it up: rank 1 (pid [0-9]*): never arrived: in no call, in forward (--inject-stall) (micro-batch 0)"
if [[ $rc -eq 3 && $took -lt 40 ]] && grep -q -e "$own" -e "$peer" "$WORK/err"; then
  pass "2 stalled compute: exit 3 in ${took} s: $(grep -m1 -o -e 'no progress in [^;]*' -e 'holding it up: [^;]*' "$WORK/err")"
else
  fail "2 stalled compute: exit $rc in ${took} s, want 3 naming the stalled phase: $(head -c 800 "$WORK/err")"
fi
[[ "$(status_of "$f")" == hung ]] && pass "2 status hung" || fail "2 status: $(status_of "$f")"
py - "$f" <<'PY' && pass "2 the flight record names the stall" || fail "2 flight record"
import glob, json, sys
recs = [json.load(open(p)) for p in glob.glob(sys.argv[1] + ".hang-rank*.json")]
assert recs, "no flight record"
assert any(j["kind"] == "stall" and j["phase"].startswith("forward") or
           j["kind"] == "call" and any("rank 1" in a and "in forward" in a for a in j["absent"]) for j in recs), recs
PY
# The same stall with the watchdog off: SIGTERM ends it after the grace (MESHBENCH_STOP_GRACE).
# Each rank's watcher names its own phase (rank 0 waits in the gradient sync, rank 1 spins in
# its forward); whichever ends the job first is the one printed.
f="$WORK/stall-term.h5"
MESHBENCH_STOP_GRACE=3 start_job "$f" timeout --kill-after=5 90 "$MB_MPIEXEC" -n 2 "$MB_BIN/step_bench" "${SB[@]}" \
  --mesh dp=2 --steps 3 --warmup 1 --inject-stall 1 --op-timeout 0 -O "$f"
kill -TERM "$launcher"
t0=$SECONDS
rc=0
wait "$launcher" || rc=$?
took=$((SECONDS - t0))
if [[ $rc -eq 3 && $took -le 20 ]] && grep -q "SIGTERM received, but the run did not reach its next step or size within 3 s (stuck in " "$WORK/err"; then
  pass "2 SIGTERM to a stuck run: exit 3 in ${took} s: $(grep -m1 'SIGTERM received' "$WORK/err" | cut -c1-140)"
else
  fail "2 SIGTERM to a stuck run: exit $rc in ${took} s: $(head -c 800 "$WORK/err")"
fi
[[ "$(status_of "$f")" == killed ]] && pass "2 SIGTERM: status killed" || fail "2 SIGTERM: status $(status_of "$f")"

# --- 3 long paths -----------------------------------------------------------------------------
long=$(printf 'n%.0s' $(seq 300))
rc=0; mpirun 2 step_bench "${SB[@]}" --steps 1 -O "$WORK/$long.h5" || rc=$?
[[ $rc -eq 2 ]] && once "3 a 300-byte name" "NAME_MAX" || fail "3 a 300-byte name: exit $rc: $(head -c 300 "$WORK/err")"
deep="$WORK"; for i in $(seq 20); do deep="$deep/$(printf 'd%.0s' $(seq 220))"; done
rc=0; mpirun 2 all_reduce_bench -e 64 -n 1 -w 0 -q -O "$deep/x.h5" || rc=$?
[[ $rc -eq 2 ]] && once "3 a path over PATH_MAX" "PATH_MAX" || fail "3 a path over PATH_MAX: exit $rc: $(head -c 300 "$WORK/err")"

# --- 4 --plan-only with a bad --predict -------------------------------------------------------
printf 'not a calibration\n' > "$WORK/bad.toml"
rc=0
"$MB_BIN/step_bench" --plan-only --world 2 --mesh dp=2 --predict "$WORK/bad.toml" > "$WORK/out" 2> "$WORK/err" || rc=$?
valid=$(py -c "import json,sys; print(json.load(open(sys.argv[1]))['valid'])" "$WORK/out" 2>&1)
[[ $rc -eq 2 && $valid == False ]] && pass "4 --plan-only, bad --predict: exit 2 and valid false" \
  || fail "4 --plan-only, bad --predict: exit $rc, valid $valid"

# --- 6 SIGHUP ---------------------------------------------------------------------------------
g="$WORK/hup.h5"
SETTLE=2 start_job "$g" "$MB_MPIEXEC" -n 2 "$MB_BIN/step_bench" --model small --threads 1 --quiet --steps 500 --warmup 1 -O "$g"
find_ranks "$launcher" "$MB_BIN/step_bench" 2
kill -HUP "${ranks[@]}"
rc=0
timeout 60 tail --pid="$launcher" -f /dev/null || fail "6 SIGHUP: the run did not stop within 60 s"
wait "$launcher" || rc=$?
st=$(status_of "$g")
[[ $rc -eq 3 && $st == killed ]] && grep -q "stopped by a signal" "$WORK/err" && pass "6 SIGHUP to the ranks: exit 3, status killed" \
  || fail "6 SIGHUP: exit $rc, status $st: $(tail -2 "$WORK/err")"

# --- 7 impossible sizes -----------------------------------------------------------------------
rc=0; mpirun 2 all_reduce_bench -e 1T -n 1 -w 0 -q -O "$WORK/huge.h5" || rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "-e/--max-bytes 1T: the largest size needs" "$WORK/err" && [[ $(grep -c . "$WORK/err") -eq 1 ]]; then
  pass "7 -e 1T refused: $(cut -c1-150 "$WORK/err")"
else
  fail "7 -e 1T: exit $rc: $(head -c 400 "$WORK/err")"
fi
left=$(ls "$WORK"/huge* 2>/dev/null || true)
[[ -z "$left" ]] && pass "7 nothing written (no .h5, .jsonl or lock)" || fail "7 left behind: $left"

# --- 8 0 bytes free at create -----------------------------------------------------------------
small="$WORK/small"
mkdir -p "$small"
if mount -t tmpfs -o size=64k tmpfs "$small" 2>/dev/null; then
  head -c 1000000 /dev/zero > "$small/fill" 2>/dev/null || true  # every block taken
  for b in step_bench all_reduce_bench; do
    args=("${SB[@]}" --steps 1)
    [[ $b == all_reduce_bench ]] && args=(-e 64 -n 1 -w 0 -q)
    rc=0; mpirun 2 "$b" "${args[@]}" -O "$small/z.h5" || rc=$?
    if [[ $rc -eq 3 ]] && grep -q "No space left on device" "$WORK/err"; then pass "8 $b, 0 bytes free: exit 3"
    else fail "8 $b, 0 bytes free: exit $rc, want 3: $(head -c 300 "$WORK/err")"; fi
    [[ ! -e "$small/z.jsonl" ]] && pass "8 $b: no .jsonl left" || fail "8 $b: $(ls -l "$small"/z.*)"
    rm -f "$small"/z.*
  done
  # Room for the lock but not the first publish: still exit 3, and no 0-byte .jsonl.
  rm -f "$small/fill"; head -c 57344 /dev/zero > "$small/fill" 2>/dev/null || true
  rc=0; mpirun 2 all_reduce_bench -e 64 -n 1 -w 0 -q -O "$small/y.h5" || rc=$?
  [[ $rc -eq 3 && ! -e "$small/y.jsonl" ]] && pass "8 a failed first publish: exit 3, no .jsonl" \
    || fail "8 a failed first publish: exit $rc, $(ls "$small"): $(head -c 300 "$WORK/err")"
  umount "$small"
else
  echo "note [$TEST_NAME]: cannot mount a tmpfs here (not root?): probe 8 skipped"
fi

# --- 10 shapes that overflow ------------------------------------------------------------------
for h in 2147483647 1200000000; do
  rc=0; "$MB_BIN/step_bench" --plan-only --hidden "$h" --heads 1 > "$WORK/out" 2> "$WORK/err" || rc=$?
  msg=$(py -c "import json,sys; print(json.load(open(sys.argv[1]))['error'])" "$WORK/out" 2>&1)
  [[ $rc -eq 2 && "$msg" == "--hidden $h:"* && "$msg" != *"--ffn "[0-9-]*": must"* ]] && pass "10 --hidden $h: $msg" \
    || fail "10 --hidden $h: exit $rc: $msg"
done

# --- 12 NaN and inf limits --------------------------------------------------------------------
for opt in --time-limit --op-timeout; do
  for v in nan inf -1; do
    rc=0; mpirun 2 step_bench "${SB[@]}" --steps 1 "$opt" "$v" || rc=$?
    [[ $rc -eq 2 ]] && once "12 step_bench $opt $v" "$opt $v: must be a finite number of seconds >= 0" \
      || fail "12 step_bench $opt $v: exit $rc"
    rc=0; mpirun 2 all_reduce_bench -e 64 -n 1 -q "$opt" "$v" || rc=$?
    [[ $rc -eq 2 ]] && once "12 all_reduce_bench $opt $v" "$opt $v: must be a finite number of seconds >= 0" \
      || fail "12 all_reduce_bench $opt $v: exit $rc"
  done
done

# --- 19 parameters, named ---------------------------------------------------------------------
rc=0; mpirun 2 step_bench --layers 2 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --threads 1 --mesh tp=2 \
  --steps 1 --warmup 0 || rc=$?
if [[ $rc -eq 0 && "$(cat "$WORK/out")" =~ parameters:\ model\ ([0-9]+),\ this\ rank\ ([0-9]+) ]] \
   && (( BASH_REMATCH[2] < BASH_REMATCH[1] )); then
  pass "19 tp=2: parameters: model ${BASH_REMATCH[1]}, this rank ${BASH_REMATCH[2]}"
else
  fail "19 want 'parameters: model N, this rank M' with M < N under tp=2: exit $rc: $(grep -m1 parameters "$WORK/out")"
fi

# --- 21-24 first contact ----------------------------------------------------------------------
rc=0; "$MB_BIN/step_bench" --plan-only --mdoel small > "$WORK/out" 2> "$WORK/err" || rc=$?
grep -q -- "--mdoel: unknown option; did you mean --model?" "$WORK/out" && [[ $rc -eq 2 ]] \
  && pass "21 a typo names the nearest flag" || fail "21 typo: exit $rc: $(cat "$WORK/out" "$WORK/err")"
rc=0; mpirun 1 all_reduce_bench -n 1 --itres 3 -q || rc=$?
[[ $rc -eq 2 ]] && once "21 collectives: a typo" "--itres: unknown option; did you mean --iters?" || fail "21 collectives typo: exit $rc"
rc=0; "$MB_BIN/step_bench" --mesh tp=2 "${SB[@]}" > "$WORK/out" 2> "$WORK/err" < /dev/null || rc=$?
[[ $rc -eq 2 ]] && once "22 a mesh without mpiexec" "launch it with mpiexec -n 2" || fail "22 exit $rc: $(cat "$WORK/err")"
rc=0; mpirun 2 step_bench "${SB[@]}" --mesh dp=2 --steps 2 --warmup 0 -O "$WORK/j.h5" || rc=$?
py - "$WORK/j.jsonl" <<'PY' && pass "23 every JSON line has status and oversubscribed" || fail "23 the step's JSON lines"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert lines and all(l["status"] == "ok" and isinstance(l["oversubscribed"], bool) for l in lines), lines[-1]
assert lines[-1]["summary"] is True
PY
grep -q "wrote run .* to $WORK/j.h5 and $WORK/j.jsonl" "$WORK/out" "$WORK/err" && pass "23 the last line names the .jsonl" \
  || fail "23 the last line: $(tail -1 "$WORK/out")"
rc=0; mpirun 2 step_bench "${SB[@]}" --mesh pp=2 --layers 2 --micro-batches 1 --steps 1 --warmup 0 || rc=$?
[[ $rc -eq 0 ]] && grep -q "note: --micro-batches 1 with pp = 2: fewer micro-batches than pipeline stages" "$WORK/err" \
  && pass "24 pp=2 with one micro-batch is said" || fail "24 pp=2, m=1: exit $rc: $(cat "$WORK/err")"
rc=0; mpirun 1 step_bench "${SB[@]}" --zero 1 --steps 1 --warmup 0 || rc=$?
[[ $rc -eq 0 ]] && grep -q "note: --zero 1 over a data-parallel group of one rank" "$WORK/err" \
  && pass "24 --zero 1 on one rank is said" || fail "24 --zero 1 on one rank: exit $rc: $(cat "$WORK/err")"
finish
