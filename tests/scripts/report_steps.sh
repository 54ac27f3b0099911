#!/usr/bin/env bash
# scripts/report and scripts/plot on step_bench files written here (tiny model, 2 ranks, dp=2,
# --zero 0..3): every number of the step table equals the file (read independently with h5py);
# bytes match the plan; ZeRO-1..3 optimizer memory equals its formula and is below DP's; the
# stages are shown side by side in Markdown (bytes headers name the quantity, cells the unit; step
# times to their spread's precision); plot draws memory.png (the worst rank, by plan); filters
# and mixed folders.
. "$(dirname "$0")/lib.bash"
R="$MB_SRC/scripts/report"
P="$MB_SRC/scripts/plot"
[[ -x "$MB_BIN/step_bench" ]] || fail "no step_bench in $MB_BIN (MESHBENCH_WITH_ENGINE=OFF?)"
TINY=(--layers 1 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --steps 2 --warmup 0 --threads 1 --quiet)
mkdir -p "$WORK/zero"
for z in 0 1 2 3; do
  run2 UCX_TLS=self,sm -- step_bench "${TINY[@]}" --mesh dp=2 --zero $z -O "$WORK/zero/z$z.h5" \
    || fail "step_bench --zero $z exit $?"
done
pass "step_bench dp=2 --zero 0..3 wrote 4 files"

py "$R" "$WORK/zero" -f json -o "$WORK/steps.json" || fail "report json exit $?"
py - "$WORK/steps.json" "$WORK"/zero/z*.h5 <<'PY' || fail "step table differs from the files"
import json, math, sys
import h5py
rows = json.load(open(sys.argv[1]))
assert len(rows) == 4, f"{len(rows)} step rows, want 4"
by = {r["file"]: r for r in rows}
for path in sys.argv[2:]:
    r = by[path]
    with h5py.File(path, "r") as f:
        (rid,) = f["runs"].keys()
        s = f["runs"][rid]["step"]
        summ = s["summary"][0]
        for k in ("step_time_median", "tokens_per_s", "mfu_measured_peak", "exposed_comm_fraction"):
            want = float(summ[k])
            assert r[k] == want or (math.isnan(want) and r[k] is None or r[k] != r[k]), (path, k, r[k], want)
        assert r["bytes_match"] == 1 == int(summ["bytes_match"]), (path, "bytes_match")
        assert r["zero_stage"] == int(s.attrs["zero_stage"]) and r["run_id"] == rid
        assert r["strategy"] == s.attrs["strategy"], (r["strategy"], s.attrs["strategy"])
        assert r["degrees"] == "dp=2" and r["microbatches"] == int(s.attrs["microbatches"])
        steps = s["step_times"].shape[0]
        assert r["steps"] == steps == 2
        tot = {}
        for c in s["comm"][()]:
            k = f"bytes.{c['dim'].decode()}.{c['kind'].decode()}"
            tot[k] = max(tot.get(k, 0), int(c["bytes"]))
        got = {k: v for k, v in r.items() if k.startswith("bytes.") and v is not None}  # None: another run's column
        assert got == {k: v / steps for k, v in tot.items()}, (path, got, tot)
        for m in s["memory"][()]:
            if m["rank"] == 0:
                assert r["mem." + m["category"].decode()] == float(m["measured_bytes"]), (path, m)
z = {r["zero_stage"]: r for r in rows}
assert set(z[0]) >= {"bytes.dp.all_reduce"}, z[0].keys()
for st in (1, 2, 3):
    assert "bytes.dp.reduce_scatter" in z[st] and "bytes.dp.all_gather" in z[st], z[st].keys()
    assert z[st]["mem.optimizer"] == z[st]["mem_analytic.optimizer"], (st, z[st]["mem.optimizer"])
    assert z[st]["mem.optimizer"] < z[0]["mem.optimizer"], st
print("step table equals the files:", {k: (r["strategy"], r["mem.optimizer"]) for k, r in sorted(z.items())})
PY
pass "json step table equals the files (times, tokens/s, MFU, bytes per rank and step, memory)"

py "$R" "$WORK/zero" -o "$WORK/steps.md" || fail "report md exit $?"
grep -q '^| | data_parallel | zero1 | zero2 | zero3 |$' "$WORK/steps.md" || fail "stages not side by side: $(cat "$WORK/steps.md")"
for row in 'step (ms)' 'tokens/s' 'MFU' 'exposed comm' 'dp reduce_scatter (bytes/rank/step)' 'dp all_reduce (bytes/rank/step)' \
           'optimizer (rank 0)' 'optimizer analytic' 'memory total (rank 0)'; do
  grep -qF "| $row |" "$WORK/steps.md" || fail "side-by-side table lacks '$row': $(cat "$WORK/steps.md")"
done
grep -q '^| bytes match | yes | yes | yes | yes |$' "$WORK/steps.md" || fail "bytes match row: $(grep 'bytes match' "$WORK/steps.md")"
# A header names the quantity, the cell its unit: no 'B/rank/step' header above cells in KiB or MiB.
! grep -q 'B/rank/step' "$WORK/steps.md" || fail "a header still says B/rank/step: $(grep 'B/rank/step' "$WORK/steps.md")"
py - "$WORK/steps.md" <<'PY' || fail "bytes cells without their unit: $(grep 'bytes/rank/step' "$WORK/steps.md")"
import re, sys
rows = [l for l in open(sys.argv[1]) if "(bytes/rank/step)" in l]
assert len(rows) >= 3, rows
for l in rows:
    for c in [c.strip() for c in l.strip("|\n").split("|")][1:]:
        assert c == "-" or re.fullmatch(r"[0-9.]+ (B|KiB|MiB|GiB)", c), (l, c)
PY
# Step times to the precision their spread supports: 2 steps' min-max, 2 significant digits of it.
py - "$WORK/steps.md" "$WORK"/zero/z*.h5 <<'PY' || fail "step (ms) precision: $(grep 'step (ms)' "$WORK/steps.md")"
import math, sys
import h5py
cells = [c.strip() for c in next(l for l in open(sys.argv[1]) if l.startswith("| step (ms) |")).strip("|\n").split("|")][1:]
want = []
for path in sys.argv[2:]:
    with h5py.File(path, "r") as f:
        s = next(iter(f["runs"].values()))["step"]
        t = s["step_times"][()].max(axis=1)
        med = float(s["summary"][0]["step_time_median"]) * 1e3
        w = (t.max() - t.min()) * 1e3
        p = min(math.floor(math.log10(w)) - 1, math.floor(math.log10(med))) if w > 0 else math.floor(math.log10(med)) - 2
        want.append(f"{med:.{-p}f}" if p < 0 else f"{round(med / 10 ** p) * 10 ** p:,.0f}")
assert cells == want, (cells, want)
print("step (ms):", cells)
PY
py "$R" "$WORK/zero/z1.h5" > "$WORK/one.md" || fail "report one run exit $?"
grep -q '^| run | strategy | degrees | m | step (ms) | tokens/s | MFU | exposed comm |' "$WORK/one.md" \
  || fail "one run: not one row per run: $(cat "$WORK/one.md")"
[[ $(grep -c '^| 20' "$WORK/one.md") -eq 1 ]] || fail "one run: expected one data row"
pass "Markdown: ZeRO stages side by side; one row per run otherwise"

n=$(py "$R" "$WORK/zero" -f json --where strategy=zero2 | py -c 'import json,sys; r=json.load(sys.stdin); assert all(x["strategy"]=="zero2" for x in r); print(len(r))')
[[ "$n" == 1 ]] || fail "--where strategy=zero2 kept $n rows"
rc=0; py "$R" "$WORK/zero" --where strategy=zero9 > /dev/null 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "empty step selection exit $rc, expected 1"
pass "filters apply to the step table; an empty selection exits 1"

# A folder with a collective run beside the step runs: Markdown carries both tables, CSV the
# collectives (and says on stderr that step runs were left out), --table steps the steps.
run2 UCX_TLS=self,sm -- all_reduce_bench -b 8 -e 64 -n 3 -w 1 -O "$WORK/zero/ar.h5" || fail "all_reduce run"
py "$R" "$WORK/zero" > "$WORK/mixed.md" || fail "mixed md exit $?"
grep -q '^| binary | tag | backend' "$WORK/mixed.md" && grep -q '^## step_bench runs' "$WORK/mixed.md" \
  || fail "mixed folder: both tables expected: $(cat "$WORK/mixed.md")"
py "$R" "$WORK/zero" -f csv > "$WORK/mixed.csv" 2> "$WORK/mixed.err" || fail "mixed csv exit $?"
head -1 "$WORK/mixed.csv" | grep -q '^file,run_id,binary,collective' && grep -q "4 step_bench run(s) left out" "$WORK/mixed.err" \
  || fail "mixed csv: $(head -1 "$WORK/mixed.csv") / $(cat "$WORK/mixed.err")"
[[ $(py "$R" "$WORK/zero" -f csv --table steps | wc -l) -eq 5 ]] || fail "--table steps: expected header + 4 rows"
pass "mixed folder: both tables in Markdown, collectives in CSV (steps with --table steps)"

# plot: memory.png from the step runs (stacked bars), next to the collective figures.
py "$P" "$WORK/zero" -o "$WORK/plots" > "$WORK/list" || fail "plot exit $?"
grep -q "$WORK/plots/memory.png" "$WORK/list" && grep -q "$WORK/plots/busbw.png" "$WORK/list" || fail "plot list: $(cat "$WORK/list")"
rm "$WORK/zero/ar.h5"
py "$P" "$WORK/zero" -o "$WORK/plots2" > "$WORK/list2" || fail "plot (steps only) exit $?"
[[ "$(cat "$WORK/list2")" == "$WORK/plots2/memory.png"$'\n'"$WORK/plots2/steps.png" ]] \
  || fail "steps only: expected memory.png and steps.png (no scaling.png: one rank count): $(cat "$WORK/list2")"
py - "$WORK/plots2/memory.png" "$MB_SRC/scripts" "$WORK/zero" <<'PYEOF' || fail "memory.png content"
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.image as mpimg
import numpy as np
img = mpimg.imread(sys.argv[1])
rgb = img[..., :3].reshape(-1, 3)
colours = len(np.unique((rgb * 255).astype(np.uint8), axis=0))
assert img.shape[0] > 150 and img.shape[1] > 300 and colours > 20, (img.shape, colours)
# The bars: one per run, five stacked categories whose tops are rank 0's measured total.
sys.path.insert(0, sys.argv[2])
from meshbench import reader
import matplotlib.pyplot as plt
import h5py
from meshbench import plans
from meshbench import plot_steps as mod  # scripts/plot's step figures
runs, _ = reader.load_steps([sys.argv[3]])
steps = plans.plan_rows(runs)
saved = {}
plt.Figure.savefig = lambda fig, *a, **k: saved.setdefault("fig", fig)
mod.plot_memory(plt, steps, "/dev/null", "")
ax = saved["fig"].axes[0]
bars = ax.patches
assert len(bars) == 5 * len(steps) == 20, len(bars)
tops = {}
for b in bars:
    tops[round(b.get_x() + b.get_width() / 2)] = max(tops.get(round(b.get_x() + b.get_width() / 2), 0), b.get_y() + b.get_height())
# Each bar: the worst rank's five parts (read here with h5py), named under the bar; labelled by plan.
labels = [t.get_text() for t in ax.get_xticklabels()]
assert [l.split("\n")[0] for l in labels] == ["dp2", "dp2 zero1", "dp2 zero2", "dp2 zero3"], labels
unit = 1 << 10 if "KiB" in ax.get_ylabel() else 1 << 20
for x, z in enumerate((0, 1, 2, 3)):
    with h5py.File(f"{sys.argv[3]}/z{z}.h5", "r") as f:
        mem = next(iter(f["runs"].values()))["step/memory"][()]
    tot = {}
    for m in mem:
        if m["category"].decode() in ("params", "grads", "optimizer", "activations", "buffers"):
            tot[int(m["rank"])] = tot.get(int(m["rank"]), 0.0) + float(m["measured_bytes"])
    worst = max(sorted(tot), key=lambda k: tot[k])
    assert labels[x].endswith(f"(rank {worst})"), (labels[x], tot)
    assert np.isclose(tops[x], tot[worst] / unit, rtol=1e-12), (z, tops[x], tot)
print("memory.png:", img.shape, colours, "colours; bar tops", [round(v, 1) for v in sorted(tops.values())], labels)
PYEOF
pass "plot: memory.png with one stacked bar per plan (ZeRO stage), tops = the worst rank's total, named; no collective figures without collectives"
