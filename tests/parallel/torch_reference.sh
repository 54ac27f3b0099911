#!/usr/bin/env bash
# PyTorch cross-check (scripts/torch_reference.py): the same weights and tokens in PyTorch;
# loss, logits, every gradient and the AdamW-updated weights within 1e-5 (normalised, fp32).
# Two shapes: GQA with an untied head, and MHA with a tied head at 2 threads; each recomputation
# mode with its attention at seq 70. Then a fault
# test: one corrupted gradient element must make the oracle fail (exit 1).
set -u
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bin="$MB_BIN/step_bench"; ref="$MB_SRC/scripts/torch_reference.py"
"$MB_PYTHON" -c "import torch" 2>/dev/null || { echo "FAIL [torch_reference]: $MB_PYTHON has no torch (Debian python3-torch)"; exit 1; }
set -e
"$bin" --export "$tmp/a" --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --seq 40 --vocab 300 --micro-batch 3 --tied false --threads 1 --lr 3e-3 --seed 7
"$MB_PYTHON" "$ref" "$tmp/a"
# issue 29: flash attention (the default) with full and with selective recomputation, and the
# materialised attention with selective recomputation, at a length (70) that is no multiple of
# the tiles
for mode in "--attention flash --recompute full" "--attention naive --recompute selective" \
            "--attention flash --recompute selective"; do
  rm -rf "$tmp/r"
  "$bin" --export "$tmp/r" --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 96 --seq 70 --max-seq 70 --vocab 300 \
    --micro-batch 3 --tied false --threads 1 --lr 3e-3 --seed 7 $mode
  echo "$mode:"
  "$MB_PYTHON" "$ref" "$tmp/r"
done
"$bin" --export "$tmp/b" --layers 2 --hidden 128 --heads 4 --seq 96 --max-seq 128 --vocab 512 --micro-batch 2 --threads 2 --seed 8
"$MB_PYTHON" "$ref" "$tmp/b"
set +e
"$MB_PYTHON" - "$tmp/b/grads.f32" <<'PY'
import sys, numpy as np
g = np.fromfile(sys.argv[1], dtype=np.float32)
i = int(np.argmax(np.abs(g)))
g[i] *= 1.01   # a 1% error in one element of the largest gradient
g.tofile(sys.argv[1])
PY
"$MB_PYTHON" "$ref" "$tmp/b" > "$tmp/out" 2>&1; rc=$?
cat "$tmp/out"
if [[ $rc -ne 1 ]]; then echo "FAIL [torch_reference]: corrupted gradient not caught (exit $rc)"; exit 1; fi
echo "ok   [torch_reference]: corrupted gradient caught"
