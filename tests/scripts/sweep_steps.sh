#!/usr/bin/env bash
# Step sweeps (scripts/sweep --steps, and a [steps] table): every plan of the tiny shape at 4
# ranks is enumerated at one global batch (the default: the smallest every candidate mesh
# reaches) and asked of step_bench --plan-only; the refused plans are pruned with the binary's
# own message (the one a real run prints), degenerate ones (ZeRO whose data-parallel groups,
# dp x cp and with expert parallel edp, are 1 rank) and those that cannot reach a given global
# batch (not a multiple of b x dp, m < pp) by the sweep, each counted by category; ZeRO with
# tensor and with expert parallel are among the valid plans (a MoE table with ep = [1, 2]), and
# a ZeRO + EP plan at dp = 1 runs as printed and passes --check; plans over --memory-per-rank
# are pruned by the analytic estimate; two plans run locally at 2 ranks with progress at one
# global batch, a re-run skips them, a point that fails at run time (its later rounds not run)
# and one past its timeout are recorded results (sweep exit 1).
. "$(dirname "$0")/lib.bash"
S="$MB_SRC/scripts/sweep"
RUN_ARGS="--steps 1 --warmup 0 --threads 1"

# 1. Enumeration at 4 ranks (dry run). tp, pp auto (1, 2, 4), cp = ep = 1, zero 0 and 1, 1F1B:
# 6 meshes (dp4, tp2 x dp2, pp2 x dp2, tp2 x pp2, tp4, pp4) x 2 ZeRO stages = 12 candidates.
# The global batch is fixed: the tiny shape's micro-batch is b = 4 samples and dp is 1, 2 or 4,
# so 16 is the smallest every mesh reaches (m = 16 / (4 dp): 1, 2, 4; every pipeline m >= pp).
# Pruned: ZeRO-1 where dp x cp = 1 (tp4, tp2 x pp2, pp4: 3 degenerate), and by the binary 2
# layers over 4 stages (pp4, ZeRO 0): 1 refused. 8 valid, ZeRO-1 with tp (tp2 x dp2) among
# them (step_bench refused it before issue 25: 7 valid, 2 refused then).
py "$S" --steps --world 4 --model tiny --args="$RUN_ARGS" --dry-run --bin "$MB_BIN" --out "$WORK/dry" > "$WORK/dry.txt" 2>&1 \
  || { cat "$WORK/dry.txt"; fail "dry run exit $?"; }
n_valid=$(grep -c '^\[[0-9]*/8\] step-r4-' "$WORK/dry.txt" || true)
[[ $n_valid -eq 8 ]] || { cat "$WORK/dry.txt"; fail "want 8 valid plans at 4 ranks, got $n_valid"; }
grep -q '^pruned 4 plan(s) (3 degenerate, 1 refused):' "$WORK/dry.txt" || { cat "$WORK/dry.txt"; fail "want 4 pruned plans: 3 degenerate, 1 refused"; }
grep -q '^\[[0-9]*/8\] step-r4-mpi-shm-tp2cp1ep1dp2pp1-z1-m2-otcedp .* --mesh tp=2,dp=2 .* --zero 1 --micro-batches 2$' "$WORK/dry.txt" \
  || { cat "$WORK/dry.txt"; fail "ZeRO-1 with tp2 x dp2 is not a valid plan"; }
grep -q '^ranks=4: global batch 16 (auto: ' "$WORK/dry.txt" || { cat "$WORK/dry.txt"; fail "the default global batch is not 16"; }
for z in tp4cp1ep1dp1pp1-z1-m4 tp2cp1ep1dp1pp2-z1-1f1b-m4 tp1cp1ep1dp1pp4-z1-1f1b-m4; do
  grep -q "  step-r4-$z-otcedp: degenerate: ZeRO-1 shards over its data-parallel group dp x cp = 1 rank" "$WORK/dry.txt" \
    || { cat "$WORK/dry.txt"; fail "$z is not pruned as degenerate"; }
done
# Every valid plan trains b x dp x m = 16 samples per step.
py - "$WORK/dry.txt" <<'PY' || fail "a valid plan does not train the global batch 16"
import re, sys
n = 0
for line in open(sys.argv[1]):
    if re.match(r"^\[\d+/8\] step-r4-", line):
        dp = int(re.search(r"dp(\d+)pp", line).group(1))
        m = int(re.search(r"--micro-batches (\d+)", line).group(1))
        assert 4 * dp * m == 16, line
        n += 1
assert n == 8, n
PY
pass "4 ranks, tiny shape: global batch 16 for every plan, 8 valid (ZeRO-1 with tp2 x dp2 among them), 4 pruned (3 degenerate, 1 refused)"

# A given global batch the plans cannot all reach: 8 at 4 ranks is not a multiple of b x dp =
# 16 for dp4, and leaves one micro-batch to pp2 x dp2 and two to pp4: pruned before the binary
# is asked (3 global batch); tp2 x dp2 (m = 1), tp4 and tp2 x pp2 (m = 2) run it.
py "$S" --steps --world 4 --model tiny --zero 0 --global-batch 8 --args="$RUN_ARGS" --dry-run --bin "$MB_BIN" \
  --out "$WORK/dry" > "$WORK/gb.txt" 2>&1 || { cat "$WORK/gb.txt"; fail "global batch dry run exit $?"; }
grep -q '^ranks=4: global batch 8 (given)' "$WORK/gb.txt" || { cat "$WORK/gb.txt"; fail "no given global batch line"; }
grep -q '^pruned 3 plan(s) (3 global batch):' "$WORK/gb.txt" || { cat "$WORK/gb.txt"; fail "want 3 plans pruned by the global batch"; }
grep -q '  step-r4-tp1cp1ep1dp4pp1-z0-m0-otcedp: global batch 8 is not a multiple of b x dp = 4 x 4' "$WORK/gb.txt" \
  || { cat "$WORK/gb.txt"; fail "dp4 not pruned as unable to divide the global batch"; }
grep -q '  step-r4-tp1cp1ep1dp2pp2-z0-m1-otcedp: global batch 8 gives m = 8 / (4 x 2) = 1 micro-batches for pp = 2 stages: m < pp' "$WORK/gb.txt" \
  || { cat "$WORK/gb.txt"; fail "pp2 x dp2 not pruned for m < pp"; }
[[ $(grep -c '^\[[0-9]*/3\] step-r4-' "$WORK/gb.txt") -eq 3 ]] || { cat "$WORK/gb.txt"; fail "want 3 plans at global batch 8"; }
# micro_batches instead: the global batch varies with dp, and the sweep says so.
py "$S" --steps --world 4 --model tiny --zero 0 --micro-batches 2 --args="$RUN_ARGS" --dry-run --bin "$MB_BIN" \
  --out "$WORK/dry" > "$WORK/mb.txt" 2>&1 || { cat "$WORK/mb.txt"; fail "micro-batches dry run exit $?"; }
grep -q '^ranks=4: global batch varies: b x m x dp (micro_batches given)' "$WORK/mb.txt" || { cat "$WORK/mb.txt"; fail "no varying global batch line"; }
pass "global batch 8: 3 plans pruned (not a multiple of b x dp, m < pp), 3 run it; micro_batches: the batch varies, said"

# A degenerate duplicate: with experts, etp = 0 (the default: etp = tp) and etp = 1 at tp = 1 are
# one plan; the second is pruned, naming the first (1 MoE plan at ep 1 and 1 at ep 2 remain).
cat > "$WORK/etp.toml" <<'TOML'
ranks = [2]
args = ["--experts", "2"]
[steps]
model = "tiny"
tp = [1]
pp = [1]
zero = [0]
etp = [0, 1]
TOML
py "$S" "$WORK/etp.toml" --dry-run --bin "$MB_BIN" --out "$WORK/dry" > "$WORK/etp.txt" 2>&1 || { cat "$WORK/etp.txt"; fail "etp dry run exit $?"; }
grep -q '^pruned 2 plan(s) (2 degenerate):' "$WORK/etp.txt" && [[ $(grep -c '^\[[0-9]/2\] ' "$WORK/etp.txt") -eq 2 ]] \
  || { cat "$WORK/etp.txt"; fail "want 2 MoE plans and 2 degenerate duplicates"; }
grep -q '  step-r2-tp1cp1ep1etp1dp2pp1-z0-m1-otcedp: degenerate: the same plan as tp1cp1ep1dp2pp1-z0-m1-otcedp (etp 1 is tp = 1)' "$WORK/etp.txt" \
  || { cat "$WORK/etp.txt"; fail "the etp=1 duplicate does not name its twin"; }
pass "etp = 1 at tp = 1 pruned as the same plan as the default etp"

# The refusal recorded for pp=4 with ZeRO 0 (2 layers over 4 stages) is the message a real run
# prints.
line=$(grep '  step-r4-tp1cp1ep1dp1pp4-z0-1f1b-m4-otcedp: ' "$WORK/dry.txt") || { cat "$WORK/dry.txt"; fail "the pp4 ZeRO-0 plan is not listed as pruned"; }
msg=${line#*otcedp: }
rc=0
timeout 120 "$MB_MPIEXEC" -n 4 ${MB_UCX_YIELD:+-genv LD_PRELOAD "$MB_UCX_YIELD"} "$MB_BIN/step_bench" --model tiny $RUN_ARGS \
  --mesh pp=4,dp=1 --order tp-cp-ep-dp-pp --zero 0 --micro-batches 4 --schedule 1f1b --vpp 1 > "$WORK/real.out" 2> "$WORK/real.err" || rc=$?
[[ $rc -eq 2 ]] || fail "the real run of the refused plan exited $rc, want 2"
[[ "$(cat "$WORK/real.err")" == "step_bench: error: $msg" ]] || fail "pruned reason '$msg' differs from the real run's '$(cat "$WORK/real.err")'"
pass "refused plan recorded with the binary's message: $msg"

# ZeRO with tensor and expert parallel at 4 ranks: the tiny shape with 4 experts per MoE block,
# tp and pp auto (1, 2, 4), ep 1 and 2, etp 1 (the MoE default), ZeRO 0 and 1: 6 meshes x 2 ep
# x 2 ZeRO = 24 candidates at global batch 16. ZeRO shards the dense parameters over dp x cp
# and, with ep > 1, the experts over edp = world / (etp ep pp), so it is degenerate only where
# both are 1 rank: tp4, tp2 x pp2 and pp4 at ep 1, tp2 x pp2 at ep 2 (edp 1): 4 degenerate;
# tp4 x ep2 (dp 1, edp 2) is not (it was before issue 25's rule). Refused by the binary: pp4 at
# ZeRO 0 (2 layers over 4 stages), pp4 x ep2 at ZeRO 0 and 1 (ep 2 does not divide dp x cp = 1):
# 3. 17 valid, among them ZeRO-1 with tp (tp2 x dp2), with ep (ep2 over dp4, and under pp2),
# with both (tp2 x ep2 x dp2, tp4 x ep2).
cat > "$WORK/moe.toml" <<'TOML'
ranks = [4]
args = ["--experts", "4", "--steps", "1", "--warmup", "0", "--threads", "1"]
[steps]
model = "tiny"
ep = [1, 2]
zero = [0, 1]
TOML
py "$S" "$WORK/moe.toml" --dry-run --bin "$MB_BIN" --mpiexec "$MB_MPIEXEC" --out "$WORK/moe" > "$WORK/moe.txt" 2>&1 \
  || { cat "$WORK/moe.txt"; fail "MoE dry run exit $?"; }
[[ $(grep -c '^\[[0-9]*/17\] step-r4-' "$WORK/moe.txt") -eq 17 ]] || { cat "$WORK/moe.txt"; fail "want 17 valid MoE plans at 4 ranks"; }
grep -q '^pruned 7 plan(s) (4 degenerate, 3 refused):' "$WORK/moe.txt" || { cat "$WORK/moe.txt"; fail "want 7 pruned MoE plans: 4 degenerate, 3 refused"; }
grep -q '^ranks=4: global batch 16 (auto: ' "$WORK/moe.txt" || { cat "$WORK/moe.txt"; fail "the MoE sweep's global batch is not 16"; }
for z in tp2cp1ep1etp1dp2pp1-z1-m2 tp1cp1ep2etp1dp4pp1-z1-m1 tp1cp1ep2etp1dp2pp2-z1-1f1b-m2 tp2cp1ep2etp1dp2pp1-z1-m2 \
         tp4cp1ep2etp1dp1pp1-z1-m4; do
  grep -q "^\[[0-9]*/17\] step-r4-mpi-shm-$z-otcedp .* --experts 4 .* --zero 1 " "$WORK/moe.txt" \
    || { cat "$WORK/moe.txt"; fail "ZeRO-1 plan $z is not among the valid MoE plans"; }
done
grep -q '  step-r4-tp2cp1ep2etp1dp1pp2-z1-1f1b-m4-otcedp: degenerate: ZeRO-1 shards over its data-parallel group dp x cp = 1 rank and its experts over edp = 1 rank' "$WORK/moe.txt" \
  || { cat "$WORK/moe.txt"; fail "tp2 x pp2 x ep2 ZeRO-1 (edp 1) is not pruned as degenerate"; }
grep -q '  step-r4-tp4cp1ep1etp1dp1pp1-z1-m4-otcedp: degenerate: ZeRO-1 shards over its data-parallel group dp x cp = 1 rank:' "$WORK/moe.txt" \
  || { cat "$WORK/moe.txt"; fail "tp4 ZeRO-1 at ep 1 is not pruned as degenerate"; }
# The ZeRO + EP plan at dp = 1 runs as the dry run printed it (with --check): ZeRO-1 shards the
# experts over edp = 2, and its gradients and parameters match the single-rank reference.
cmd=$(sed -n 's/^\[[0-9]*\/17\] step-r4-mpi-shm-tp4cp1ep2etp1dp1pp1-z1-m4-otcedp ([^)]*): //p' "$WORK/moe.txt")
flags=${cmd#*/step_bench }
[[ -n "$cmd" && "$flags" != "$cmd" ]] || { cat "$WORK/moe.txt"; fail "no command for the tp4 x ep2 ZeRO-1 plan"; }
rc=0
timeout 120 "$MB_MPIEXEC" -n 4 ${MB_UCX_YIELD:+-genv LD_PRELOAD "$MB_UCX_YIELD"} "$MB_BIN/step_bench" $flags --check \
  > "$WORK/moe-run.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { cat "$WORK/moe-run.out"; fail "the tp4 x ep2 ZeRO-1 plan exited $rc"; }
grep -q 'ZeRO-1 over dp x cp = 1, the experts over edp = 2' "$WORK/moe-run.out" || { cat "$WORK/moe-run.out"; fail "the run does not shard the experts over edp = 2"; }
grep -q 'check pass' "$WORK/moe-run.out" || { cat "$WORK/moe-run.out"; fail "the tp4 x ep2 ZeRO-1 plan does not pass --check"; }
pass "MoE at 4 ranks: 17 valid (ZeRO-1 with tp, with ep, with both), 7 pruned (4 degenerate, 3 refused); tp4 x ep2 ZeRO-1 ran, checked"

# Orders: at 8 ranks tp=2 x pp=2 x dp=2 has 3 dimensions above 1, so the 120 orders of the 5
# dimensions give 3! = 6 distinct rank layouts; with tp=2 x dp=4 (pp = 1) only 2.
py "$S" --steps --world 8 --model tiny --tp 2 --pp 2 --zero 0 --micro-batches 4 --orders auto --dry-run --bin "$MB_BIN" \
  --out "$WORK/dry" > "$WORK/orders.txt" 2>&1 || { cat "$WORK/orders.txt"; fail "orders dry run exit $?"; }
[[ $(grep -c '^\[[0-9]*/6\] step-r8-mpi-shm-tp2cp1ep1dp2pp2-z0-1f1b-m4-o' "$WORK/orders.txt") -eq 6 ]] \
  || { cat "$WORK/orders.txt"; fail "want 6 distinct orders for tp2 x dp2 x pp2"; }
py "$S" --steps --world 8 --model tiny --tp 2 --pp 1 --zero 0 --orders auto --dry-run --bin "$MB_BIN" \
  --out "$WORK/dry" > "$WORK/orders2.txt" 2>&1 || { cat "$WORK/orders2.txt"; fail "orders dry run exit $?"; }
[[ $(grep -c '^\[[0-9]*/2\] step-r8-mpi-shm-tp2cp1ep1dp4pp1-z0-m1-o' "$WORK/orders2.txt") -eq 2 ]] \
  || { cat "$WORK/orders2.txt"; fail "want 2 distinct orders for tp2 x dp4"; }
pass "orders auto: 6 distinct layouts for tp2 x pp2 x dp2 at 8 ranks, 2 for tp2 x dp4"

# 2. Memory pruning: the tiny shape needs 6.11 MiB per rank at dp=4 with the materialised
# attention (4 x 549888 B of params, grads and moments, 3288064 of activations, 919552 of
# buffers; tests/parallel/plan_memory_test.cpp), 5.37 MiB with flash, the default (its
# activations without the 4 x 64 x 64 probabilities per layer, its buffers without their
# gradient), so 5M prunes the dp=4 plans by memory and keeps the smaller ones.
py "$S" --steps --world 4 --model tiny --zero 0 --memory-per-rank 5M --args="$RUN_ARGS" --dry-run --bin "$MB_BIN" \
  --out "$WORK/dry" > "$WORK/mem.txt" 2>&1 || { cat "$WORK/mem.txt"; fail "memory dry run exit $?"; }
grep -q 'step-r4-tp1cp1ep1dp4pp1-z0-m1-otcedp: memory: 5.37 MiB per rank (pp stage 0: params 537.00 KiB, grads 537.00 KiB, optimizer 1.05 MiB, activations 2.64 MiB, buffers 642.00 KiB) exceeds memory_per_rank 5.00 MiB' "$WORK/mem.txt" \
  || { cat "$WORK/mem.txt"; fail "the dp=4 plan is not pruned by memory with its breakdown"; }
grep -q '^\[[0-9]*/[0-9]*\] step-r4-mpi-shm-tp2cp1ep1dp2pp1-z0-m2' "$WORK/mem.txt" || { cat "$WORK/mem.txt"; fail "tp2 x dp2 should fit in 5M"; }
pass "memory pruning: dp=4 (6.11 MiB per rank) pruned against 5M, tp=2 x dp=2 kept"

# 3. A local run of 2 plans at 2 ranks from a sweep file (one round each: rounds are
# sweep_rounds.sh's): dp=2 and pp=2 at the default global batch, 8 = 4 x 2 x 1 = 4 x 1 x 2.
OUT="$WORK/run"
cat > "$WORK/s.toml" <<TOML
name = "steps-test"
ranks = [2]
fabrics = ["shm"]
timeout = $RUN_TIMEOUT
rounds = 1
args = ["--steps", "1", "--warmup", "0", "--threads", "1"]

[steps]
model = "tiny"
tp = [1]
pp = "auto"
zero = [0]
TOML
SW=(py "$S" "$WORK/s.toml" --bin "$MB_BIN" --out "$OUT" --mpiexec "$MB_MPIEXEC")
"${SW[@]}" > "$WORK/run1" 2>&1 || { cat "$WORK/run1"; fail "step sweep exit $?"; }
grep -q '^\[1/2\] step ranks=2 mpi fabric=shm mesh=dp=2 group=world order=tp-cp-ep-dp-pp --model tiny --zero 0 --micro-batches 1 \.\.\. ok' "$WORK/run1" || { cat "$WORK/run1"; fail "no [1/2] dp=2 progress line"; }
grep -q '^\[2/2\] step ranks=2 mpi fabric=shm mesh=pp=2,dp=1 group=world order=tp-cp-ep-dp-pp --model tiny --zero 0 --micro-batches 2 --schedule 1f1b --vpp 1 \.\.\. ok' "$WORK/run1" || { cat "$WORK/run1"; fail "no [2/2] pp=2 progress line"; }
for f in plans.json report.md; do [[ -s "$OUT/$f" ]] || fail "$OUT/$f missing"; done
[[ -e "$OUT/pruned.txt" ]] || fail "$OUT/pruned.txt missing (empty: nothing pruned)"
py - "$OUT" <<'PY' || fail "result files or plans.json wrong"
import glob, json, os, sys
sys.path.insert(0, os.path.join(os.environ["MB_SRC"], "scripts"))
from meshbench import reader
out = sys.argv[1]
files = sorted(glob.glob(os.path.join(out, "*.h5")))
assert len(files) == 2, files
for f in files:
    assert set(reader.run_statuses(f).values()) == {"ok"}, f
plans = json.load(open(os.path.join(out, "plans.json")))
assert len(plans["valid"]) == 2 and all(p["plan"]["valid"] for p in plans["valid"]), plans["valid"]
# one global batch: the binary's own plan and the run's file say 8 samples for both plans
assert [p["plan"]["global_batch"] for p in plans["valid"]] == [8, 8], plans["valid"]
assert plans["global_batch"][0]["global_batch"] == [8], plans["global_batch"]
runs, bad = reader.load_steps(files, quiet=True)
assert not bad and sorted(r["global_batch"] for r in reader.step_table(runs)) == [8, 8], reader.step_table(runs)
import h5py
with h5py.File(files[0], "r") as h:
    st = h["runs"][list(h["runs"])[0]]["step"].attrs
    assert float(st["setup_time_s"]) > 0, dict(st)
PY
pass "2 plans ran at 2 ranks at global batch 8 (status ok, setup_time_s recorded), pruned.txt, plans.json and report.md written"

# 4. Resume: both points are done and skipped, files untouched.
before=$(stat -c '%Y %s %n' "$OUT"/*.h5 | sort)
"${SW[@]}" > "$WORK/run2" 2>&1 || { cat "$WORK/run2"; fail "re-run exit $?"; }
[[ $(grep -c 'skip (done)' "$WORK/run2") -eq 2 ]] || { cat "$WORK/run2"; fail "re-run did not skip 2 done points"; }
[[ "$(stat -c '%Y %s %n' "$OUT"/*.h5 | sort)" == "$before" ]] || fail "a done point's file changed"
pass "re-run skipped both finished points"

# 5. A point that fails at run time is a recorded result: --check with a fault injected on rank
# 1 (the dp=2 plan accepts it; pp=2 x dp=1 has no data-parallel reduction and is pruned). Its
# rounds 2 and 3 (the default 3 rounds) are not run: they would fail the same way.
rc=0
py "$S" --steps --world 2 --model tiny --tp 1 --zero 0 --micro-batches 2 --args="$RUN_ARGS --check --inject-fault 1" \
  --bin "$MB_BIN" --out "$WORK/fail" --mpiexec "$MB_MPIEXEC" --timeout "$RUN_TIMEOUT" --no-report > "$WORK/run3" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/run3"; fail "sweep with a failing point exit $rc, want 1"; }
grep -qE 'step-r2-mpi-shm-tp1cp1ep1dp2pp1-z0-m2-otcedp round 1 +exit 1 +failed \(wrong data\)' "$WORK/run3" \
  || { cat "$WORK/run3"; fail "the summary lacks the failed point and its exit code"; }
grep -q '1 failed, 2 not run (their point failed a round)' "$WORK/run3" || { cat "$WORK/run3"; fail "rounds 2 and 3 of the failed point were not counted as not run"; }
[[ ! -e "$WORK/fail/step-r2-mpi-shm-tp1cp1ep1dp2pp1-z0-m2-otcedp.r2.h5" ]] || fail "round 2 of a failed point ran"
py -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["rc"] == 1 and r["status"] == "failed (wrong data)" and r["rounds_ok"] == 0 and len(r["rounds"]) == 1, r' \
  "$WORK/fail/points/step-r2-mpi-shm-tp1cp1ep1dp2pp1-z0-m2-otcedp.json" || fail "the point record lacks exit 1"
grep -qP 'tp1cp1ep1dp1pp2.*\trefused\t.*--inject-fault: corrupts a gradient before its data-parallel reduction' "$WORK/fail/pruned.txt" \
  || fail "pruned.txt lacks the pp=2 refusal: $(cat "$WORK/fail/pruned.txt")"
pass "failing point recorded (exit 1, failed (wrong data)), its later rounds not run; its refused sibling in pruned.txt"

# 6. A point that runs past its timeout is killed and recorded as a timeout (exit 124).
rc=0
py "$S" --steps --world 2 --model tiny --tp 1 --pp 1 --zero 0 --args="--steps 1000000 --warmup 0 --threads 1" \
  --timeout 3 --rounds 1 --bin "$MB_BIN" --out "$WORK/slow" --mpiexec "$MB_MPIEXEC" --no-report > "$WORK/run4" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/run4"; fail "sweep with a timed-out point exit $rc, want 1"; }
py -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["rc"] == 124 and r["status"] == "timeout", r' \
  "$WORK/slow/points/step-r2-mpi-shm-tp1cp1ep1dp2pp1-z0-m1-otcedp.json" || { cat "$WORK/run4"; fail "the point record is not a timeout"; }
pass "a point past its timeout recorded as timeout (exit 124)"
