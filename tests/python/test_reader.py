"""meshbench.reader, tables, spread, plans and names on small files written here with h5py in
docs/results.md's layout (h5files.py), so every expected value is known exactly. Not a test
of the binaries' numbers (tests/scripts/report_steps.sh and report_plans.sh read real step_bench
files).
"""
import json
import math
import os
import subprocess

import pytest
from h5files import collective_file, step_file
from meshbench import names, plans, reader, spread, tables


@pytest.fixture
def coll(tmp_path):
    path = str(tmp_path / "coll.h5")
    collective_file(path)
    return path


def test_rows_equal_the_file(coll):
    rows = reader.read_collectives(coll, with_samples=True)
    assert [r["bytes"] for r in rows] == [8, 1024]
    r = rows[1]
    assert (r["collective"], r["group"], r["group_size"], r["span"]) == ("all_reduce", "tp", 2, "intra")
    assert (r["t_median"], r["busbw"], r["slowest_rank"], r["total_bytes"]) == (3e-6, 0.34, 0, 2048)
    # old files: iters and warm-up from the attributes, not judged
    assert (r["iters"], r["warmup_calls"], r["warmup_converged"]) == (7, 3, -1)
    assert r["t_median_max"] == 3e-6
    assert r["samples"].tolist() == [[6, 7], [8, 9], [10, 11]]
    assert set(reader.COLLECTIVE_FIELDS) - set(rows[0]) - {"samples"} == set()


def test_no_steps_in_a_collective_file(coll):
    assert reader.read_steps(coll) == []


def test_load_reports_unreadable_files(coll, tmp_path):
    bad = str(tmp_path / "not-hdf5.h5")
    open(bad, "w").write("no")
    rows, badl = reader.load_collectives([coll, bad, str(tmp_path / "missing.h5")], quiet=True)
    assert len(rows) == 2
    assert badl == [bad, str(tmp_path / "missing.h5")]


def test_status(coll):
    assert reader.run_statuses(coll) == {"r1": "ok"}


@pytest.fixture
def zero(tmp_path):
    paths = [str(tmp_path / f"z{z}.h5") for z in (0, 3)]
    step_file(paths[0], 0)
    step_file(paths[1], 3, steps=1, rank0_opt=400.0)
    return paths


def test_run_dict(zero):
    (run,) = reader.read_steps(zero[0])
    assert run["attrs"]["degrees"]["dp"] == 2
    assert run["phase_names"] == ["forward", "backward", "grad_sync", "optimizer"]
    assert run["step_times"].shape == (2, 2)
    assert run["summary"]["check"] == "pass"
    assert run["summary"]["step_time_median"] == 0.25
    assert len(run["comm"]) == 3
    assert len(run["memory"]) == 14
    assert run["run"]["mesh"] == {"dp": 2}


def test_step_table(zero):
    runs, bad = reader.load_steps(zero)
    assert bad == []
    t = {r["zero_stage"]: r for r in reader.step_table(runs)}
    z0, z3 = t[0], t[3]
    assert (z0["strategy"], z0["degrees"], z0["dp"], z0["microbatches"], z0["steps"]) == ("data_parallel", "dp=2", 2, 2, 2)
    # bytes per rank and step: the largest rank's total / timed steps
    assert z0["bytes.dp.reduce_scatter"] == 4400 / 2
    assert z0["bytes.dp.all_gather"] == 1000 / 2
    assert z3["bytes.dp.reduce_scatter"] == 4400 / 1
    # memory: rank 0's, and the totals of the five parts (analytic NaN: activations has none)
    assert (z0["mem.optimizer"], z3["mem.optimizer"]) == (800.0, 400.0)
    assert z0["mem.total"] == 400 + 200 + 800 + 50 + 10
    assert math.isnan(z0["mem_analytic.total"])
    assert z0["mem.engine_peak"] == 1500.0
    assert (z0["bytes_match"], z0["check"], z0["tokens_per_s"]) == (1, "pass", 1000.0)


def test_filters_span_both_tables(zero):
    runs, _ = reader.load_steps(zero)
    t = reader.step_table(runs)
    assert [r["zero_stage"] for r in tables.apply_filters(t, ["strategy=zero3"])] == [3]
    assert len(tables.apply_filters(t, ["mem.optimizer>=500"])) == 1
    assert tables.apply_filters(t, ["collective=all_reduce"]) == []
    with pytest.raises(ValueError):
        tables.parse_filter("nosuch=1")


def test_time_split_is_read_not_derived(zero, tmp_path):
    """plan_rows: time.<category> is step/time_split's mean over ranks; a file without it has
    no time.* column at all (nothing re-derived from comm or pipeline)."""
    old = str(tmp_path / "old.h5")
    step_file(old, 0, split=False)
    (new_row,) = plans.plan_rows(reader.read_steps(zero[0]))
    (old_row,) = plans.plan_rows(reader.read_steps(old))
    want = {"time.step": 0.30, "time.compute": 0.175, "time.exposed.dp": 0.075, "time.bubble": 0.0,
            "time.other": 0.05}
    got = {k: v for k, v in new_row.items() if k.startswith("time.")}
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-15)
    assert [k for k in old_row if k.startswith("time.")] == []
    assert new_row["tokens_per_step"] == 8 * 16
    assert new_row["_step_samples"] == [0.2, 0.4]
    assert "step_time_mean" not in new_row
    assert "exposed.dp" not in new_row  # the reader's old second definition is gone
    # the worst rank's memory: rank 1 (its optimizer holds 1 byte more)
    assert (new_row["mem_worst_rank"], new_row["mem_worst.total"]) == (1, 400 + 200 + 801 + 50 + 10)


def test_median_like_the_binaries():
    assert spread.median([3, 1, 2]) == 2
    assert spread.median([4, 1, 3, 2]) == 2.5
    assert math.isnan(spread.median([]))


def test_interval():
    # below 6 samples no 95% interval of the median exists: min-max
    assert spread.interval([5, 1, 3]) == (1, 5, "min-max over 3")
    assert spread.interval([2.0]) == (2.0, 2.0, "no spread (1 sample)")
    # order statistics: n = 6 -> [x(1), x(6)] (coverage 1 - 2/64); n = 20 -> [x(6), x(15)]
    assert spread.interval([6, 5, 4, 3, 2, 1]) == (1, 6, "95% CI of the median over 6")
    assert spread.interval(list(range(1, 21)))[:2] == (6, 15)
    assert spread.interval([1, float("nan"), 3])[:2] == (1, 3)
    assert spread._ci_rank(100) == 40  # the textbook table: x(40), x(61)


def test_printing_to_the_spread():
    m = spread.Measure(12345.0, 11900.0, 13100.0, 3, "r")
    assert spread.fmt_measure(m) == "12,300 (11,900-13,100)"
    assert spread.fmt_measure(spread.Measure(5.31e-3, 5.12e-3, 5.63e-3, 3, "r"), 1e3) == "5.31 (5.12-5.63)"
    assert spread.fmt_measure(spread.Measure(0.5152, 0.5152, 0.5152, 1, "r")) == "0.515"  # no spread
    assert spread.fmt_measure(spread.Measure(1.3, 0.01, 11000, 1, "r")) == "1 (0-11,000)"
    inv = spread.Measure(0.5, 0.4, 0.8, 2, "r").inverse(100.0)
    assert (inv.med, inv.lo, inv.hi) == (200.0, 125.0, 250.0)


def test_rounds_rank_and_separate():
    base = {"model": "m", "ranks": 2, "global_batch": 8, "tag": "shm", "status": "ok", "check": "off"}
    rows = [dict(base, plan="a", run_id=f"a{i}", start_time=f"t{i}", step_time_median=s, tokens_per_s=t,
                 mfu_measured_peak=0.1, **{"time.step": s, "time.compute": s / 2, "time.other": s / 2})
            for i, (s, t) in enumerate(((1.0, 100.0), (0.8, 125.0), (1.25, 80.0)))]
    rows.append(dict(base, plan="b", run_id="b0", step_time_median=0.5, tokens_per_s=200.0, mfu_measured_peak=0.2,
                     _step_samples=[0.45, 0.5, 0.6]))
    rows.append(dict(base, plan="c", run_id="c0", step_time_median=1.1, tokens_per_s=90.0, mfu_measured_peak=0.1,
                     _step_samples=[1.1]))
    rows.append(dict(base, plan="d", run_id="d0", status="bad usage"))  # a failed point: no numbers
    g = plans.plan_groups(rows)
    assert [x["plan"] for x in g] == ["b", "a", "c", "d"]
    b, a, c, d = g
    assert (a["rounds"], a["step"].med, a["step"].lo, a["step"].hi) == (3, 1.0, 0.8, 1.25)
    assert (a["tokens"].med, a["tokens"].lo, a["tokens"].hi) == (100.0, 80.0, 125.0)
    assert a["step"].rule == "min-max over 3 rounds"
    assert a["time.step"] == 1.0 and a["time.compute"] == 0.5  # the split: the median over rounds, as the step
    # one round: its steps' min-max, tokens/s turned over it
    assert (b["rounds"], b["step"].lo, b["step"].hi, b["step"].rule) == (1, 0.45, 0.6, "1 round: min-max over 3")
    assert b["tokens"].lo == pytest.approx(200 * 0.5 / 0.6)
    assert (d["rounds"], d["step"], d["status"]) == (0, None, "bad usage")
    # b [167, 222] vs a [80, 125]: separable; a vs c (90, no spread): not; c vs d: no numbers
    assert [x["separable"] for x in g] == [True, False, None, None]


def test_sizes():
    assert tables.parse_size("64K") == 65536
    assert tables.fmt_size(1 << 20) == "1M"
    assert tables.fmt_size(1000) == "1000"


def test_label_follows_the_order():
    deg = {"dp": 2, "tp": 2, "pp": 2, "cp": 1, "ep": 1}
    assert plans.plan_label(deg, "tp-cp-ep-dp-pp", 1, 0, "1f1b", 4) == "tp2 x dp2 x pp2 1f1b m=4"
    assert plans.plan_label(deg, "tp-pp-dp", 2, 1, "interleaved", 8, True) == "tp2 x pp2 x dp2 interleaved vpp=2 zero1 m=8 sp"
    assert plans.plan_label({"dp": 1}, "", 1, 0, "accumulate", 1) == "single"
    assert plans.plan_label({"dp": 4}, "", 1, 0, "accumulate", 1) == "dp4"  # no schedule without pp


def test_cross_nodes():
    run = {"spans": {"world": {"inter"}, "tp": {"intra"}, "dp": {"inter"}, "pp": {"intra", "inter"}}}
    assert plans.cross_nodes(run, "tp-cp-ep-dp-pp") == "dp,pp"
    assert plans.cross_nodes(run, "pp-dp-tp") == "pp,dp"
    assert plans.cross_nodes({"spans": {"world": {"intra"}, "tp": {"intra"}}}, "") == "none"
    assert plans.cross_nodes({"spans": {}}, "") == "?"


def test_family_and_order():
    rows = [{"plan": "a", "tokens_per_s": 5.0}, {"plan": "b", "tokens_per_s": None},
            {"plan": "c", "tokens_per_s": 9.0}]
    assert [r["plan"] for r in plans.sort_by_throughput(rows)] == ["c", "a", "b"]
    one = {"dp": 1, "tp": 2, "pp": 1, "cp": 1, "ep": 1, "order": "tp-cp-ep-dp-pp", "model": "m", "tag": "shm"}
    assert plans.family(dict(one, dp=4)) == plans.family(one)
    assert plans.family(one)[2] == "tp2"
    assert plans.family(dict(one, tp=1)) != plans.family(one)


def test_failed_point_row():
    rec = {"id": "p1", "status": "timeout", "ranks": 8, "result": "/x/p1.h5",
           "cmd": "mpiexec -n 8 /b/step_bench --mesh tp=2,pp=2,dp=2 --order tp-pp-dp --schedule gpipe "
                  "--micro-batches 4 --zero 1 --tag tcp -O /x/p1.h5"}
    r = plans.point_row(rec)
    assert (r["plan"], r["status"], r["ranks"], r["tag"], r["dp"], r["tp"], r["pp"]) == \
        ("tp2 x pp2 x dp2 gpipe zero1 m=4", "timeout", 8, "tcp", 2, 2, 2)


def test_from_mesh_info(real_bin):
    out = subprocess.run([os.path.join(real_bin, "mesh_info"), "--list-json"], capture_output=True, text=True,
                         check=True)
    doc = json.loads(out.stdout)
    n = names.load(real_bin)
    for k in names.KEYS:
        assert n[k] == doc[k]
    assert n["collectives"] == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv",
                                "all_to_allv"]
    assert "step" in n["bench_binaries"]
    assert n["mesh_dims"] == ["tp", "cp", "ep", "dp", "pp", "etp", "edp"]
    assert "dp-cp" in n["group_kinds"]
    assert "embedding" in n["group_kinds"]
    for c in n["collectives"]:  # every listed collective has its binary built
        assert os.access(os.path.join(real_bin, c + "_bench"), os.X_OK), c


def test_missing_binary_is_a_clear_error(tmp_path):
    empty = str(tmp_path / "nobin")
    os.makedirs(empty, exist_ok=True)
    with pytest.raises(names.NamesError, match="mesh_info is missing"):
        names.load(empty)


def test_attention_and_recomputation_mark_the_strategy(tmp_path):
    # a run's attention and recomputation where not the defaults (flash, none) join its label,
    # so no table or plot mixes them; a file that does not record them (before 2026-12-03) has none
    import h5py
    paths = []
    for name, attrs in (("plain", {}), ("flash", {"attention": "flash", "recompute": "none"}),
                        ("naive", {"attention": "naive", "recompute": "selective"}),
                        ("full2", {"attention": "flash", "recompute": "full", "recompute_layers": 2})):
        p = tmp_path / f"{name}.h5"
        step_file(p)
        with h5py.File(p, "a") as f:
            for k, v in attrs.items():
                f["runs/s0/step"].attrs[k] = v
        paths.append(str(p))
    runs, bad = reader.load_steps(paths)
    assert bad == []
    labels = [r["strategy"] for r in reader.step_table(runs)]
    assert labels == ["data_parallel", "data_parallel", "data_parallel [attention naive] [recompute selective]",
                      "data_parallel [recompute full x2]"], labels
