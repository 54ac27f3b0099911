#!/usr/bin/env bash
# scripts/sweep is resumable: a re-run skips finished points (files untouched), re-runs a point
# whose run was killed (status still `running`, or a file cut short) and one whose file is gone;
# it shows [i/N] progress, applies the fabric preset (its variables land in the file's env
# provenance) and ends with a summary naming failed points and their exit codes.
. "$(dirname "$0")/lib.bash"
S="$MB_SRC/scripts/sweep"
T="$MB_SRC/tests/scripts/h5truth.py"
OUT="$WORK/sweep"
cat > "$WORK/s.toml" <<TOML
name = "resume-test"
binaries = ["all_reduce", "broadcast"]
ranks = [2]
fabrics = ["shm", "tcp-lo"]
min_bytes = "8"
max_bytes = "4K"
step_factor = 8
iters = 5
warmup = 1
timeout = $RUN_TIMEOUT
TOML
SW=(py "$S" "$WORK/s.toml" --bin "$MB_BIN" --out "$OUT" --mpiexec "$MB_MPIEXEC" --no-report)

"${SW[@]}" > "$WORK/run1" 2>&1 || { cat "$WORK/run1"; fail "first sweep exit $?"; }
grep -q '^\[1/4\] all_reduce ranks=2 mpi fabric=shm \.\.\. ok' "$WORK/run1" || { cat "$WORK/run1"; fail "no [1/4] progress line"; }
[[ $(grep -c '\.\.\. ok' "$WORK/run1") -eq 4 ]] || { cat "$WORK/run1"; fail "not 4 ok points"; }
for p in all_reduce-r2-mpi-shm all_reduce-r2-mpi-tcp-lo broadcast-r2-mpi-shm broadcast-r2-mpi-tcp-lo; do
  py "$T" status "$OUT/$p.h5" ok >/dev/null || fail "$p status $(py "$T" status "$OUT/$p.h5")"
done
# The preset's variables are in the provenance of the file it produced, and the tag is the preset.
env_tcp=$(py "$T" attr "$OUT/all_reduce-r2-mpi-tcp-lo.h5" env)
grep -q '"UCX_TLS": *"self,tcp"' <<< "$env_tcp" && grep -q '"UCX_NET_DEVICES": *"lo"' <<< "$env_tcp" \
  || fail "tcp-lo preset not in env provenance: $env_tcp"
grep -q '"UCX_TLS": *"self,sm"' <<< "$(py "$T" attr "$OUT/all_reduce-r2-mpi-shm.h5" env)" || fail "shm preset not recorded"
[[ $(py "$T" attr "$OUT/broadcast-r2-mpi-tcp-lo.h5" tag) == tcp-lo ]] || fail "tag is not the preset name"
pass "4 points ran, progress shown, preset variables recorded in provenance"

# Re-run: everything done -> all skipped, files untouched.
before=$(stat -c '%Y %s %n' "$OUT"/*.h5 | sort)
sleep 1
"${SW[@]}" > "$WORK/run2" 2>&1 || { cat "$WORK/run2"; fail "second sweep exit $?"; }
[[ $(grep -c 'skip (done)' "$WORK/run2") -eq 4 ]] || { cat "$WORK/run2"; fail "re-run did not skip 4 done points"; }
[[ "$(stat -c '%Y %s %n' "$OUT"/*.h5 | sort)" == "$before" ]] || fail "a done point's file changed"
grep -q '0 ran ok, 4 already done' "$WORK/run2" || fail "summary wrong: $(tail -2 "$WORK/run2")"
pass "re-run skipped all 4 finished points, files untouched"

# A killed run: start the all_reduce shm point's binary with many iterations, SIGKILL its whole
# process group once the first size is flushed; the file is then left `running` (or cut short).
rm -f "$OUT/all_reduce-r2-mpi-shm.h5" "$OUT/all_reduce-r2-mpi-shm.jsonl"
UCX_TLS=self,sm setsid "$MB_MPIEXEC" -n 2 "$MB_BIN/all_reduce_bench" -b 8 -e 64M -f 2 -n 400 -w 1 -c 1 \
  --tag shm -O "$OUT/all_reduce-r2-mpi-shm.h5" > "$WORK/killed.log" 2>&1 &
victim=$!
disown "$victim"   # no job-control "Killed" line when we kill it below
for _ in $(seq 1 300); do
  [[ -s "$OUT/all_reduce-r2-mpi-shm.jsonl" ]] && break
  kill -0 "$victim" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$victim" 2>/dev/null || fail "the run to kill ended by itself: $(tail -5 "$WORK/killed.log")"
kill -KILL -- "-$victim" 2>/dev/null || true
for _ in $(seq 1 50); do kill -0 "$victim" 2>/dev/null || break; sleep 0.1; done
st=$(py "$T" status "$OUT/all_reduce-r2-mpi-shm.h5" 2>/dev/null || echo unreadable)
[[ "$st" != ok ]] || fail "killed run left status ok"
# ... and one point's file is simply gone.
rm -f "$OUT/broadcast-r2-mpi-tcp-lo.h5"
"${SW[@]}" > "$WORK/run3" 2>&1 || { cat "$WORK/run3"; fail "third sweep exit $?"; }
grep -q 'all_reduce ranks=2 mpi fabric=shm \.\.\. (re-run: previous file' "$WORK/run3" || { cat "$WORK/run3"; fail "killed point not re-run"; }
grep -q 'broadcast ranks=2 mpi fabric=tcp-lo \.\.\. ok' "$WORK/run3" || { cat "$WORK/run3"; fail "missing point not re-run"; }
[[ $(grep -c 'skip (done)' "$WORK/run3") -eq 2 ]] || { cat "$WORK/run3"; fail "expected 2 skips"; }
py "$T" status "$OUT/all_reduce-r2-mpi-shm.h5" ok >/dev/null || fail "re-run point not ok"
py "$T" status "$OUT/broadcast-r2-mpi-tcp-lo.h5" ok >/dev/null || fail "re-created point not ok"
pass "killed point (status '$st') and missing point re-run, 2 done points skipped"

# A failing point: the summary names it with its exit code and the sweep exits 1.
cat >> "$WORK/s.toml" <<'TOML'

[[sweep]]
binaries = ["all_reduce"]
fabrics = ["shm"]

[[sweep]]
binaries = ["all_gather"]
fabrics = ["shm"]
args = ["-d", "no-such-dtype"]
TOML
rc=0; "${SW[@]}" > "$WORK/run4" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/run4"; fail "sweep with a failing point exit $rc, expected 1"; }
grep -qE 'all_gather-r2-mpi-shm +exit 2 +bad usage' "$WORK/run4" || { cat "$WORK/run4"; fail "summary lacks the failed point and its exit code"; }
grep -q '1 already done' "$WORK/run4" || { cat "$WORK/run4"; fail "the done point was not skipped"; }
pass "failing point listed with exit 2 in the summary, sweep exit 1"
