#!/usr/bin/env bash
# scripts/plot on files the binaries write here: busbw.png, latency.png and one per-rank heat
# map per run are written, are real PNGs, are not blank, and carry one line per fabric; the heat
# map's colour bar reads plain ratios (1x, 1.2x), never '1.25x10^0'.
. "$(dirname "$0")/lib.bash"
P="$MB_SRC/scripts/plot"
SZ=(-b 8 -e 256K -f 8 -n 5 -w 1 -c 1 --inplace no)
run2 UCX_TLS=self,sm -- all_reduce_bench "${SZ[@]}" --tag shm -O "$WORK/shm.h5" || fail "shm run failed"
run2 UCX_TLS=self,tcp UCX_NET_DEVICES=lo -- all_reduce_bench "${SZ[@]}" --tag tcp-lo -O "$WORK/tcp.h5" || fail "tcp-lo run failed"

py "$P" "$WORK/shm.h5" "$WORK/tcp.h5" -o "$WORK/plots" > "$WORK/list" || fail "plot exit $?"
[[ $(grep -c 'heatmap-' "$WORK/list") -eq 2 ]] || fail "expected 2 heat maps: $(cat "$WORK/list")"
for f in busbw latency; do grep -q "$WORK/plots/$f.png" "$WORK/list" || fail "$f.png not listed"; done
py - "$WORK/list" <<'PYEOF' || fail "PNG content check"
import sys
import matplotlib.image as mpimg
import numpy as np
for path in open(sys.argv[1]).read().split():
    head = open(path, "rb").read(8)
    assert head == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    img = mpimg.imread(path)
    assert img.shape[0] > 150 and img.shape[1] > 300, f"{path}: tiny image {img.shape}"
    rgb = img[..., :3].reshape(-1, 3)
    colours = len(np.unique((rgb * 255).astype(np.uint8), axis=0))
    assert colours > 20 and float(rgb.std()) > 0.02, f"{path}: looks blank ({colours} colours)"
    print(f"{path}: {img.shape[1]}x{img.shape[0]}, {colours} colours")
PYEOF
# The line plots carry one series per fabric: the legend entries are the two tags.
py - "$WORK/shm.h5" "$WORK/tcp.h5" "$MB_SRC/scripts/plot" <<'PYEOF' || fail "series check"
import os, sys
sys.path.insert(0, os.path.dirname(sys.argv[3]))
from meshbench import plot_collectives as mod, reader  # scripts/plot's collective figures
rows, _ = reader.load_collectives(sys.argv[1:3])
label = mod.series_labeller(rows)
labels = sorted({label(r) for r in rows})
assert labels == ["shm", "tcp-lo"], labels
print("series:", labels)
PYEOF
pass "2 line plots + 2 heat maps, valid non-blank PNGs, one series per fabric"

# The heat map's colour bar reads plain ratios ('1.2x'), not matplotlib's log labels ('1.25x10^0').
py - "$WORK/shm.h5" "$MB_SRC/scripts/plot" <<'PYEOF' || fail "heat map colour bar labels"
import os, re, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from meshbench import plot_collectives as mod, reader  # scripts/plot's collective figures
rows, _ = reader.load_collectives([sys.argv[1]], with_samples=True)
rows = [r for r in rows if r["placement"] == "out-of-place"]
saved = []
plt.Figure.savefig = lambda fig, *a, **k: saved.append(fig)
for vmax_rows in (rows, [dict(r, samples=np.ones_like(r["samples"]) * [1.0, 1.25]) for r in rows]):
    mod.plot_heatmap(plt, np, vmax_rows, "/dev/null")
    fig = saved[-1]
    fig.canvas.draw()
    cb = fig.axes[1]
    major = [t.get_text() for t in cb.yaxis.get_ticklabels()]
    minor = [t.get_text() for t in cb.yaxis.get_ticklabels(minor=True)]
    assert major and all(re.fullmatch(r"[0-9]+(\.[0-9]+)?x", t) for t in major), major
    assert major[0] == "1x" and not any(minor), (major, minor)
    print("colour bar:", major)
PYEOF
pass "heat map colour bar: plain ratio labels from 1x"

rc=0; py "$P" "$WORK/shm.h5" --where tag=none -o "$WORK/p2" >/dev/null 2>&1 || rc=$?
[[ $rc -eq 1 && ! -e "$WORK/p2/busbw.png" ]] || fail "empty selection: exit $rc (expected 1, no figure)"
rc=0; py "$P" "$WORK/shm.h5" --where 'bogus=1' -o "$WORK/p3" >/dev/null 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "bad filter: exit $rc (expected 2)"
pass "empty selection exits 1 without figures, bad filter exits 2"
