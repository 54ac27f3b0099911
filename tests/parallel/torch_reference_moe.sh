#!/usr/bin/env bash
# PyTorch cross-check of the MoE layer (issue 13; scripts/torch_reference.py's moe_mlp): loss,
# logits, every gradient (routers and experts included) and the AdamW-updated weights within
# 1e-5 normalised, as for the dense model. Two shapes: dropless with every other block MoE
# (untied, GQA), and 8 experts top-2 with capacity factor 0.75 (a quarter of the assignments
# dropped). Then a fault test: one corrupted element of a router gradient must fail (exit 1).
set -u
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bin="$MB_BIN/step_bench"; ref="$MB_SRC/scripts/torch_reference.py"
"$MB_PYTHON" -c "import torch" 2>/dev/null || { echo "FAIL [torch_reference_moe]: $MB_PYTHON has no torch (Debian python3-torch)"; exit 1; }
set -e
"$bin" --export "$tmp/a" --layers 3 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --seq 40 --vocab 300 --micro-batch 3 --tied false --threads 1 --lr 3e-3 --seed 7 --experts 4 --top-k 2 --moe-every 2 --aux-loss-coef 0.05
"$MB_PYTHON" "$ref" "$tmp/a"
"$bin" --export "$tmp/b" --layers 2 --hidden 64 --heads 4 --ffn 128 --seq 48 --vocab 256 --micro-batch 2 --threads 2 --seed 8 --experts 8 --top-k 2 --capacity-factor 0.75 --aux-loss-coef 0.1
"$MB_PYTHON" "$ref" "$tmp/b"
# The capacity run did drop (the console records it).
"$bin" --layers 2 --hidden 64 --heads 4 --ffn 128 --seq 48 --vocab 256 --micro-batch 2 --threads 2 --seed 8 --experts 8 --top-k 2 --capacity-factor 0.75 --steps 1 --warmup 0 > "$tmp/run"
grep -q "384 assignments over the timed steps, [1-9][0-9]* dropped" "$tmp/run" || { cat "$tmp/run"; echo "FAIL [torch_reference_moe]: no drops recorded"; exit 1; }
set +e
"$MB_PYTHON" - "$tmp/b" <<'PY'
import json, sys, numpy as np
d = sys.argv[1]
e = next(e for e in json.load(open(d + "/config.json"))["layout"] if e["name"] == "h.1.moe.router.weight")
g = np.fromfile(d + "/grads.f32", dtype=np.float32)
s = g[e["offset"]:e["offset"] + e["numel"]]
s[int(np.argmax(np.abs(s)))] *= 1.01   # a 1% error in one element of a router gradient
g.tofile(d + "/grads.f32")
PY
"$MB_PYTHON" "$ref" "$tmp/b" > "$tmp/out" 2>&1; rc=$?
cat "$tmp/out"
if [[ $rc -ne 1 ]]; then echo "FAIL [torch_reference_moe]: corrupted router gradient not caught (exit $rc)"; exit 1; fi
echo "ok   [torch_reference_moe]: corrupted router gradient caught"
