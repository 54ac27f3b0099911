#!/usr/bin/env bash
# Pipeline parallel at 2 ranks (pp=2): --check against the single-rank reference for GPipe,
# 1F1B and interleaved 1F1B (V=2), m = P and m = 2P, an uneven layer split and an untied
# head; the measured PP bytes of every rank equal the plan's exactly (one activation and one
# gradient of b x s x h per boundary per micro-batch), the tied embedding's all-reduce is its
# own dim; HDF5 holds both ranks' events, stored-activation samples and peaks (GPipe m,
# 1F1B min(P - r, m)) and the bubble beside its theory.
source "$(dirname "$0")/lib.bash"
tiny=(--layers 4 --hidden 32 --heads 2 --kv-heads 1 --seq 16 --vocab 64 --micro-batch 2 --steps 2 --warmup 1
      --threads 1 --quiet --check)

run_check() {  # label, args...
  local label=$1; shift
  if expect_rc 0 2 step_bench --mesh pp=2 "${tiny[@]}" "$@"; then
    grep -q "check pass" "$WORK/out" && pass "$label: check pass" || fail "$label: no 'check pass' in output"
  fi
}
run_check "gpipe m=4 (m = 2P)" --schedule gpipe --micro-batches 4 -O "$WORK/g4.h5" --trace "$WORK/g.json"
run_check "gpipe m=2 (m = P)" --schedule gpipe --micro-batches 2
run_check "1f1b m=2 (m = P)" --schedule 1f1b --micro-batches 2
run_check "1f1b m=4 (m = 2P)" --schedule 1f1b --micro-batches 4 -O "$WORK/f4.h5"
run_check "interleaved V=2 m=2" --schedule interleaved --vpp 2 --micro-batches 2
run_check "interleaved V=2 m=4" --schedule interleaved --vpp 2 --micro-batches 4 -O "$WORK/i4.h5"
run_check "interleaved V=2 m=5 G=3 (Megatron's example)" --schedule interleaved --vpp 2 --micro-batches 5 --vpp-group 3
run_check "uneven split 3,2" --layers 5 --layers-per-stage 3,2 --micro-batches 4
run_check "uneven interleaved 2,1,1,2" --layers 6 --layers-per-stage 2,1,1,2 --schedule interleaved --vpp 2 --micro-batches 2
run_check "untied head, grad-reduce sum" --tied false --grad-reduce sum --micro-batches 2

py - "$WORK/g4.h5" "$WORK/f4.h5" "$WORK/i4.h5" "$WORK/g.json" <<'PY' && pass "HDF5: exact PP bytes, events, stored activations, bubble" || fail "HDF5 contents"
import json, sys
import h5py, numpy as np

def step(path):
    f = h5py.File(path, "r")
    (rid,) = f["runs"].keys()
    return f["runs"][rid]["step"]

for path, V in ((sys.argv[1], 1), (sys.argv[2], 1), (sys.argv[3], 2)):
    s = step(path)
    a = s.attrs
    P, m = json.loads(a["degrees"])["pp"], int(a["microbatches"])
    assert P == 2 and int(a["vpp"]) == V, (P, a["vpp"])
    steps = s["step_times"].shape[0]
    msg = int(a["micro_batch"]) * int(a["seq"]) * int(a["hidden"]) * 4
    comm = s["comm"][:]
    got = {(int(r["rank"]), r["dim"].decode(), r["kind"].decode()): int(r["bytes"]) for r in comm}
    for r in range(P):
        out = inn = 0
        for c in range(V):
            vs = c * P + r
            out += (vs < P * V - 1) + (vs > 0)
            inn += (vs > 0) + (vs < P * V - 1)
        assert got[(r, "pp", "send")] == steps * m * out * msg, (path, r, got)
        assert got[(r, "pp", "recv")] == steps * m * inn * msg, (path, r, got)
        # the tied embedding: wte's gradient all-reduced between the first and last stage
        assert got[(r, "embedding", "all_reduce")] == steps * int(a["vocab"]) * int(a["hidden"]) * 4
    # over the pipeline: (P V - 1) boundaries x m micro-batches x 2 messages each way
    assert sum(v for k, v in got.items() if k[1:] == ("pp", "send")) == steps * 2 * m * (P * V - 1) * msg
    summ = s["summary"][0]
    assert summ["bytes_match"] == 1 and summ["check"] == b"pass", summ
    if path == sys.argv[1]:  # the run with --trace keeps its events
        ev = s["events"][:]
        pp = ev[ev["dim"] == b"pp"]
        assert set(pp["rank"]) == {0, 1} and set(pp["kind"]) == {b"send", b"recv"}
        assert (pp["t_end"] >= pp["t_post"]).all()
    ps = s["passes"][:]  # every forward and backward of every rank: m x V each; the sends and receives
    assert (ps["phase"] == b"F").sum() == (ps["phase"] == b"B").sum() == steps * P * m * V, ps["phase"]
    assert (ps["phase"] == b"S").sum() == (ps["phase"] == b"R").sum() == steps * 2 * m * (P * V - 1)
    # stored activations: samples per rank, peak held GPipe m, 1F1B min(P - r, m)
    pipe = s["pipeline"][:]
    assert sorted(pipe["rank"]) == [0, 1], pipe
    sched = a["schedule"]
    for row in pipe:
        r = int(row["rank"])
        want = {"gpipe": m, "1f1b": min(P - r, m)}.get(sched)
        if want is not None:
            assert int(row["peak_held"]) == want, (sched, r, row)
        assert row["peak_activation_bytes"] > 0 and row["bubble_theory"] > 0
        assert 0 <= row["bubble"] < 1, row
    # the measured activation peak per rank equals the schedule's (slots held at once x slot bytes)
    mem = [r for r in s["memory"][:] if r["category"] == b"activations"]
    assert len(mem) == P and all(r["measured_bytes"] == r["analytic_bytes"] for r in mem), mem
    sl = s["activation_slots"][:]
    assert set(sl["rank"]) == {0, 1} and (sl["held"] >= 0).all()
    assert int(sl["held"].max()) == int(pipe["peak_held"].max())
t = json.load(open(sys.argv[4]))
assert any(e.get("ph") == "C" for e in t["traceEvents"]), "no stored-activation counter track"
assert {e["pid"] for e in t["traceEvents"] if e["ph"] == "X"} == {0, 1}
print("ok")
PY
# the pipeline timeline figure from the same file
if py "$MB_SRC/scripts/plot" --timeline "$WORK/g4.h5" -o "$WORK/plots" > "$WORK/plot.out" 2>&1 &&
   [[ -s "$WORK/plots/timeline.png" ]]; then pass "scripts/plot --timeline: timeline.png"
else fail "scripts/plot --timeline: $(cat "$WORK/plot.out")"; fi
finish
