#!/usr/bin/env bash
# step_bench with MoE blocks at one rank (issue 13): --check (float32 against float64) passes
# dropless and with capacity drops; the HDF5 run records the MoE shape and the drops; the
# trace's FLOPs of a step equal the counted FLOPs exactly when dropless, and fall short by
# exactly the dropped rows' expert GEMMs (12 x dropped x C x F) with capacity; the op profile
# names the router and permute ops.
set -eu
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bin="$MB_BIN/step_bench"
args=(--layers 2 --hidden 32 --heads 4 --ffn 48 --seq 16 --vocab 64 --micro-batch 2 --steps 1 --warmup 1 --threads 2
      --experts 4 --top-k 2 --profile --quiet)
"$bin" "${args[@]}" --check -O "$tmp/m.h5" --tag dropless
"$bin" "${args[@]}" --check -O "$tmp/m.h5" --append --tag capacity --capacity-factor 0.6 --moe-every 2
"$MB_PYTHON" - "$tmp/m.h5" <<'PY'
import math, sys
import h5py
f = h5py.File(sys.argv[1], "r")
runs = sorted(f["runs"].keys(), key=lambda r: f["runs"][r].attrs["tag"])
assert [f["runs"][r].attrs["tag"] for r in runs] == ["capacity", "dropless"], runs
for rid in runs:
    r = f["runs"][rid]
    s = r["step"]
    assert r.attrs["status"] == "ok"
    assert s["summary"][0]["check"] == b"pass", s["summary"][0]["check"]
    assert s.attrs["experts"] == 4 and s.attrs["top_k"] == 2
    ev = s["events"][:]
    kinds = {k.decode() for k in ev["kind"]}
    assert {"router.fwd", "router.bwd", "permute.fwd", "permute.bwd"} <= kinds, kinds
    flops = ev[ev["step"] == 0]["flops"].sum()
    C, F = 32, 48
    missing = 12 * s.attrs["moe_dropped"] * C * F
    assert math.isclose(flops + missing, s.attrs["flops_per_step"], rel_tol=1e-12), (flops, missing, s.attrs["flops_per_step"])
    print(r.attrs["tag"], "assignments", s.attrs["moe_assignments"], "dropped", s.attrs["moe_dropped"])
cap, dl = (f["runs"][r]["step"] for r in runs)
assert dl.attrs["moe_dropped"] == 0 and dl.attrs["moe_assignments"] == 2 * 32 * 2  # 2 blocks x N x k
assert cap.attrs["moe_capacity"] == math.ceil(0.6 * 32 * 2 / 4) and cap.attrs["moe_every"] == 2
assert cap.attrs["moe_assignments"] == 32 * 2 and cap.attrs["moe_dropped"] > 0
print("ok")
PY
