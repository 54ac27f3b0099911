#!/usr/bin/env bash
# scripts/report's plan table (issues 14 and 23), --compare for step runs and scripts/plot's
# steps.png, memory.png, scaling.png and --timeline on tiny step_bench files written here:
# single (1 rank), dp=2 twice (two rounds appended to one file), tp=2 (--check), pp=2 1F1B and
# GPipe at m=4, all with --ranks-per-node 1 so that every group crosses a "node", under shared
# memory (tag shm) and dp=2, tp=2 again over TCP on loopback (tag tcp); global batches 2, 4, 2,
# 8, 8. Asserts against the files (read with h5py by h5truth.py, independently of the scripts):
# every run's time split is step/time_split's mean over ranks (nothing derived), the rounds'
# median and spread, the ranking by median tokens/s, the global-batch column, "not separable",
# rounding to the spread's precision, files without step/time_split ('-' and a note, left out
# of steps.png), the compare rows, steps.png per token, memory.png's worst rank (GPipe: rank 1)
# labelled by plan, scaling.png over rounds, the timeline of GPipe and 1F1B on one time axis
# with memory in MiB, and that a timed-out run and a sweep point that exited 2 are rows.
. "$(dirname "$0")/lib.bash"
R="$MB_SRC/scripts/report"
P="$MB_SRC/scripts/plot"
[[ -x "$MB_BIN/step_bench" ]] || fail "no step_bench in $MB_BIN (MESHBENCH_WITH_ENGINE=OFF?)"
SHAPE=(--layers 2 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --threads 1 --quiet --ranks-per-node 1)
TINY=("${SHAPE[@]}" --steps 2 --warmup 1)
SHM=(UCX_TLS=self,sm)
TCP=(UCX_TLS=self,tcp UCX_NET_DEVICES=lo)
D="$WORK/plans"
mkdir -p "$D" "$WORK/sweep/points" "$WORK/old"
timeout "$RUN_TIMEOUT" env "${SHM[@]}" "$MB_MPIEXEC" -n 1 "$MB_BIN/step_bench" "${TINY[@]}" --tag shm -O "$D/single.h5" \
  > "$WORK/single.log" 2>&1 || fail "single exit $?: $(tail -5 "$WORK/single.log")"
run2 "${SHM[@]}" -- step_bench "${TINY[@]}" --tag shm --mesh dp=2 -O "$D/dp2.h5" || fail "dp=2 exit $?"
run2 "${SHM[@]}" -- step_bench "${TINY[@]}" --tag shm --mesh dp=2 -O "$D/dp2.h5" --append || fail "dp=2 round 2 exit $?"
run2 "${SHM[@]}" -- step_bench "${TINY[@]}" --tag shm --mesh tp=2 --check -O "$D/tp2.h5" || fail "tp=2 exit $?"
run2 "${SHM[@]}" -- step_bench "${TINY[@]}" --tag shm --mesh pp=2 --micro-batches 4 -O "$D/pp2.h5" || fail "pp=2 exit $?"
run2 "${SHM[@]}" -- step_bench "${TINY[@]}" --tag shm --mesh pp=2 --micro-batches 4 --schedule gpipe -O "$D/gpipe.h5" \
  || fail "pp=2 gpipe exit $?"
run2 "${TCP[@]}" -- step_bench "${TINY[@]}" --tag tcp --mesh dp=2 -O "$D/dp2-tcp.h5" || fail "dp=2 tcp exit $?"
run2 "${TCP[@]}" -- step_bench "${TINY[@]}" --tag tcp --mesh tp=2 --check -O "$D/tp2-tcp.h5" || fail "tp=2 tcp exit $?"
pass "step_bench single, dp=2 (2 rounds), tp=2, pp=2 1F1B and GPipe (shm), dp=2 and tp=2 (tcp) wrote 7 files"

# 1. One row per run (JSON): every column equal to the file; the time split is step/time_split's.
py "$R" "$D" --where tag=shm -f json -o "$WORK/runs.json" || fail "report json exit $?"
py - "$WORK/runs.json" "$MB_SRC/tests/scripts" <<'PY' || fail "per-run rows differ from the files"
import json, math, sys
sys.path.insert(0, sys.argv[2])
import h5truth
rows = json.load(open(sys.argv[1]))
assert len(rows) == 6, [r["file"] for r in rows]
tok = [r["tokens_per_s"] for r in rows]
assert tok == sorted(tok, reverse=True), tok
want_plan = {"single.h5": "single", "dp2.h5": "dp2", "tp2.h5": "tp2", "pp2.h5": "pp2 1f1b m=4",
             "gpipe.h5": "pp2 gpipe m=4"}
want_cross = {"single.h5": "none", "dp2.h5": "dp", "tp2.h5": "tp", "pp2.h5": "pp,embedding", "gpipe.h5": "pp,embedding"}
for r in rows:
    name = r["file"].rsplit("/", 1)[1]
    t = h5truth.step_truth(r["file"], r["run_id"])
    for k in ("step_time_median", "tokens_per_s", "mfu_measured_peak", "check", "ranks", "run_id", "status",
              "global_batch", "tokens_per_step"):
        assert r[k] == t[k], (name, k, r[k], t[k])
    assert r["plan"] == want_plan[name], (name, r["plan"])
    assert r["cross_nodes"] == want_cross[name] and sorted(r["cross_nodes"].split(",")) == \
        (t["cross_nodes"] or ["none"]), (name, r["cross_nodes"], t["cross_nodes"])
    # the split is the file's: every category's mean over ranks, no other time.* column
    got = {k[5:]: v for k, v in r.items() if k.startswith("time.") and v is not None}
    assert got.keys() == t["split"].keys(), (name, sorted(got), sorted(t["split"]))
    for c, v in t["split"].items():
        assert math.isclose(got[c], v, rel_tol=1e-12, abs_tol=1e-15), (name, c, got[c], v)
    parts = got["compute"] + got["bubble"] + got["other"] + sum(v for c, v in got.items() if c.startswith("exposed."))
    assert math.isclose(parts, got["step"], rel_tol=1e-9), (name, parts, got["step"])
    for rk, d in t["split_ranks"].items():  # and per rank, as docs/metrics.md promises
        p = d["compute"] + d["bubble"] + d["other"] + sum(v for c, v in d.items() if c.startswith("exposed."))
        assert math.isclose(p, d["step"], rel_tol=1e-9), (name, rk, d)
    assert ("exposed.dp" in t["split"]) == (name == "dp2.h5"), (name, t["split"])
    assert r["mem_peak"] == t["mem_peak"] and r["mem_peak_rank"] in t["mem_peak_ranks"], (name, r["mem_peak"], t)
    worst = max(t["mem_totals"], key=lambda k: (t["mem_totals"][k], -k))
    assert (r["mem_worst_rank"], r["mem_worst.total"]) == (worst, t["mem_totals"][worst]), (name, r["mem_worst_rank"])
    assert r.get("bubble_worst") == t.get("bubble_worst"), (name, r.get("bubble_worst"), t.get("bubble_worst"))
    assert (r.get("bubble_worst") is not None) == name.startswith(("pp2", "gpipe")), name
    assert "step_time_mean" not in r and not any(k.startswith("_") for k in r), sorted(r)
print("per-run rows:", [(r["plan"], r["global_batch"], round(r["tokens_per_s"])) for r in rows])
PY
pass "per-run rows (json): summary numbers, global batch, plan, nodes crossed, memory, and the time split as step/time_split stores it"

# 2. The plan ranking (--table plans): one row per plan and tag, rounds' median and spread.
py "$R" "$D" --where tag=shm --table plans -f json -o "$WORK/plans.json" || fail "report --table plans exit $?"
py - "$WORK/plans.json" "$MB_SRC/tests/scripts" "$D" <<'PY' || fail "plan ranking differs from the files"
import json, math, sys
sys.path.insert(0, sys.argv[2])
import h5truth
groups = json.load(open(sys.argv[1]))
D = sys.argv[3]
runs = {f: [h5truth.step_truth(f"{D}/{f}.h5", rid) for rid in h5truth.step_runs(f"{D}/{f}.h5")]
        for f in ("single", "dp2", "tp2", "pp2", "gpipe")}
plan_of = {"single": "single", "dp2": "dp2", "tp2": "tp2", "pp2": "pp2 1f1b m=4", "gpipe": "pp2 gpipe m=4"}
assert len(runs["dp2"]) == 2
assert sorted(g["plan"] for g in groups) == sorted(plan_of.values()), [g["plan"] for g in groups]
def med(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
def close(a, b):
    return math.isclose(a, b, rel_tol=1e-12)
want = {}
for f, ts in runs.items():
    if len(ts) >= 2:  # rounds: the median of the runs' medians, their min-max
        st = [t["step_time_median"] for t in ts]
        tk = [t["tokens_per_s"] for t in ts]
        w = dict(step=(med(st), min(st), max(st)), tok=(med(tk), min(tk), max(tk)),
                 spread=f"min-max over {len(ts)} rounds")
    else:  # one round: its median, its 2 steps' min-max (slowest rank per step)
        t = ts[0]
        lo, hi = min(t["step_samples"]), max(t["step_samples"])
        m = t["step_time_median"]
        w = dict(step=(m, lo, hi), tok=(t["tokens_per_s"], t["tokens_per_s"] * m / hi, t["tokens_per_s"] * m / lo),
                 spread=f"1 round: min-max over {len(t['step_samples'])}")
    w["split"] = {c: sum(t["split"][c] for t in ts) / len(ts) for c in ts[0]["split"]}
    w.update(rounds=len(ts), gb=ts[0]["global_batch"], run_ids=" ".join(t["run_id"] for t in ts))
    want[plan_of[f]] = w
for i, g in enumerate(groups):
    w = want[g["plan"]]
    assert g["position"] == i + 1 and g["rounds"] == w["rounds"] and g["global_batch"] == w["gb"], (g, w)
    assert g["run_ids"] == w["run_ids"], (g["run_ids"], w["run_ids"])
    assert all(close(a, b) for a, b in zip((g["step_time"], g["step_time_lo"], g["step_time_hi"]), w["step"])), (g, w)
    assert all(close(a, b) for a, b in zip((g["tokens_per_s"], g["tokens_per_s_lo"], g["tokens_per_s_hi"]), w["tok"])), \
        (g["plan"], g["tokens_per_s"], g["tokens_per_s_lo"], g["tokens_per_s_hi"], w["tok"])
    assert g["spread"] == w["spread"], (g["spread"], w["spread"])
    for c, v in w["split"].items():
        assert math.isclose(g[f"time.{c}"], v, rel_tol=1e-12, abs_tol=1e-15), (g["plan"], c)
# best median tokens/s first; separable when the next plan's tokens/s interval does not overlap
meds = [g["tokens_per_s"] for g in groups]
assert meds == sorted(meds, reverse=True), meds
for a, b in zip(groups, groups[1:]):
    overlap = not (a["tokens_per_s_lo"] > b["tokens_per_s_hi"] or b["tokens_per_s_lo"] > a["tokens_per_s_hi"])
    assert a["separable_next"] is (not overlap), (a["plan"], b["plan"], a["separable_next"])
assert groups[-1]["separable_next"] is None
print("ranking:", [(g["plan"], g["rounds"], round(g["tokens_per_s"]), g["separable_next"]) for g in groups])
PY
pass "plan ranking (--table plans): rounds' median and min-max (one round: its steps'), best median tokens/s first, separable flags"

# 3. The Markdown plan table: global batch, median (spread) to 2 significant digits of the spread.
py "$R" "$D" --where tag=shm -o "$WORK/plans.md" || fail "report md exit $?"
py - "$WORK/plans.md" "$WORK/plans.json" <<'PY' || fail "Markdown plan table: $(cat "$WORK/plans.md")"
import json, math, sys
text, groups = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
lines = [l for l in text.splitlines() if l.startswith("|")]
head = [c.strip() for c in lines[0].strip("|").split("|")]
for col in ("#", "plan", "ranks", "global batch", "tokens/s", "step (ms)", "spread", "vs next", "MFU",
            "exposed dp (ms)", "exposed tp (ms)", "exposed pp (ms)", "bubble (ms)", "bubble (worst stage)",
            "peak memory/rank", "straggler", "groups across nodes", "check"):
    assert col in head, (col, head)
cells = [dict(zip(head, (c.strip() for c in l.strip("|").split("|")))) for l in lines[2:2 + len(groups)]]
assert [c["plan"] for c in cells] == [g["plan"] for g in groups], cells
def place(lo, hi, med):  # 2 significant digits of the spread, never coarser than the median's first digit
    own = math.floor(math.log10(abs(med)))
    return min(math.floor(math.log10(hi - lo)) - 1, own) if hi > lo else own - 2
def num(v, p):
    return f"{round(v / 10 ** p) * 10 ** p:,.0f}" if p >= 0 else f"{v:,.{-p}f}"
for c, g in zip(cells, groups):
    assert c["global batch"] == str(g["global_batch"]), c
    p = place(g["tokens_per_s_lo"], g["tokens_per_s_hi"], g["tokens_per_s"])
    want = f"{num(g['tokens_per_s'], p)} ({num(g['tokens_per_s_lo'], p)}-{num(g['tokens_per_s_hi'], p)})"
    assert c["tokens/s"] == want, (c["tokens/s"], want)
    lo, hi, m = (1e3 * g[k] for k in ("step_time_lo", "step_time_hi", "step_time"))
    p = place(lo, hi, m)
    assert c["step (ms)"] == f"{num(m, p)} ({num(lo, p)}-{num(hi, p)})", (c["step (ms)"], m, lo, hi)
    assert c["spread"] == g["spread"], c
    ex = g.get("time.exposed.dp")
    assert c["exposed dp (ms)"] == ("-" if ex is None else num(1e3 * ex, p)), (c["exposed dp (ms)"], ex)
    assert c["vs next"] == {True: "separable", False: "not separable", None: "-"}[g["separable_next"]], c
gb = sorted({g["global_batch"] for g in groups})
assert f"- global batches differ ({', '.join(map(str, gb))} samples): the plans are ranked by tokens/s" in text, text
assert text.count("intervals overlap: not separable") == sum(g["separable_next"] is False for g in groups), text
pp = next(c for c in cells if c["plan"] == "pp2 gpipe m=4")
assert pp["bubble (worst stage)"].endswith(")") and "(rank " in pp["bubble (worst stage)"], pp
assert next(c for c in cells if c["plan"] == "dp2")["bubble (worst stage)"] == "-"
print("markdown:", [(c["plan"], c["global batch"], c["tokens/s"], c["vs next"]) for c in cells])
PY
pass "plan table (Markdown): global batch, median (spread) rounded to the spread, vs next, notes"

# 4. Files written before step/time_split: '-' and a note, never a re-derived split; no bar.
py - "$D/dp2.h5" "$D/pp2.h5" "$WORK/old" <<'PY' || fail "could not make the old-layout copies"
import shutil, sys
import h5py
for src in sys.argv[1:3]:
    dst = f"{sys.argv[3]}/{src.rsplit('/', 1)[1]}"
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        for run in f["runs"].values():
            del run["step/time_split"]
PY
cp "$D/tp2.h5" "$WORK/old/"
py "$R" "$WORK/old" -o "$WORK/old.md" || fail "report on old files exit $?"
py "$R" "$WORK/old" -f json -o "$WORK/old.json" || fail "report json on old files exit $?"
py - "$WORK/old.md" "$WORK/old.json" <<'PY' || fail "old files: $(cat "$WORK/old.md")"
import json, sys
text, rows = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
assert "3 run(s) written before step/time_split" in text, text
lines = text.split("\n\n")[1].splitlines()  # the plan table, not the per-TP one
head = [c.strip() for c in lines[0].strip("|").split("|")]
cells = {c["plan"]: c for c in (dict(zip(head, (x.strip() for x in l.strip("|").split("|")))) for l in lines[2:])}
assert sorted(cells) == ["dp2", "pp2 1f1b m=4", "tp2"], sorted(cells)
# no split stored: no exposed dp/pp column at all (only tp2 has one), and nothing derived in its place
assert "exposed dp (ms)" not in head and "exposed pp (ms)" not in head, head
assert cells["pp2 1f1b m=4"]["bubble (worst stage)"] == "-", cells["pp2 1f1b m=4"]
assert cells["tp2"]["exposed tp (ms)"] not in ("-", ""), cells["tp2"]
for r in rows:
    has = any(k.startswith("time.") and v is not None for k, v in r.items())
    assert has == (r["plan"] == "tp2"), (r["plan"], sorted(k for k in r if k.startswith("time.")))
    assert (r.get("bubble_worst") is None) or r["plan"] == "tp2", r["plan"]
print("old files: '-' and the note")
PY
py "$P" "$WORK/old" -o "$WORK/oldplots" > "$WORK/oldlist" 2> "$WORK/olderr" || fail "plot on old files exit $?"
grep -q "steps.png leaves out 2 plan(s) written before step/time_split" "$WORK/olderr" \
  && grep -qx "$WORK/oldplots/steps.png" "$WORK/oldlist" || fail "plot on old files: $(cat "$WORK/olderr" "$WORK/oldlist")"
pass "files without step/time_split: '-' and a note in the report, left out of steps.png (said on stderr)"

# 5. --compare: the same plans under shm and tcp, matched by plan (dp2's latest round under shm).
py "$R" "$D" --compare tag=shm tag=tcp -f json -o "$WORK/cmp.json" || fail "compare json exit $?"
py - "$WORK/cmp.json" "$MB_SRC/tests/scripts" "$D" <<'PY' || fail "compare rows"
import json, math, sys
sys.path.insert(0, sys.argv[2])
import h5truth
rows = json.load(open(sys.argv[1]))
assert sorted(r["plan"] for r in rows) == ["dp2", "tp2"], rows
for r in rows:
    f = f"{sys.argv[3]}/{r['plan']}.h5"
    a = h5truth.step_truth(f, h5truth.step_runs(f)[-1])
    b = h5truth.step_truth(f"{sys.argv[3]}/{r['plan']}-tcp.h5")
    assert (r["step_time_a"], r["step_time_b"]) == (a["step_time_median"], b["step_time_median"]), r
    assert (r["tokens_per_s_a"], r["tokens_per_s_b"]) == (a["tokens_per_s"], b["tokens_per_s"]), r
    assert math.isclose(r["ratio_t"], b["step_time_median"] / a["step_time_median"], rel_tol=1e-12), r
    d = r["plan"][:2]
    assert math.isclose(r[f"exposed_a.{d}"], a["exposed"][d], rel_tol=1e-12), (r, a["exposed"])
    assert math.isclose(r[f"exposed_b.{d}"], b["exposed"][d], rel_tol=1e-12), (r, b["exposed"])
print("compare:", [(r["plan"], round(r["ratio_t"], 3)) for r in rows])
PY
py "$R" "$D" --compare tag=shm tag=tcp -o "$WORK/cmp.md" || fail "compare md exit $?"
grep -q '| plan | step shm (ms) | step tcp (ms) | time tcp/shm | tokens/s shm | tokens/s tcp |' "$WORK/cmp.md" \
  && grep -q 'exposed dp shm (ms) | exposed dp tcp (ms)' "$WORK/cmp.md" \
  && grep -q '3 runs without a partner, 1 duplicates: latest run kept' "$WORK/cmp.md" \
  || fail "compare markdown: $(cat "$WORK/cmp.md")"
rc=0; py "$R" "$D" --compare tag=shm tag=nothing > /dev/null 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "compare without partners exit $rc, expected 1"
pass "--compare tag=shm tag=tcp: dp2 and tp2 matched, times, tokens/s, ratio and exposed time (time_split) equal the files"

# 6. plot: steps.png (per token, time_split's parts), memory.png (worst rank, by plan), scaling.png.
py "$P" "$D" --where tag=shm -o "$WORK/plots" > "$WORK/list" || fail "plot exit $?"
for f in memory steps scaling; do grep -qx "$WORK/plots/$f.png" "$WORK/list" || fail "no $f.png: $(cat "$WORK/list")"; done
py - "$MB_SRC/scripts" "$D" "$WORK/plots" "$MB_SRC/tests/scripts" <<'PY' || fail "plot contents"
import math, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.image as mpimg
import matplotlib.pyplot as plt
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[4])
import h5truth
from meshbench import plans, reader
D = sys.argv[2]
for f in ("steps", "scaling", "memory"):
    img = mpimg.imread(f"{sys.argv[3]}/{f}.png")
    assert img.shape[0] > 200 and img.shape[1] > 400, (f, img.shape)
from meshbench import plot_steps as mod  # scripts/plot's step figures
runs, _ = reader.load_steps([D])
rows = [r for r in plans.plan_rows(runs) if r["tag"] == "shm"]
truth = {}
for f, plan in (("single", "single"), ("dp2", "dp2"), ("tp2", "tp2"), ("pp2", "pp2 1f1b m=4"), ("gpipe", "pp2 gpipe m=4")):
    truth[plan] = [h5truth.step_truth(f"{D}/{f}.h5", rid) for rid in h5truth.step_runs(f"{D}/{f}.h5")]
saved = []
plt.Figure.savefig = lambda fig, *a, **k: saved.append(fig)

# steps.png: one bar per plan, the time split per token (mean over ranks and rounds / global batch tokens)
groups = [g for g in plans.plan_groups(rows) if g["tokens"] is not None]
mod.plot_step_bars(plt, groups, "/dev/null", "")
ax = saved[-1].axes[0]
assert "per token" in ax.get_ylabel(), ax.get_ylabel()
labels = [t.get_text() for t in ax.get_xticklabels()]
assert labels == [f"{g['plan']} gb={g['global_batch']}" for g in groups], labels  # global batches differ
segs = {}
for b in ax.patches:
    segs.setdefault(round(b.get_x() + b.get_width() / 2), []).append(b)
for x, g in enumerate(groups):
    ts = truth[g["plan"]]
    per_tok = lambda c: 1e6 * sum(t["split"].get(c, 0.0) for t in ts) / len(ts) / ts[0]["tokens_per_step"]  # noqa
    top = max(b.get_y() + b.get_height() for b in segs[x])
    assert math.isclose(top, per_tok("step"), rel_tol=1e-9), (g["plan"], top, per_tok("step"))
    comp = min(segs[x], key=lambda b: b.get_y())
    assert comp.get_y() == 0 and math.isclose(comp.get_height(), per_tok("compute"), rel_tol=1e-9), g["plan"]

# memory.png: one bar per plan, the worst rank's five parts, named; GPipe's worst is its last stage
mod.plot_memory(plt, rows, "/dev/null", "")
ax = saved[-1].axes[0]
labels = [t.get_text() for t in ax.get_xticklabels()]
tops = {}
for b in ax.patches:
    x = round(b.get_x() + b.get_width() / 2)
    tops[x] = max(tops.get(x, 0.0), b.get_y() + b.get_height())
scale = 1 << 10 if "KiB" in ax.get_ylabel() else 1 << 20
assert len(labels) == 5, labels
for x, lab in enumerate(labels):
    plan = lab.split(" gb=")[0]
    t = truth[plan][-1]
    worst = max(t["mem_totals"], key=lambda k: (t["mem_totals"][k], -k))
    assert lab.endswith(f"\n(rank {worst})"), lab
    assert math.isclose(tops[x], t["mem_totals"][worst] / scale, rel_tol=1e-12), (lab, tops[x])
g = truth["pp2 gpipe m=4"][0]["mem_totals"]
assert g[1] > g[0], g  # GPipe: the last stage holds the most here; rank 0's bar would hide it
lab = next(l for l in labels if l.startswith("pp2 gpipe m=4"))
assert lab.endswith("(rank 1)"), lab

# scaling.png: single and dp2 (the median of its two rounds)
fams = mod.scaling_families(groups, "dp")
assert list(fams) == [(rows[0]["model"], "shm", "single")], fams
mod.plot_scaling(plt, fams, "dp", "/dev/null", "")
line = saved[-1].axes[0].get_lines()[0]
dp = sorted(t["tokens_per_s"] for t in truth["dp2"])
assert list(line.get_xdata()) == [1, 2], line.get_xdata()
ys = list(line.get_ydata())
assert ys[0] == truth["single"][0]["tokens_per_s"] and math.isclose(ys[1], sum(dp) / 2, rel_tol=1e-12), ys
print("steps.png per token, memory.png:", labels, "scaling: single -> dp2")
PY
pass "plot: steps.png bars are step/time_split per token by plan and global batch; memory.png the worst rank (GPipe: 1) by plan; scaling.png over rounds"

# 7. --timeline: GPipe and 1F1B on one shared time axis, stages as rows, memory in MiB.
py "$P" --timeline "$D" --where tag=shm -o "$WORK/tl" > "$WORK/tl.list" || fail "--timeline exit $?"
[[ "$(cat "$WORK/tl.list")" == "$WORK/tl/timeline.png" ]] || fail "--timeline wrote $(cat "$WORK/tl.list")"
py - "$MB_SRC/scripts" "$D" "$WORK/tl3" <<'PY' || fail "timeline contents"
import importlib.machinery, importlib.util, math, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import h5py
sys.path.insert(0, sys.argv[1])
from meshbench import plans, reader
loader = importlib.machinery.SourceFileLoader("mb_plot", sys.argv[1] + "/plot")
spec = importlib.util.spec_from_loader("mb_plot", loader); mod = importlib.util.module_from_spec(spec)
loader.exec_module(mod)
saved = []
plt.Figure.savefig = lambda fig, *a, **k: saved.append(fig)
assert mod.main(["--timeline", f"{sys.argv[2]}/gpipe.h5", f"{sys.argv[2]}/pp2.h5", "-o", sys.argv[3]]) == 0
fig = saved[-1]
axes = fig.axes
assert len(axes) == 3, len(axes)  # two runs' stages, one memory panel
titles = [a.get_title(loc="left") for a in axes[:2]]
assert titles[0].startswith("pp2 gpipe m=4") and titles[1].startswith("pp2 1f1b m=4"), titles
assert all(a.get_shared_x_axes().joined(axes[0], a) for a in axes), "not one shared time axis"
assert [t.get_text() for t in axes[0].get_yticklabels()] == ["stage 0 (rank 0)", "stage 1 (rank 1)"]
mem = axes[2]
assert "MiB" in mem.get_ylabel(), mem.get_ylabel()
lines = {l.get_label(): l for l in mem.get_lines()}
for name, plan in (("gpipe", "pp2 gpipe m=4"), ("pp2", "pp2 1f1b m=4")):
    with h5py.File(f"{sys.argv[2]}/{name}.h5", "r") as f:
        st = next(iter(f["runs"].values()))["step"]
        slots = st["activation_slots"][()]
        last = int(st["passes"][()]["step"].max())
        for r in (0, 1):
            want = [float(s["bytes"]) / (1 << 20) for s in sorted((s for s in slots if s["rank"] == r and s["step"] == last),
                                                                   key=lambda s: s["t"])]
            got = list(lines[f"{plan}: rank {r}"].get_ydata())
            assert got == want, (name, r, got, want)
    assert max(max(lines[f"{plan}: rank {r}"].get_ydata()) for r in (0, 1)) > 0
print("timeline: 2 runs on one axis, memory in MiB equal to step/activation_slots bytes")
PY
rc=0; py "$P" --timeline "$D" --where tag=nothing -o "$WORK/tl2" > /dev/null 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "--timeline with nothing selected exit $rc, expected 1"
pass "--timeline: GPipe and 1F1B on one shared time axis, a row per stage, stored activations in MiB from the file"

# 8. Failed points: a run stopped by --time-limit (checked before each step: it times the steps
# that started within 1 ms, one or a few, status timeout) and a sweep point record of a run that exited 2
# (scripts/sweep's <out>/points/<id>.json, written here in its format) are rows with their status.
S="$WORK/sweep"
rc=0; run2 "${SHM[@]}" -- step_bench "${SHAPE[@]}" --steps 400 --warmup 0 --mesh dp=2 --tag shm --time-limit 0.001 \
  -O "$S/dp2-short.h5" || rc=$?
[[ $rc -eq 3 ]] || fail "--time-limit run exit $rc, expected 3"
cmd=("$MB_MPIEXEC" -n 2 "$MB_BIN/step_bench" "${TINY[@]}" --mesh tp=4 --tag shm -O "$S/tp4.h5")
rc=0; "${cmd[@]}" > "$S/tp4.log" 2>&1 || rc=$?
[[ $rc -eq 2 ]] || fail "tp=4 at 2 ranks exit $rc, expected 2"
py - "$S/points/tp4.json" "$S/tp4.h5" "${cmd[@]}" <<'PY'
import json, shlex, sys
json.dump({"id": "tp4", "point": "step ranks=2", "result": sys.argv[2], "status": "bad usage", "rc": 2, "ranks": 2,
           "cmd": " ".join(shlex.quote(a) for a in sys.argv[3:])}, open(sys.argv[1], "w"))
PY
py "$R" "$S" -o "$WORK/failed.md" || fail "report on failed points exit $?"
grep -q '| status |$' "$WORK/failed.md" && grep -q '^| 2 | tp4 | 2 |.*| bad usage |$' "$WORK/failed.md" \
  && grep -q '^| 1 | dp2 | 2 | 4 | [0-9,]\+.* | 1 round: [^|]* | - | .* | dp | off | timeout |$' "$WORK/failed.md" \
  || fail "failed rows: $(cat "$WORK/failed.md")"
[[ $(grep -c '^| [12] | dp2 \|^| [12] | tp4 ' "$WORK/failed.md") -eq 2 ]] || fail "expected two rows: $(cat "$WORK/failed.md")"
pass "a timed-out run and an exit-2 sweep point are rows with their status (timeout, bad usage)"
