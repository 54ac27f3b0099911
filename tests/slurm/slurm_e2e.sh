#!/usr/bin/env bash
# Slurm end to end on a private single-node Slurm this test starts (scripts/slurm-local):
# submits slurm/collectives.sbatch with 2 tasks and a small size range, slurm/fabrics.sbatch
# with two presets, a 2-point sweep as a job array (scripts/sweep --slurm), slurm/step.sbatch
# (one tiny plan), slurm/step-sweep.sbatch (a step sweep of 2 rounds inside one 2-task allocation)
# and the same step sweep as job arrays (scripts/sweep --steps --slurm: one array per round, round
# 2's after round 1's); waits with a
# timeout; checks that the HDF5 files exist, passed verification (status ok, wrong = 0, exit
# codes 0), carry the job's SLURM_JOB_ID in their provenance, and merge in scripts/report.
# The daemons are stopped by PID on every exit path. Skips (exit 77) when not root or when Slurm/munge are not installed.
set -euo pipefail
MB_SRC="${MB_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
MB_BIN="${MB_BIN:-$MB_SRC/build/bin}"
MB_PYTHON="${MB_PYTHON:-/usr/bin/python3}"
T="$MB_SRC/tests/scripts/h5truth.py"
fail() { echo "FAIL [slurm_e2e]: $*" >&2; exit 1; }
pass() { echo "ok   [slurm_e2e]: $*"; }
[[ $(id -u) -eq 0 ]] || { echo "SKIP [slurm_e2e]: not root (the local Slurm daemons run as root)" >&2; exit 77; }
[[ -x "$MB_BIN/all_reduce_bench" ]] || fail "no binaries in $MB_BIN"

WORK="$(mktemp -d /tmp/mb-slurm-e2e.XXXXXX)"
chmod 755 "$WORK"   # munged (user munge) must reach its socket below it
SDIR="$WORK/slurm"
# A port of our own, so a second test run or a site Slurm on 6817 does not collide.
for _ in $(seq 1 20); do
  port=$(( 20000 + RANDOM % 20000 ))
  ss -ltn 2>/dev/null | grep -qE ":($port|$((port + 1)))\b" || break
done
cleanup() {
  MB_SLURM_PORT=$port "$MB_SRC/scripts/slurm-local" stop "$SDIR" || true
  [[ -n "${KEEP:-}" ]] || rm -rf "$WORK"
}
trap cleanup EXIT
rc=0
conf_line=$(MB_SLURM_PORT=$port "$MB_SRC/scripts/slurm-local" start "$SDIR") || rc=$?
[[ $rc -eq 77 ]] && exit 77
[[ $rc -eq 0 ]] || fail "slurm-local start exit $rc"
eval "$conf_line"
export SLURM_CONF PATH="$PATH:/usr/sbin"
pass "slurm up ($SLURM_CONF, port $port)"

wait_jobs() {  # wait_jobs SECONDS JOBID...: poll squeue until none is queued or running
  local limit="$1"; shift
  local ids; ids=$(IFS=,; echo "$*")
  local end=$(( SECONDS + limit ))
  while (( SECONDS < end )); do
    [[ -z "$(squeue -h -j "$ids" 2>/dev/null)" ]] && return 0
    sleep 0.5
  done
  scontrol show job "$ids" >&2 || true
  return 1
}

# 1. collectives.sbatch, 2 tasks on the one node, a small size range (all_to_allv_bench: tokens
# of 2 x 16 floats, so 4K holds 32 of them).
RES="$WORK/results"
jid=$(cd "$MB_SRC" && MB_BIN="$MB_BIN" MB_RESULTS="$RES/collectives" MB_MIN_BYTES=8 MB_MAX_BYTES=4K MESHBENCH_HIDDEN=16 \
      MB_STEP_FACTOR=8 MB_ITERS=5 MB_WARMUP=1 MB_POINT_TIMEOUT=120 MB_FABRIC=shm MB_PLOTS=0 \
      sbatch --parsable -N 1 -n 2 --ntasks-per-node=2 -t 10 -o "$WORK/collectives-%j.out" \
      slurm/collectives.sbatch) || fail "sbatch collectives.sbatch failed"
# 1b. fabrics.sbatch with two shared-memory presets (TCP can hang in MPI_Finalize: not here).
fjid=$(cd "$MB_SRC" && MB_BIN="$MB_BIN" MB_RESULTS="$RES/fabrics" MB_FABRICS="shm posix" \
      MB_BINARIES=all_reduce MB_MIN_BYTES=8 MB_MAX_BYTES=1K MB_STEP_FACTOR=8 MB_ITERS=5 \
      MB_WARMUP=1 MB_POINT_TIMEOUT=120 MB_PLOTS=0 \
      sbatch --parsable -N 1 -n 2 -t 10 -o "$WORK/fabrics-%j.out" slurm/fabrics.sbatch) \
  || fail "sbatch fabrics.sbatch failed"
# 1c. step.sbatch: one tiny data-parallel plan on 2 tasks; step-sweep.sbatch: every plan of the
# tiny shape with tp = 1, ZeRO 0 and 2 micro-batches at the allocation's 2 tasks (dp=2 and
# pp=2), 2 rounds each, interleaved, each run an srun of 2 tasks inside the one job.
STEP_ARGS="--model tiny --steps 1 --warmup 0 --threads 1"
sjid=$(cd "$MB_SRC" && MB_BIN="$MB_BIN" MB_RESULTS="$RES/step" MB_STEP_ARGS="$STEP_ARGS" MB_POINT_TIMEOUT=120 MB_PLOTS=0 \
      sbatch --parsable -N 1 -n 2 -t 10 -o "$WORK/step-%j.out" slurm/step.sbatch --mesh dp=2) \
  || fail "sbatch step.sbatch failed"
wjid=$(cd "$MB_SRC" && MB_BIN="$MB_BIN" MB_RESULTS="$RES/stepsweep" MB_PYTHON="$MB_PYTHON" \
      sbatch --parsable -N 1 -n 2 -t 10 -o "$WORK/stepsweep-%j.out" slurm/step-sweep.sbatch \
      --steps --model tiny --tp 1 --zero 0 --micro-batches 2 --rounds 2 --timeout 120 --args="--steps 1 --warmup 0 --threads 1") \
  || fail "sbatch step-sweep.sbatch failed"
# 2. a 2-point sweep as a job array (submitted right away: both run on the one node).
cat > "$WORK/sweep.toml" <<'TOML'
name = "slurm-e2e"
binaries = ["all_reduce", "all_gather"]
ranks = [2]
fabrics = ["shm"]
min_bytes = "8"
max_bytes = "1K"
step_factor = 8
iters = 5
warmup = 1
timeout = 120
TOML
"$MB_PYTHON" "$MB_SRC/scripts/sweep" "$WORK/sweep.toml" --slurm --wait --wait-timeout 240 --no-report \
  --bin "$MB_BIN" --out "$RES/sweep" --sbatch-args "-t 10" > "$WORK/sweep.out" 2>&1 \
  || { cat "$WORK/sweep.out"; fail "sweep --slurm exit $?"; }
cat "$WORK/sweep.out"
grep -q 'submitted array job of 2 tasks' "$WORK/sweep.out" || fail "sweep did not submit a 2-task array"
grep -q '2 ran ok' "$WORK/sweep.out" || fail "array points not ok"
wait_jobs 240 "$jid" || fail "collectives job $jid still running after 240 s"
state=$(scontrol show job "$jid" | grep -oE 'JobState=[A-Z]+|ExitCode=[0-9:]+' | tr '\n' ' ')
cat "$WORK/collectives-$jid.out"
[[ "$state" == *"JobState=COMPLETED"*"ExitCode=0:0"* ]] || fail "collectives job $jid: $state"
pass "collectives job $jid: $state"

wait_jobs 240 "$fjid" || fail "fabrics job $fjid still running after 240 s"
fstate=$(scontrol show job "$fjid" | grep -oE 'JobState=[A-Z]+|ExitCode=[0-9:]+' | tr '\n' ' ')
[[ "$fstate" == *"JobState=COMPLETED"*"ExitCode=0:0"* ]] || { cat "$WORK/fabrics-$fjid.out"; fail "fabrics job $fjid: $fstate"; }
for f in shm posix; do
  h="$RES/fabrics/$f/all_reduce.h5"
  "$MB_PYTHON" "$T" status "$h" ok >/dev/null || fail "$h not ok"
  [[ $("$MB_PYTHON" "$T" attr "$h" tag) == "$f" ]] || fail "$h: tag is not '$f'"
  want=$([[ $f == shm ]] && echo self,sm || echo self,posix)
  grep -q "\"UCX_TLS\": *\"$want\"" <<< "$("$MB_PYTHON" "$T" attr "$h" env)" || fail "$h: preset $f not in env"
done
grep -q 'time posix/shm' "$RES/fabrics/report.md" || fail "fabrics report.md lacks the shm/posix comparison"
pass "fabrics job $fjid: $fstate, one tagged file per preset, preset variables recorded, compared"

# 3. the files: seven from the batch job, two from the array, verified and carrying the job id.
n=0
for b in all_reduce all_gather reduce_scatter all_to_all broadcast sendrecv all_to_allv; do
  f="$RES/collectives/$b.h5"
  [[ -s "$f" ]] || fail "$f missing"
  "$MB_PYTHON" "$T" status "$f" ok >/dev/null || fail "$f status $("$MB_PYTHON" "$T" status "$f")"
  [[ $("$MB_PYTHON" "$T" attr "$f" slurm_job_id) == "$jid" ]] || fail "$f: slurm_job_id != $jid"
  grep -q "\"SLURM_JOB_ID\": *\"$jid\"" <<< "$("$MB_PYTHON" "$T" attr "$f" slurm)" || fail "$f: SLURM_JOB_ID not in the slurm attr"
  n=$((n + 1))
done
arr_job=$(grep -oE 'submitted array job of 2 tasks [0-9]+' "$WORK/sweep.out" | awk '{print $NF}')
for p in all_reduce-r2-mpi-shm all_gather-r2-mpi-shm; do
  f="$RES/sweep/$p.h5"
  "$MB_PYTHON" "$T" status "$f" ok >/dev/null || fail "$f not ok"
  sj=$("$MB_PYTHON" "$T" attr "$f" slurm)
  grep -q "\"SLURM_ARRAY_JOB_ID\": *\"$arr_job\"" <<< "$sj" || fail "$f: not from array job $arr_job: $sj"
  n=$((n + 1))
done
pass "$n files: status ok, job ids in provenance"

# 4. they merge in scripts/report, every row verified, both jobs present.
"$MB_PYTHON" "$MB_SRC/scripts/report" "$RES/collectives" "$RES/fabrics" "$RES/sweep" -f json -o "$WORK/all.json" \
  || fail "report exit $?"   # not the step jobs' folders: they may still be writing
"$MB_PYTHON" - "$WORK/all.json" "$jid" "$arr_job" <<'PY' || fail "merged report check"
import json, sys
rows = json.load(open(sys.argv[1]))
jobs = {r["slurm_job_id"] for r in rows}
colls = {r["collective"] for r in rows}
assert all(r["wrong"] == 0 and r["status"] == "ok" for r in rows), "unverified rows"
assert sys.argv[2] in jobs and len(jobs) == 4, jobs   # two batch jobs and the two array tasks
assert len(colls) == 7, colls
print(f"{len(rows)} rows from jobs {sorted(jobs)}, {len(colls)} collectives, all verified")
PY
pass "report merges every job's files"

# 5. the step jobs: step.sbatch's file and the step sweep's two points x 2 rounds, status ok,
# set-up time recorded, the sweep's runs launched inside its own job, and all five in one step table.
wait_jobs 300 "$sjid" "$wjid" || fail "step jobs $sjid $wjid still running after 300 s"
for j in "$sjid" "$wjid"; do
  st=$(scontrol show job "$j" | grep -oE 'JobState=[A-Z]+|ExitCode=[0-9:]+' | tr '\n' ' ')
  [[ "$st" == *"JobState=COMPLETED"*"ExitCode=0:0"* ]] || { cat "$WORK"/step*-"$j".out; fail "step job $j: $st"; }
done
grep -q '\[1/4\] round 1/2 step ranks=2 mpi fabric=shm mesh=dp=2 group=world order=tp-cp-ep-dp-pp --model tiny --zero 0 --micro-batches 2 \.\.\. ok' "$WORK/stepsweep-$wjid.out" \
  && grep -q '\[4/4\] round 2/2 step ranks=2 mpi fabric=shm mesh=pp=2,dp=1 .* \.\.\. ok' "$WORK/stepsweep-$wjid.out" \
  || { cat "$WORK/stepsweep-$wjid.out"; fail "the step sweep did not run its 2 points x 2 rounds"; }
[[ -s "$RES/stepsweep/report.md" ]] || fail "the step sweep wrote no report.md"
steps=("$RES/step/step.h5" "$RES"/stepsweep/step-r2-*.h5)
[[ ${#steps[@]} -eq 5 ]] || fail "want 5 step files (step.sbatch's, 2 points x 2 rounds), got ${steps[*]}"
for f in "${steps[@]}"; do
  "$MB_PYTHON" "$T" status "$f" ok >/dev/null || fail "$f not ok"
done
"$MB_PYTHON" "$MB_SRC/scripts/report" "${steps[@]}" --table steps -f json -o "$WORK/steps.json" || fail "step report exit $?"
"$MB_PYTHON" - "$WORK/steps.json" "$sjid" "$wjid" "${steps[@]}" <<'PY' || fail "step files check"
import json, sys, h5py
rows = json.load(open(sys.argv[1]))
assert len(rows) == 5 and all(r["status"] == "ok" for r in rows), rows
assert sorted(r["degrees"] for r in rows) == ["dp=2"] * 3 + ["pp=2"] * 2, [r["degrees"] for r in rows]
for path in sys.argv[4:]:
    with h5py.File(path, "r") as f:
        run = f["runs"][list(f["runs"])[0]]
        assert float(run["step"].attrs["setup_time_s"]) > 0, path
        job = run.attrs["slurm_job_id"]
        job = job.decode() if isinstance(job, bytes) else str(job)
        want = sys.argv[2] if path.endswith("/step/step.h5") else sys.argv[3]
        assert job == want, (path, job, want)
print(f"{len(rows)} step runs, set-up time recorded, each from its own job")
PY
pass "step.sbatch job $sjid and step-sweep.sbatch job $wjid: 5 step files ok (2 rounds), setup_time_s, one step table"

# 6. the same step sweep as job arrays (scripts/sweep --steps --slurm): one task per plan and one
# array per round, round 2's array submitted with --dependency=afterany on round 1's.
"$MB_PYTHON" "$MB_SRC/scripts/sweep" --steps --world 2 --model tiny --tp 1 --zero 0 --micro-batches 2 --timeout 120 \
  --rounds 2 --args="--steps 1 --warmup 0 --threads 1" --slurm --wait --wait-timeout 240 --no-report --bin "$MB_BIN" \
  --out "$RES/steparray" --sbatch-args "-t 10" > "$WORK/steparray.out" 2>&1 || { cat "$WORK/steparray.out"; fail "step sweep --slurm exit $?"; }
a1=$(grep -oE 'submitted array job of 2 tasks [0-9]+ \(ranks=2, round 1/2,' "$WORK/steparray.out" | awk '{print $7}')
a2=$(grep -oE "submitted array job of 2 tasks [0-9]+ \(ranks=2, round 2/2, after $a1," "$WORK/steparray.out" | awk '{print $7}')
[[ -n "$a1" && -n "$a2" ]] && grep -q '4 runs: 4 ran ok' "$WORK/steparray.out" \
  || { cat "$WORK/steparray.out"; fail "the step sweep did not run 2 points x 2 rounds as 2 chained arrays"; }
"$MB_PYTHON" - "$RES/steparray" "$a1" "$a2" <<'PY' || fail "round records of the arrays"
import glob, json, sys
out, a1, a2 = sys.argv[1:4]
recs = [json.load(open(f)) for f in sorted(glob.glob(out + "/points/*.json"))]
assert len(recs) == 2 and all(r["rounds_ok"] == 2 for r in recs), recs
import datetime
def t(x):
    return datetime.datetime.fromisoformat(x["start"].rstrip("Z")).timestamp()
r1 = [x for r in recs for x in r["rounds"] if x["round"] == 1]
r2 = [x for r in recs for x in r["rounds"] if x["round"] == 2]
assert len({x["slurm_job_id"] for x in r1 + r2}) == 4, [x["slurm_job_id"] for x in r1 + r2]  # a job per task
# round 2 started after every round-1 run ended (starts are whole seconds: 1 s of slack)
assert min(t(x) for x in r2) >= max(t(x) + x["seconds"] for x in r1) - 1, (r1, r2)
PY
pass "step sweep as job arrays: 2 points x 2 rounds ok, round 2's array ($a2) after round 1's ($a1)"
