#!/usr/bin/env bash
# Rounds: each point of a sweep runs `rounds` times (default 3 for step points, 1 for
# collectives), interleaved: round 1 of every point, then round 2. Each round is its own
# step_bench run with its own run id, in its own file (<point>.h5, <point>.r<k>.h5), with the
# same tag and global batch; the point's record (points/<id>.json) lists its rounds. Resume
# counts rounds: a re-run skips the done ones, re-runs a round whose file is gone or was left
# unfinished, and a larger --rounds runs only the rounds still missing.
. "$(dirname "$0")/lib.bash"
S="$MB_SRC/scripts/sweep"
T="$MB_SRC/tests/scripts/h5truth.py"
OUT="$WORK/run"
cat > "$WORK/s.toml" <<TOML
name = "rounds-test"
ranks = [2]
fabrics = ["shm"]
timeout = $RUN_TIMEOUT
args = ["--steps", "1", "--warmup", "0", "--threads", "1"]

[steps]
model = "tiny"
tp = [1]
pp = "auto"
zero = [0]
TOML
DP=step-r2-mpi-shm-tp1cp1ep1dp2pp1-z0-m1-otcedp
PP=step-r2-mpi-shm-tp1cp1ep1dp1pp2-z0-1f1b-m2-otcedp
SW=(py "$S" "$WORK/s.toml" --bin "$MB_BIN" --out "$OUT" --mpiexec "$MB_MPIEXEC" --no-report)

# Defaults: a step point runs 3 rounds, a collective point 1.
"${SW[@]}" --dry-run > "$WORK/dry" 2>&1 || { cat "$WORK/dry"; fail "dry run exit $?"; }
grep -q "^\[1/2\] $DP (0 of 3 rounds ok): " "$WORK/dry" || { cat "$WORK/dry"; fail "a step point does not default to 3 rounds"; }
printf 'binaries = ["all_reduce"]\nmax_bytes = "64"\n' > "$WORK/c.toml"
py "$S" "$WORK/c.toml" --bin "$MB_BIN" --out "$WORK/c" --dry-run > "$WORK/cdry" 2>&1 || { cat "$WORK/cdry"; fail "collective dry run exit $?"; }
grep -q '^\[1/1\] all_reduce-r2-mpi-shm (missing): ' "$WORK/cdry" || { cat "$WORK/cdry"; fail "a collective point does not default to 1 round"; }
pass "rounds default: 3 for step points, 1 for collectives"

# 2 rounds of 2 plans, interleaved: dp2 round 1, pp2 round 1, dp2 round 2, pp2 round 2.
"${SW[@]}" --rounds 2 > "$WORK/run1" 2>&1 || { cat "$WORK/run1"; fail "sweep exit $?"; }
got=$(grep -oE '^\[[0-9]/4\] round [0-9]/2 step ranks=2 mpi fabric=shm mesh=[a-z0-9=,]+' "$WORK/run1" | awk '{print $1, $3, $8}' | tr '\n' ';')
want="[1/4] 1/2 mesh=dp=2;[2/4] 1/2 mesh=pp=2,dp=1;[3/4] 2/2 mesh=dp=2;[4/4] 2/2 mesh=pp=2,dp=1;"
[[ "$got" == "$want" ]] || { cat "$WORK/run1"; fail "run order '$got', want '$want'"; }
grep -q '^sweep: 2 points x 2 rounds = 4 runs: 4 ran ok, 0 already done' "$WORK/run1" || { cat "$WORK/run1"; fail "summary wrong"; }
py - "$OUT" "$DP" "$PP" 2 <<'PY' || fail "round files or point records wrong"
import json, os, sys
sys.path.insert(0, os.path.join(os.environ["MB_SRC"], "scripts"))
from meshbench import reader
out, ids, want = sys.argv[1], sys.argv[2:4], int(sys.argv[4])
all_ids = set()
for pid in ids:
    files = [os.path.join(out, pid + ".h5")] + [os.path.join(out, f"{pid}.r{k}.h5") for k in range(2, want + 1)]
    runs, bad = reader.load_steps(files, quiet=True)
    assert not bad and len(runs) == want, (files, bad, len(runs))
    rows = reader.step_table(runs)
    assert all(r["status"] == "ok" and r["tag"] == "shm" for r in rows), rows
    assert {r["global_batch"] for r in rows} == {8}, [r["global_batch"] for r in rows]   # one plan key
    file_ids = [reader.run_statuses(f) for f in files]
    assert all(len(x) == 1 for x in file_ids), file_ids                                  # one run per file
    rec = json.load(open(os.path.join(out, "points", pid + ".json")))
    assert rec["status"] == "ok" and rec["rounds_wanted"] == want and rec["rounds_ok"] == want, rec
    assert [r["round"] for r in rec["rounds"]] == list(range(1, want + 1)), rec["rounds"]
    assert [r["result"] for r in rec["rounds"]] == files, rec["rounds"]
    assert [r["run_ids"] for r in rec["rounds"]] == [sorted(x) for x in file_ids], rec["rounds"]
    assert rec["run_ids"] == [i for x in file_ids for i in x] and rec["global_batch"] == 8, rec
    all_ids |= {i for x in file_ids for i in x}
assert len(all_ids) == 2 * want, all_ids                                                 # separate run ids
PY
pass "2 plans x 2 rounds ran interleaved, one file and run id per round, same tag and global batch, rounds in points/*.json"

# Re-run: every round done and skipped, files untouched.
before=$(stat -c '%Y %s %n' "$OUT"/*.h5 | sort)
"${SW[@]}" --rounds 2 > "$WORK/run2" 2>&1 || { cat "$WORK/run2"; fail "re-run exit $?"; }
[[ $(grep -c 'skip (done)' "$WORK/run2") -eq 4 ]] || { cat "$WORK/run2"; fail "re-run did not skip 4 done rounds"; }
[[ "$(stat -c '%Y %s %n' "$OUT"/*.h5 | sort)" == "$before" ]] || fail "a done round's file changed"
pass "re-run skipped all 4 done rounds"

# A round whose file is gone and one left unfinished (status running, as a killed run leaves
# it) are run again; the other two rounds are skipped.
rm "$OUT/$PP.r2.h5"
py - "$OUT/$DP.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    for run in f["runs"].values():
        run.attrs["status"] = "running"
PY
"${SW[@]}" --rounds 2 > "$WORK/run3" 2>&1 || { cat "$WORK/run3"; fail "resume exit $?"; }
grep -q "^\[1/4\] round 1/2 step ranks=2 mpi fabric=shm mesh=dp=2 .* \.\.\. (re-run: previous file running) ok" "$WORK/run3" \
  || { cat "$WORK/run3"; fail "the unfinished round 1 of dp2 was not re-run"; }
grep -q "^\[4/4\] round 2/2 step ranks=2 mpi fabric=shm mesh=pp=2,dp=1 .* \.\.\. ok" "$WORK/run3" || { cat "$WORK/run3"; fail "the missing round 2 of pp2 was not re-run"; }
[[ $(grep -c 'skip (done)' "$WORK/run3") -eq 2 ]] || { cat "$WORK/run3"; fail "want 2 rounds skipped"; }
py "$T" status "$OUT/$DP.h5" ok >/dev/null && py "$T" status "$OUT/$PP.r2.h5" ok >/dev/null || fail "re-run rounds not ok"
pass "a missing and an unfinished round re-run, the 2 done rounds skipped"

# More rounds: --rounds 3 runs round 3 of both points, nothing else (a point with fewer ok
# runs than R needs more rounds).
"${SW[@]}" --rounds 3 > "$WORK/run4" 2>&1 || { cat "$WORK/run4"; fail "3-round sweep exit $?"; }
[[ $(grep -c 'skip (done)' "$WORK/run4") -eq 4 ]] || { cat "$WORK/run4"; fail "want rounds 1-2 skipped"; }
[[ $(grep -cE '^\[[56]/6\] round 3/3 .* \.\.\. ok' "$WORK/run4") -eq 2 ]] || { cat "$WORK/run4"; fail "round 3 did not run for both points"; }
py - "$OUT" "$DP" "$PP" 3 <<'PY' || fail "3 rounds: files or point records wrong"
import json, os, sys
out = sys.argv[1]
for pid in sys.argv[2:4]:
    rec = json.load(open(os.path.join(out, "points", pid + ".json")))
    assert rec["rounds_ok"] == 3 and rec["rounds_wanted"] == 3 and len(rec["run_ids"]) == 3, rec
    assert os.path.exists(os.path.join(out, pid + ".r3.h5")), pid
PY
pass "--rounds 3 after 2: only round 3 of each point ran; records say 3 of 3"
