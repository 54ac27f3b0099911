#!/usr/bin/env bash
# scripts/report's plan table, --compare for step runs and scripts/plot's steps.png and
# scaling.png (issue 14) on tiny step_bench files written here: single (1 rank), dp=2, tp=2
# (--check), pp=2 1F1B m=4, all with --ranks-per-node 1 so that every group crosses a "node",
# under shared memory (tag shm) and dp=2, tp=2 again over TCP on loopback (tag tcp). Asserts
# the order by tokens/s, every column against the files (read with h5py by h5truth.py), the
# groups-across-nodes column, the compare rows and ratio, the plots' bars and curve, and that a
# timed-out run and a sweep point that exited 2 appear as rows with their status.
. "$(dirname "$0")/lib.bash"
R="$MB_SRC/scripts/report"
P="$MB_SRC/scripts/plot"
[[ -x "$MB_BIN/step_bench" ]] || fail "no step_bench in $MB_BIN (MESHBENCH_WITH_ENGINE=OFF?)"
SHAPE=(--layers 2 --hidden 32 --heads 2 --seq 16 --vocab 64 --micro-batch 2 --threads 1 --quiet --ranks-per-node 1)
TINY=("${SHAPE[@]}" --steps 2 --warmup 1)
SHM=(UCX_TLS=self,sm)
TCP=(UCX_TLS=self,tcp UCX_NET_DEVICES=lo)
D="$WORK/plans"
mkdir -p "$D" "$WORK/sweep/points"
timeout "$RUN_TIMEOUT" env "${SHM[@]}" "$MB_MPIEXEC" -n 1 "$MB_BIN/step_bench" "${TINY[@]}" --tag shm -O "$D/single.h5" \
  > "$WORK/single.log" 2>&1 || fail "single exit $?: $(tail -5 "$WORK/single.log")"
run2 "${SHM[@]}" -- step_bench "${TINY[@]}" --tag shm --mesh dp=2 -O "$D/dp2.h5" || fail "dp=2 exit $?"
run2 "${SHM[@]}" -- step_bench "${TINY[@]}" --tag shm --mesh tp=2 --check -O "$D/tp2.h5" || fail "tp=2 exit $?"
run2 "${SHM[@]}" -- step_bench "${TINY[@]}" --tag shm --mesh pp=2 --micro-batches 4 -O "$D/pp2.h5" || fail "pp=2 exit $?"
run2 "${TCP[@]}" -- step_bench "${TINY[@]}" --tag tcp --mesh dp=2 -O "$D/dp2-tcp.h5" || fail "dp=2 tcp exit $?"
run2 "${TCP[@]}" -- step_bench "${TINY[@]}" --tag tcp --mesh tp=2 --check -O "$D/tp2-tcp.h5" || fail "tp=2 tcp exit $?"
pass "step_bench single, dp=2, tp=2, pp=2 (shm) and dp=2, tp=2 (tcp) wrote 6 files"

# The plan table as JSON: best tokens/s first, every column equal to the file.
py "$R" "$D" --where tag=shm -f json -o "$WORK/plans.json" || fail "report json exit $?"
py - "$WORK/plans.json" "$MB_SRC/tests/scripts" <<'PY' || fail "plan table differs from the files"
import json, math, sys
import h5py
sys.path.insert(0, sys.argv[2])
import h5truth
rows = json.load(open(sys.argv[1]))
assert len(rows) == 4, [r["file"] for r in rows]
tok = [r["tokens_per_s"] for r in rows]
assert tok == sorted(tok, reverse=True), tok
want_plan = {"single.h5": "single", "dp2.h5": "dp2", "tp2.h5": "tp2", "pp2.h5": "pp2 1f1b m=4"}
want_cross = {"single.h5": "none", "dp2.h5": "dp", "tp2.h5": "tp", "pp2.h5": "pp,embedding"}
for r in rows:
    name = r["file"].rsplit("/", 1)[1]
    t = h5truth.step_truth(r["file"])
    for k in ("step_time_median", "tokens_per_s", "mfu_measured_peak", "check", "ranks", "run_id", "status"):
        assert r[k] == t[k], (name, k, r[k], t[k])
    assert r["plan"] == want_plan[name], (name, r["plan"])
    assert r["cross_nodes"] == want_cross[name] and sorted(r["cross_nodes"].split(",")) == \
        (t["cross_nodes"] or ["none"]), (name, r["cross_nodes"], t["cross_nodes"])
    got = {k.split(".", 2)[2]: v for k, v in r.items() if k.startswith("time.exposed.") and v is not None}
    assert got.keys() == t["exposed"].keys(), (name, got, t["exposed"])
    for d, v in t["exposed"].items():
        assert math.isclose(got[d], v, rel_tol=1e-12), (name, d, got[d], v)
    assert r["mem_peak"] == t["mem_peak"] and r["mem_peak_rank"] in t["mem_peak_ranks"], (name, r["mem_peak"], t)
    assert r.get("bubble_worst") == t.get("bubble_worst"), (name, r.get("bubble_worst"), t.get("bubble_worst"))
    parts = r["time.compute"] + r["time.bubble"] + sum(got.values())
    # compute is the rest of the step (never below 0): the parts add up to the step time
    mean = float(h5py.File(r["file"], "r")["runs"][r["run_id"]]["step/step_times"][()].max(axis=1).mean())
    assert r["step_time_mean"] == mean, (name, r["step_time_mean"], mean)
    assert r["time.compute"] >= 0 and (r["time.compute"] == 0 or math.isclose(parts, mean, rel_tol=1e-9)), (name, parts)
    assert math.isclose(r["time.bubble"], t.get("bubble_s", 0.0), rel_tol=1e-12), (name, r["time.bubble"], t)
    assert (r["time.bubble"] > 0) == (name == "pp2.h5"), (name, r["time.bubble"])
assert {r["file"].rsplit("/", 1)[1]: r["check"] for r in rows}["tp2.h5"] == "pass"
print("plan table:", [(r["plan"], round(r["tokens_per_s"]), r["cross_nodes"]) for r in rows])
PY
pass "plan table (json): best tokens/s first; times, exposed per dim, bubble, peak memory over ranks, nodes crossed, check equal the files"

py "$R" "$D" --where tag=shm -o "$WORK/plans.md" || fail "report md exit $?"
py - "$WORK/plans.md" "$WORK/plans.json" <<'PY' || fail "Markdown plan table: $(cat "$WORK/plans.md")"
import json, sys
text, rows = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
lines = [l for l in text.splitlines() if l.startswith("|")]
head = [c.strip() for c in lines[0].strip("|").split("|")]
for col in ("plan", "ranks", "step (ms)", "tokens/s", "MFU", "exposed dp (ms)", "exposed tp (ms)", "exposed pp (ms)",
            "bubble (worst stage)", "peak memory/rank", "straggler", "groups across nodes", "check"):
    assert col in head, (col, head)
cells = [dict(zip(head, (c.strip() for c in l.strip("|").split("|")))) for l in lines[2:2 + len(rows)]]
assert [c["plan"] for c in cells] == [r["plan"] for r in rows], cells
for c, r in zip(cells, rows):
    assert c["step (ms)"] == f"{r['step_time_median'] * 1e3:.3f}", (c, r["step_time_median"])
    assert c["groups across nodes"] == r["cross_nodes"], c
    assert c["peak memory/rank"].endswith(f"(rank {r['mem_peak_rank']})"), c
    assert c["exposed dp (ms)"] == (f"{r['time.exposed.dp'] * 1e3:.3f}" if r.get("time.exposed.dp") is not None else "-"), c
pp = next(c for c in cells if c["plan"].startswith("pp2"))
worst = max(r.get("bubble_worst") or 0 for r in rows)
assert pp["bubble (worst stage)"].startswith(f"{100 * worst:.1f}% (rank "), pp
assert next(c for c in cells if c["plan"] == "dp2")["bubble (worst stage)"] == "-"
print("markdown:", [(c["plan"], c["groups across nodes"]) for c in cells])
PY
pass "plan table (Markdown): the same order and values, 'groups across nodes' per plan"

# --compare: the same plans under shm and tcp, matched by plan.
py "$R" "$D" --compare tag=shm tag=tcp -f json -o "$WORK/cmp.json" || fail "compare json exit $?"
py - "$WORK/cmp.json" "$MB_SRC/tests/scripts" "$D" <<'PY' || fail "compare rows"
import json, math, sys
sys.path.insert(0, sys.argv[2])
import h5truth
rows = json.load(open(sys.argv[1]))
assert sorted(r["plan"] for r in rows) == ["dp2", "tp2"], rows
for r in rows:
    a = h5truth.step_truth(f"{sys.argv[3]}/{r['plan']}.h5")
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
  && grep -q 'exposed dp shm (ms) | exposed dp tcp (ms)' "$WORK/cmp.md" && grep -q '2 runs without a partner' "$WORK/cmp.md" \
  || fail "compare markdown: $(cat "$WORK/cmp.md")"
rc=0; py "$R" "$D" --compare tag=shm tag=nothing > /dev/null 2>&1 || rc=$?
[[ $rc -eq 1 ]] || fail "compare without partners exit $rc, expected 1"
pass "--compare tag=shm tag=tcp: dp2 and tp2 matched, times, tokens/s, ratio and exposed time equal the files"

# plot: steps.png (one stacked bar per plan, height = step time) and scaling.png (dp family).
py "$P" "$D" --where tag=shm -o "$WORK/plots" > "$WORK/list" || fail "plot exit $?"
for f in memory steps scaling; do grep -qx "$WORK/plots/$f.png" "$WORK/list" || fail "no $f.png: $(cat "$WORK/list")"; done
py - "$MB_SRC/scripts" "$D" "$WORK/plots" <<'PY' || fail "plot contents"
import importlib.machinery, importlib.util, math, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.image as mpimg
import matplotlib.pyplot as plt
sys.path.insert(0, sys.argv[1])
from meshbench import plans, reader
for f in ("steps", "scaling"):
    img = mpimg.imread(f"{sys.argv[3]}/{f}.png")
    assert img.shape[0] > 200 and img.shape[1] > 400, (f, img.shape)
loader = importlib.machinery.SourceFileLoader("mb_plot", sys.argv[1] + "/plot")
spec = importlib.util.spec_from_loader("mb_plot", loader); mod = importlib.util.module_from_spec(spec)
loader.exec_module(mod)
runs, _ = reader.load_steps([sys.argv[2]])
rows = [r for r in plans.plan_rows(runs) if r["tag"] == "shm"]
saved = []
plt.Figure.savefig = lambda fig, *a, **k: saved.append(fig)
mod.plot_step_bars(plt, rows, "/dev/null", "")
ax = saved[-1].axes[0]
tops = {}
for b in ax.patches:
    x = round(b.get_x() + b.get_width() / 2)
    tops[x] = max(tops.get(x, 0.0), b.get_y() + b.get_height())
best = plans.sort_by_throughput(rows)
assert [t.get_text() for t in ax.get_xticklabels()] == [r["plan"] for r in best], ax.get_xticklabels()
for x, r in enumerate(best):
    assert math.isclose(tops[x], 1e3 * r["step_time_mean"], rel_tol=1e-9), (r["plan"], tops[x])
fams = mod.scaling_families(rows, "dp")
assert list(fams) == [(rows[0]["model"], "shm", "single")], fams
mod.plot_scaling(plt, fams, "dp", "/dev/null", "")
line = saved[-1].axes[0].get_lines()[0]
byname = {r["plan"]: r for r in rows}
assert list(line.get_xdata()) == [1, 2], line.get_xdata()
assert list(line.get_ydata()) == [byname["single"]["tokens_per_s"], byname["dp2"]["tokens_per_s"]], line.get_ydata()
print("steps.png bar tops (ms):", [round(tops[x], 3) for x in sorted(tops)], "scaling: single -> dp2")
PY
pass "plot: steps.png bars add up to each plan's mean step time, best first; scaling.png: tokens/s of single and dp=2"

# Failed points: a run stopped by --time-limit (checked after each step: without warm-up it
# times exactly one step, status timeout) and a sweep point record of a run that exited 2
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
grep -q '| status |$' "$WORK/failed.md" && grep -q '^| tp4 | 2 |.*| bad usage |$' "$WORK/failed.md" \
  && grep -q '^| dp2 | 2 | [0-9.]\+ | [0-9.,e+]\+ | .* | dp | off | timeout |$' "$WORK/failed.md" \
  || fail "failed rows: $(cat "$WORK/failed.md")"
[[ $(grep -c '^| dp2 \|^| tp4 ' "$WORK/failed.md") -eq 2 ]] || fail "expected two rows: $(cat "$WORK/failed.md")"
pass "a timed-out run and an exit-2 sweep point are rows with their status (timeout, bad usage)"
