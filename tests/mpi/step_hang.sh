#!/usr/bin/env bash
# step_bench --op-timeout: one of 2 data-parallel ranks is stopped (SIGSTOP) mid-run. The job
# ends by itself with exit 3 within 30 s, the message names the stuck call and the rank that
# holds the group up (the stopped one: STOPPED, not the reporting rank itself), the flight
# recorder parses, and the HDF5 file reads back with status 'hung' and its finished steps.
source "$(dirname "$0")/lib.bash"
f="$WORK/hang.h5"
exe="$MB_BIN/step_bench"
SETTLE=2 start_job "$f" timeout --kill-after=5 120 "$MB_MPIEXEC" -n 2 "$exe" --mesh dp=2 --layers 1 --hidden 32 \
  --heads 2 --seq 16 --vocab 64 --micro-batch 2 --threads 1 --steps 1000000 --warmup 0 --op-timeout 3 -O "$f" --quiet
find_ranks "$launcher" "$exe" 2
kill -STOP "${ranks[1]}"
t0=$SECONDS
rc=0
wait "$launcher" || rc=$?
took=$((SECONDS - t0))
kill -9 "${ranks[1]}" 2>/dev/null || true
[[ $rc -eq 3 ]] && pass "exit 3 after one rank stopped" || fail "exit $rc, want 3: $(tail -3 "$WORK/err")"
[[ $took -le 30 ]] && pass "ended ${took} s after SIGSTOP (limit 30)" || fail "took $took s after SIGSTOP"
# The code comes from MPI_Abort, which the launcher passes on whatever the stopped rank's state
# (an _Exit left it to mpiexec's OR of the ranks' raw statuses: 1 or 9 now and then). Had the
# abort blocked behind the stuck call, the fallback timer would have left *.abort-blocked.
blocked=$(ls "$WORK"/*.abort-blocked 2>/dev/null || true)
[[ -z "$blocked" ]] && pass "MPI_Abort ended the job (no fallback timer fired)" || fail "MPI_Abort blocked: $blocked"
line=$(grep -m1 "has not completed after" "$WORK/err" || true)
[[ "$line" == *"holding it up: rank "[01]" (pid ${ranks[1]}): STOPPED"* ]] \
  && pass "the report names the stopped rank: $(grep -o 'holding it up: [^;]*' <<< "$line")" \
  || fail "want 'holding it up: rank R (pid ${ranks[1]}): STOPPED': ${line:0:400}"
if [[ "$line" =~ rank\ ([0-9]+)\ \(.+\):\ (.+)\ of\ [0-9]+\ B\ in\ group\ .*--op-timeout\ 3.*at\ step\ [0-9]+ ]]; then
  pass "message: ${line:0:160}"
  rec="$f.hang-rank${BASH_REMATCH[1]}.json"
  py - "$rec" "$f" <<'PY' && pass "flight recorder and file read back" || fail "flight recorder or file"
import json, sys
import h5py
j = json.load(open(sys.argv[1]))
assert j["calls"][-1]["state"] == "pending" and j["waited_s"] >= 3, j["calls"][-1]
assert j["binary"] == "step_bench"
f = h5py.File(sys.argv[2], "r")
(rid,) = f["runs"].keys()
r = f["runs"][rid]
assert r.attrs["status"] == "hung", r.attrs["status"]
n = r["step"]["step_times"].shape[0]
assert n > 0 and (r["step"]["step_times"][:] > 0).all(), n
print(f"pending {j['pending']['op']} after {j['waited_s']:.1f} s; {n} steps kept")
PY
else
  fail "no watchdog message naming the call: $(head -3 "$WORK/err")"
fi

# A pipeline hang names the pipeline dimension (it read "group pp (dim dp)").
f="$WORK/hang-pp.h5"
SETTLE=2 start_job "$f" timeout --kill-after=5 120 "$MB_MPIEXEC" -n 2 "$exe" --mesh pp=2 --layers 2 --hidden 32 \
  --heads 2 --seq 16 --vocab 64 --micro-batch 2 --micro-batches 2 --threads 1 --steps 1000000 --warmup 0 \
  --op-timeout 3 -O "$f" --quiet
find_ranks "$launcher" "$exe" 2
kill -STOP "${ranks[1]}"
rc=0
wait "$launcher" || rc=$?
kill -9 "${ranks[1]}" 2>/dev/null || true
line=$(grep -m1 "has not completed after" "$WORK/err" || true)
if [[ $rc -eq 3 && "$line" =~ in\ group\ (pp[^ ]*|embedding[^ ]*|world)\ \(dim\ (pp|embedding|world)\) ]]; then
  pass "pipeline hang: exit 3, ${BASH_REMATCH[0]}"
else
  fail "pipeline hang: exit $rc, want 3 and the group's own dimension: ${line:0:200}"
fi
finish
