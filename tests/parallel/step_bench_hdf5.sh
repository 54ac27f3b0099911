#!/usr/bin/env bash
# step_bench -O writes /runs/<id>/step/ as docs/architecture.md lays out; refuses to overwrite; --append
# adds a second run; --check passes and is recorded.
set -eu
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bin="$MB_BIN/step_bench"
args=(--layers 1 --hidden 32 --heads 4 --kv-heads 2 --seq 16 --vocab 64 --micro-batch 2 --steps 3 --warmup 1 --threads 2)
"$bin" "${args[@]}" --check -O "$tmp/s.h5" --tag t1 --quiet
set +e
"$bin" "${args[@]}" -O "$tmp/s.h5" --quiet 2>"$tmp/err"; rc=$?
set -e
[[ $rc -eq 2 ]] || { echo "FAIL [step_bench_hdf5]: overwrite exited $rc"; exit 1; }
grep -q "file exists" "$tmp/err" || { echo "FAIL [step_bench_hdf5]: overwrite message: $(cat "$tmp/err")"; exit 1; }
"$bin" "${args[@]}" -O "$tmp/s.h5" --append --tag t2 --profile --quiet
# --time-limit: stops early, exit 3 (runtime fault), the file says timeout and keeps the steps
set +e
"$bin" "${args[@]}" --steps 100000 --time-limit 2 -O "$tmp/t.h5" --quiet 2>/dev/null; rc=$?
set -e
[[ $rc -eq 3 ]] || { echo "FAIL [step_bench_hdf5]: --time-limit exited $rc, want 3"; exit 1; }
"$MB_PYTHON" - "$tmp/t.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
(rid,) = f["runs"].keys()
r = f["runs"][rid]
assert r.attrs["status"] == "timeout", r.attrs["status"]
n = r["step"]["step_times"].shape[0]
assert 0 < n < 100000, n
# steps for about 2 s: the GEMM peak measured again after them, MFU against the higher
s = r["step"].attrs
before, after = s["peak_measured_flops_before"], s["peak_measured_flops_after"]
assert before > 1e8 and after > 1e8 and s["peak_measured_flops"] == max(before, after), (before, after)
assert "at least 1 s" in s["peak_again_rule"], s["peak_again_rule"]
print("ok: timeout after", n, "steps; peak measured before and after")
PY
"$MB_PYTHON" - "$tmp/s.h5" "$tmp/s.jsonl" <<'PY'
import json, math, sys
import h5py
f = h5py.File(sys.argv[1], "r")
assert f.attrs["schema_version"] == 1
runs = sorted(f["runs"].keys())
assert len(runs) == 2, runs
for rid in runs:
    r = f["runs"][rid]
    assert r.attrs["status"] == "ok", r.attrs["status"]
    assert r.attrs["binary"] == "step_bench"
    s = r["step"]
    assert s["step_times"].shape == (3, 1), s["step_times"].shape
    assert s["phases"].shape == (3, 1, 4)
    assert list(json.loads(s.attrs["phase_names"])) == ["forward", "backward", "grad_sync", "optimizer"]
    assert (s["step_times"][:] > 0).all()
    ph = s["phases"][:, 0, :].sum(axis=1)
    assert (abs(ph - s["step_times"][:, 0]) <= 1e-3 * s["step_times"][:, 0] + 1e-6).all()
    assert s.attrs["hidden"] == 32 and s.attrs["kv_heads"] == 2
    assert s.attrs["peak_measured_flops"] > 1e8
    # 3 steps of milliseconds: the peak before the steps stands alone (not measured again)
    assert math.isnan(s.attrs["peak_measured_flops_after"]), s.attrs["peak_measured_flops_after"]
    assert s.attrs["peak_measured_flops"] == s.attrs["peak_measured_flops_before"]
    summ = s["summary"][0]
    assert summ["tokens_per_s"] > 0 and 0 < summ["mfu_measured_peak"] < 1.5
    assert math.isclose(summ["tokens_per_s"], 32 / summ["step_time_median"], rel_tol=1e-9)
    mem = {m["category"].decode(): m for m in s["memory"][:]}
    for k in ("params", "grads", "optimizer", "activations"):
        assert mem[k]["measured_bytes"] >= mem[k]["analytic_bytes"] > 0, k
    assert s["comm"].shape == (0,)
c1 = f["runs"][runs[0]]["step"]
assert c1["summary"][0]["check"] == b"pass", c1["summary"][0]["check"]
assert c1["check"].shape[0] > 3 and c1["check"]["pass"].all()
s2 = f["runs"][runs[1]]["step"]
assert s2["summary"][0]["check"] == b"off"
assert c1["events"].shape == (0,)  # no --profile, no trace
ev = s2["events"][:]
assert len(ev) > 0 and set(ev["step"]) == {0, 1, 2}, set(ev["step"])
kinds = {k.decode() for k in ev["kind"]}
assert {"matmul.fwd", "matmul.bwd", "attention.fwd", "attention.bwd", "adamw.opt"} <= kinds, kinds
assert (ev["t_end"] >= ev["t_start"]).all()
# the trace's FLOPs of one step are exactly the FLOPs the step counted from the op shapes
step0 = ev[ev["step"] == 0]["flops"].sum()
assert math.isclose(step0, s2.attrs["flops_per_step"], rel_tol=1e-12), (step0, s2.attrs["flops_per_step"])
ops = {o["op"].decode() for o in s2["op_profile"][:]}
assert "matmul" in ops
lines = [json.loads(l) for l in open(sys.argv[2])]
assert sum(1 for l in lines if l.get("summary")) == 2
print("ok:", runs)
PY
