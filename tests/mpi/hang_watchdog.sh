#!/usr/bin/env bash
# --op-timeout: one of 2 ranks is stopped (SIGSTOP) mid-run. The job must end by itself with
# exit 3 within 30 s, the message must name the stuck call and the stopped rank (and agree with the flight
# recorder), FILE.hang-rank<R>.json must parse with at most 64 calls, the last one pending,
# and the HDF5 file must read back with status 'hung' and every finished size intact.
# Then --op-timeout 0 is accepted (watchdog off) and a negative value is refused (exit 2).
source "$(dirname "$0")/lib.bash"


f="$WORK/hang.h5"
exe="$MB_BIN/all_reduce_bench"
# Sizes up to 64M at 50 iterations: tens of seconds if left alone; one placement.
setsid timeout --kill-after=5 120 "$MB_MPIEXEC" -n 2 "$exe" -b 8 -e 64M -f 2 -n 50 -w 2 -d float --inplace no \
  --op-timeout 5 -O "$f" -q > "$WORK/out" 2> "$WORK/err" < /dev/null &
launcher=$!
deadline=$((SECONDS + 60))
until [[ -f "${f%.h5}.jsonl" && $(wc -l < "${f%.h5}.jsonl") -ge 2 ]] || [[ $SECONDS -ge $deadline ]]; do sleep 0.1; done
find_ranks "$launcher" "$exe" 2
victim=${ranks[1]}
kill -STOP "$victim"
t0=$SECONDS
rc=0
wait "$launcher" || rc=$?
took=$((SECONDS - t0))
kill -9 "$victim" 2>/dev/null || true  # in case the launcher left it behind
[[ $rc -eq 3 ]] && pass "exit 3 after one rank stopped" || fail "exit $rc, want 3"
[[ $took -le 30 ]] && pass "ended ${took} s after SIGSTOP (limit 30)" || fail "took $took s after SIGSTOP, limit 30"
# The code comes from MPI_Abort, which the launcher passes on whatever the stopped rank's state
# (an _Exit left it to mpiexec's OR of the ranks' raw statuses: 1 or 9 now and then). Had the
# abort blocked behind the stuck call, the fallback timer would have left *.abort-blocked.
blocked=$(ls "$WORK"/*.abort-blocked 2>/dev/null || true)
[[ -z "$blocked" ]] && pass "MPI_Abort ended the job (no fallback timer fired)" || fail "MPI_Abort blocked: $blocked"

line=$(grep -m1 "has not completed after" "$WORK/err" || true)
# The waiting rank names the stopped one (the host's call board and /proc), not itself.
[[ "$line" == *"holding it up: rank "[01]" (pid $victim): STOPPED"* ]] && pass "the report names the stopped rank" \
  || fail "want 'holding it up: rank R (pid $victim): STOPPED' in: ${line:0:400}"
if [[ "$line" =~ rank\ ([0-9]+)\ \(.+\):\ (.+)\ of\ ([0-9]+)\ B\ in\ group\ world\ \(dim\ world\).*--op-timeout\ 5.*at\ size\ [0-9]+\ of ]]; then
  pass "message: ${line:0:140}..."
  r=${BASH_REMATCH[1]} op=${BASH_REMATCH[2]} bytes=${BASH_REMATCH[3]}
  rec="$f.hang-rank$r.json"
  if py - "$rec" "$op" "$bytes" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
calls = j["calls"]
assert 0 < len(calls) <= 64, len(calls)
assert calls[-1]["state"] == "pending", calls[-1]
assert all(c["state"] == "completed" for c in calls[:-1]), "an earlier call is not completed"
assert j["pending"]["op"] == sys.argv[2] == calls[-1]["op"], (j["pending"], sys.argv[2])
assert j["pending"]["bytes"] == int(sys.argv[3])
assert j["waited_s"] >= 5 and j["op_timeout_s"] == 5
assert [c["seq"] for c in calls] == list(range(calls[0]["seq"], calls[-1]["seq"] + 1))
print(f"{len(calls)} calls, pending {j['pending']['op']} after {j['waited_s']:.1f} s")
PY
  then pass "flight recorder $rec parses"; else fail "flight recorder $rec"; fi
else
  fail "no watchdog line naming rank, call, bytes and group in stderr:"; cat "$WORK/err" >&2
fi
if py "$MB_SRC/tests/mpi/h5check.py" crash "$f" hung 2 > "$WORK/check" 2>&1; then
  pass "HDF5 after the hang: $(cat "$WORK/check")"
else
  fail "HDF5 after the hang:"; cat "$WORK/check" >&2
fi

expect_rc 0 2 all_reduce_bench -b 8 -e 64 -n 2 -w 0 --op-timeout 0 -q && pass "--op-timeout 0 runs without a watchdog"
if expect_rc 2 2 all_reduce_bench -b 8 -e 8 -n 1 --op-timeout -1 -q; then
  [[ $(grep -c "op-timeout" "$WORK/err") -eq 1 ]] && pass "--op-timeout -1 refused once" || fail "refusal not printed once"
fi
finish
