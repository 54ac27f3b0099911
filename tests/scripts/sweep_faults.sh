# The scripts' faults of docs/reliability.md (issue 45, items 1, 5, 9, 13), each with its exit
# code, the status it leaves and files that read back (tests/mpi/h5check.py readable):
#  1. a second sweep on a folder a live sweep is using exits 2 naming it (pid, host, since),
#     and the first finishes ok; a round whose file a live run is writing (its lock held) is
#     skipped and the file left byte for byte; once that job is killed outright (SIGKILL:
#     status running) the next sweep keeps its last publish in stale/ and runs the round again;
#     --force keeps the ok file it replaces in stale/ too;
# 13. a sweep stopped by SIGTERM exits 143 (SIGINT's 130 before), saying how to resume;
#  5. scripts/predict-check over a folder with nothing to validate exits 1 with one line;
#  9. predict-check given a missing plan list or a folder, report and plot given a file whose
#     step_times are strings: one line naming the file and the problem, exit 2.
# The live sweep is held at its launch by a stand-in launcher that waits for a file, so nothing
# here depends on how fast a run is; the live run is a real all_reduce_bench, stopped (SIGSTOP)
# once it has published its file.
. "$(dirname "$0")/lib.bash"
S="$MB_SRC/scripts/sweep"
H5CHECK="$MB_SRC/tests/mpi/h5check.py"
D="$WORK/D"
P=all_reduce-r2-mpi-shm   # the one point of sw.toml
cat > "$WORK/sw.toml" <<'TOML'
name = "faults"
binaries = ["all_reduce"]
ranks = [2]
fabrics = ["shm"]
max_bytes = "1K"
iters = 5
warmup = 1
TOML
# A launcher that says it started, waits for $WORK/go, then runs mpiexec.
cat > "$WORK/gated-mpiexec" <<SH
#!/usr/bin/env bash
touch "$WORK/started"
for ((i = 0; i < 600; ++i)); do [[ -e "$WORK/go" ]] && exec "$MB_MPIEXEC" "\$@"; sleep 0.1; done
exit 9
SH
chmod +x "$WORK/gated-mpiexec"
sweep() { exec "$MB_PYTHON" "$S" "$WORK/sw.toml" --local --no-report --bin "$MB_BIN" --out "$D" "$@"; }
# (in a subshell: the sweep's pid is the subshell's, which the refusal and kill name)
wait_for() {  # wait_for FILE: up to 60 s
  for ((i = 0; i < 600; ++i)); do [[ -e "$1" ]] && return 0; sleep 0.1; done
  fail "$1 never appeared"
}
status_of() { py -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r"); print(",".join(sorted(str(r.attrs["status"]) for r in f["runs"].values())))' "$1"; }
readable() { py "$H5CHECK" readable "$1" > /dev/null || fail "$1 does not read back"; }

# --- 1: two sweeps into one folder ---------------------------------------------------------------
(sweep --mpiexec "$WORK/gated-mpiexec") > "$WORK/first.out" 2>&1 &
first=$!
wait_for "$WORK/started"
rc=0; (sweep --force) > "$WORK/second.out" 2> "$WORK/second.err" || rc=$?
[[ $rc -eq 2 ]] || fail "a second sweep on a folder in use: exit $rc, expected 2 ($(cat "$WORK/second.err"))"
[[ $(wc -l < "$WORK/second.err") -eq 1 && ! -s "$WORK/second.out" ]] || fail "want one line on stderr: $(cat "$WORK/second.err" "$WORK/second.out")"
grep -q "^sweep: --out $D: in use by scripts/sweep (pid $first on host $(hostname) since .*); one sweep per output folder" \
  "$WORK/second.err" || fail "the refusal does not name the first sweep: $(cat "$WORK/second.err")"
touch "$WORK/go"
rc=0; wait "$first" || rc=$?
[[ $rc -eq 0 ]] || { cat "$WORK/first.out" >&2; fail "the first sweep: exit $rc"; }
[[ $(status_of "$D/$P.h5") == ok ]] || fail "the first sweep's file: status $(status_of "$D/$P.h5")"
readable "$D/$P.h5"
[[ ! -e "$D/stale" && ! -e "$D/.sweep.lock" ]] || fail "the first sweep left stale/ or its lock: $(ls -A "$D")"
pass "a second sweep on the folder: exit 2 naming pid $first; the first finished ok"

# --- 13: SIGTERM -> 143; --force keeps the ok file it replaces -----------------------------------
rm -f "$WORK/started" "$WORK/go"
(sweep --force --mpiexec "$WORK/gated-mpiexec") > "$WORK/term.out" 2> "$WORK/term.err" &
pid=$!
wait_for "$WORK/started"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[[ $rc -eq 143 ]] || fail "a sweep stopped by SIGTERM: exit $rc, expected 143"
grep -q "^sweep: interrupted by signal 15; re-run the same command to resume" "$WORK/term.err" \
  || fail "no resume hint: $(cat "$WORK/term.err")"
kept=$(ls "$D"/stale/$P.*.h5)
[[ $(status_of "$kept") == ok ]] || fail "--force did not keep the ok file in stale/"
readable "$kept"
pass "SIGTERM: exit 143; --force kept the ok file it replaced as ${kept#"$D"/}"

# --- 1: a live run's file is left alone; a killed job's last publish is kept ---------------------
rm -rf "$D/stale"
"$MB_MPIEXEC" -n 2 "$MB_BIN/all_reduce_bench" -b 8 -e 16M -n 200 -q -O "$D/$P.h5" > "$WORK/live.log" 2>&1 &
live=$!
tree() { local c; echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }  # hydra's proxy and ranks start sessions of their own
wait_for "$D/$P.h5"
wait_for "$D/$P.jsonl"  # its first size is in (a .jsonl is created with its first row)
job=$(tree "$live")
trap 'kill -KILL $job 2>/dev/null || true; cleanup' EXIT  # never leave the stopped job behind
kill -STOP $job
cp "$D/$P.h5" "$WORK/live-copy.h5"
rc=0; (sweep) > "$WORK/busy.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || fail "a sweep beside a live run: exit $rc ($(cat "$WORK/busy.out"))"
grep -q "skipped.*$P.h5 is in use by all_reduce_bench (pid [0-9]* on host $(hostname) since" "$WORK/busy.out" \
  || fail "the live run's round is not skipped naming it: $(cat "$WORK/busy.out")"
cmp -s "$D/$P.h5" "$WORK/live-copy.h5" || fail "the live run's file changed under the sweep"
[[ ! -e "$D/stale" ]] || fail "the live run's files were moved"
kill -KILL $job
wait "$live" 2>/dev/null || true
[[ $(status_of "$D/$P.h5") == running ]] || fail "the killed job's file: status $(status_of "$D/$P.h5")"
rc=0; (sweep) > "$WORK/resume.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || fail "the sweep after the kill: exit $rc ($(cat "$WORK/resume.out"))"
grep -q "(re-run: previous file running) ok .*the earlier files kept in $D/stale" "$WORK/resume.out" \
  || fail "no set-aside note: $(cat "$WORK/resume.out")"
kept=$(ls "$D"/stale/$P.*.h5)
[[ $(status_of "$kept") == running ]] || fail "the killed job's publish in stale/: status $(status_of "$kept")"
readable "$kept"
[[ -e "${kept%.h5}.jsonl" ]] || fail "its .jsonl was not kept beside it"
[[ $(status_of "$D/$P.h5") == ok ]] || fail "the round run again: status $(status_of "$D/$P.h5")"
pass "a live run's round skipped, its file untouched; after SIGKILL its last publish kept as ${kept#"$D"/}"

# --- 5, 9: predict-check, report, plot -----------------------------------------------------------
PC="$MB_SRC/scripts/predict-check"
mkdir -p "$WORK/pc/out"
py -c 'import h5py, sys; h5py.File(sys.argv[1], "w").close()' "$WORK/pc/empty.h5"
echo "2: --model tiny --mesh dp=2" > "$WORK/pc/plans.txt"
one_line() {  # one_line WANT_RC REGEX CMD...: the command's exit code and its one line on stderr
  local want=$1 re=$2 rc=0; shift 2
  "$@" > "$WORK/cmd.out" 2> "$WORK/cmd.err" || rc=$?
  [[ $rc -eq $want ]] || fail "$*: exit $rc, expected $want ($(head -3 "$WORK/cmd.err"))"
  [[ $(wc -l < "$WORK/cmd.err") -eq 1 ]] || fail "$*: want one line on stderr, got: $(cat "$WORK/cmd.err")"
  grep -qE "$re" "$WORK/cmd.err" || fail "$*: $(cat "$WORK/cmd.err")"
}
common=(--report-only --predict "$WORK/pc/empty.h5" --out "$WORK/pc/out" --bin "$MB_BIN")
one_line 1 "^predict-check: nothing validated: 0 results file\(s\) in $WORK/pc/out" py "$PC" "$WORK/pc/plans.txt" "${common[@]}"
[[ ! -e "$WORK/pc/out/summary.json" ]] || fail "predict-check wrote summary.json after validating nothing"
one_line 2 "^predict-check: error: $WORK/pc/nope.txt: cannot read the plan list: No such file" py "$PC" "$WORK/pc/nope.txt" "${common[@]}"
one_line 2 "^predict-check: error: $WORK/pc: is a folder" py "$PC" "$WORK/pc" "${common[@]}"
pass "predict-check: nothing validated exit 1; a missing plan list or a folder exit 2, one line each"

py - "$WORK/strings.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    run = f.create_group("runs/r1")
    run.attrs["status"] = "ok"
    run.attrs["binary"] = "step_bench"
    run.create_group("step")["step_times"] = np.array([[b"0.1", b"0.2"]])
PY
msg="$WORK/strings.h5: /runs/r1/step/step_times holds strings \(\|S3\), not numbers"
one_line 2 "^report: $msg" py "$MB_SRC/scripts/report" "$WORK/strings.h5"
one_line 2 "^plot: $msg" py "$MB_SRC/scripts/plot" "$WORK/strings.h5" -o "$WORK/plots"
one_line 2 "^plot: $msg" py "$MB_SRC/scripts/plot" --timeline "$WORK/strings.h5" -o "$WORK/plots"
[[ ! -e "$WORK/plots" ]] || fail "plot wrote $WORK/plots for a file it refused"
pass "report, plot and plot --timeline on step_times of strings: exit 2, one line naming the file"
