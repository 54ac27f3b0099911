#!/usr/bin/python3
"""tests/scripts/reader_unit.py: unit tests of scripts/meshbench (reader, tables, names) on
small files written here with h5py in results/README.md's layout, so every expected value is
known exactly. Run by reader_unit.sh (argv: MB_SRC MB_BIN WORKDIR); not a test of the binaries'
numbers (report_steps.sh and report_plans.sh read real step_bench files).
"""
import json
import math
import os
import subprocess
import sys
import unittest

SRC, BIN, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(SRC, "scripts"))
import h5py  # noqa: E402
import numpy as np  # noqa: E402
from meshbench import names, plans, reader, spread, tables  # noqa: E402

ROW_T = np.dtype([("bytes", "<u8"), ("count", "<u8"), ("dtype", "S8"), ("redop", "S8"), ("inplace", "u1"),
                  ("root", "<i4"), ("t_median", "<f8"), ("t_min", "<f8"), ("t_mean", "<f8"), ("t_p99", "<f8"),
                  ("t_first", "<f8"), ("algbw", "<f8"), ("busbw", "<f8"), ("wrong", "<u8"), ("slowest_rank", "<i4")])
SIZES_T = np.dtype([("bytes", "<u8"), ("count", "<u8"), ("send_bytes_per_rank", "<u8"),
                    ("recv_bytes_per_rank", "<u8"), ("total_bytes", "<u8")])
GROUPS_T = np.dtype([("dim", "S16"), ("id", "<i4"), ("size", "<i4"), ("ranks", "S256"),
                     ("nodes_spanned", "<i4"), ("span", "S8")])
COMM_T = np.dtype([("rank", "<i4"), ("dim", "S8"), ("kind", "S24"), ("calls", "<u8"), ("bytes", "<u8"),
                   ("wire_bytes", "<f8"), ("busy_s", "<f8"), ("exposed_s", "<f8")])
MEM_T = np.dtype([("rank", "<i4"), ("category", "S24"), ("measured_bytes", "<f8"), ("analytic_bytes", "<f8")])
SUMMARY_T = np.dtype([("step_time_median", "<f8"), ("tokens_per_s", "<f8"), ("mfu_measured_peak", "<f8"),
                      ("exposed_comm_fraction", "<f8"), ("bytes_match", "u1"), ("straggler_rank", "<i4"),
                      ("check", "S8")])


def run_attrs(g, **kw):
    base = {"binary": "all_reduce_bench", "tag": "shm", "backend": "mpi", "mem": "host", "status": "ok",
            "world_size": 2, "nodes": 1, "ranks_per_node": 2, "oversubscribed": 0, "iters": 7,
            "mesh": "{}", "start_time": "2026-12-01T00:00:00Z"}
    base.update(kw)
    for k, v in base.items():
        g.attrs[k] = v


def collective_file(path):
    """Two sizes of all_reduce in the old layout (no iters/warmup columns) and a tp group."""
    with h5py.File(path, "w") as f:
        run = f.create_group("runs/r1")
        run_attrs(run, mesh='{"tp":2}')
        run["topology/groups"] = np.array([(b"tp", 0, 2, b"0,1", 1, b"intra")], GROUPS_T)
        g = run.create_group("collectives/all_reduce/float-sum-out-of-place-tp")
        for k, v in {"collective": "all_reduce", "placement": "out-of-place", "group": "tp", "warmup": 3}.items():
            g.attrs[k] = v
        g["summary"] = np.array([(8, 2, b"float", b"sum", 0, -1, 1e-6, 9e-7, 1.1e-6, 2e-6, 5e-6, 0.008, 0.008, 0, 1),
                                 (1024, 256, b"float", b"sum", 0, -1, 3e-6, 2e-6, 3e-6, 4e-6, 9e-6, 0.34, 0.34, 0, 0)],
                                ROW_T)
        g["sizes"] = np.array([(8, 2, 8, 8, 16), (1024, 256, 1024, 1024, 2048)], SIZES_T)
        g["samples"] = np.arange(2 * 3 * 2, dtype=float).reshape(2, 3, 2)


SPLIT_T = np.dtype([("rank", "<i4"), ("category", "S24"), ("seconds", "<f8")])
# Per rank and timed step (s): step = compute + exposed.dp + bubble + other on each rank.
SPLIT = [(0, b"step", 0.25), (0, b"compute", 0.15), (0, b"exposed.dp", 0.05), (0, b"bubble", 0.0), (0, b"other", 0.05),
         (1, b"step", 0.35), (1, b"compute", 0.20), (1, b"exposed.dp", 0.10), (1, b"bubble", 0.0), (1, b"other", 0.05)]


def step_file(path, stage, steps=2, rank0_opt=800.0, split=True):
    """A 2-rank step run: comm totals over `steps` steps, rank 1 moving more than rank 0; with
    split, step/time_split (SPLIT), else the layout before it."""
    with h5py.File(path, "w") as f:
        run = f.create_group(f"runs/s{stage}")
        run_attrs(run, binary="step_bench", mesh='{"dp":2}')
        s = run.create_group("step")
        s.attrs["strategy"] = f"zero{stage}" if stage else "data_parallel"
        s.attrs["zero_stage"] = stage
        s.attrs["degrees"] = json.dumps({"dp": 2, "tp": 1, "pp": 1, "cp": 1, "ep": 1})
        s.attrs["microbatches"] = 2
        s.attrs["global_batch"] = 8
        s.attrs["phase_names"] = json.dumps(["forward", "backward", "grad_sync", "optimizer"])
        s["step_times"] = np.array([[0.1, 0.2], [0.3, 0.4]][:steps])
        s["phases"] = np.zeros((steps, 2, 4))
        s["loss"] = np.array([4.0, 3.5][:steps])
        s["comm"] = np.array([(0, b"dp", b"reduce_scatter", 4, 4000, 2000.0, 0.01, 0.005),
                              (1, b"dp", b"reduce_scatter", 4, 4400, 2200.0, 0.01, 0.005),
                              (0, b"dp", b"all_gather", 2, 1000, 500.0, 0.01, 0.0)], COMM_T)
        mem = []
        for r in (0, 1):
            for c, m, a in (("params", 400.0, 400.0), ("grads", 200.0, 200.0), ("optimizer", rank0_opt + r, 800.0),
                            ("activations", 50.0, float("nan")), ("buffers", 10.0, 10.0),
                            ("engine_peak", 1500.0, float("nan")), ("process_peak_rss", 9e6, float("nan"))):
                mem.append((r, c.encode(), m, a))
        s["memory"] = np.array(mem, MEM_T)
        s["summary"] = np.array([(0.25, 1000.0, 0.12, 0.3, 1, 1, b"pass")], SUMMARY_T)
        s.attrs["seq"] = 16
        if split:
            s["time_split"] = np.array(SPLIT, SPLIT_T)


class Collectives(unittest.TestCase):
    def setUp(self):
        self.path = os.path.join(WORK, "coll.h5")
        collective_file(self.path)

    def test_rows_equal_the_file(self):
        rows = reader.read_collectives(self.path, with_samples=True)
        self.assertEqual([r["bytes"] for r in rows], [8, 1024])
        r = rows[1]
        self.assertEqual((r["collective"], r["group"], r["group_size"], r["span"]), ("all_reduce", "tp", 2, "intra"))
        self.assertEqual((r["t_median"], r["busbw"], r["slowest_rank"], r["total_bytes"]), (3e-6, 0.34, 0, 2048))
        # old files: iters and warm-up from the attributes, not judged
        self.assertEqual((r["iters"], r["warmup_calls"], r["warmup_converged"]), (7, 3, -1))
        self.assertEqual(r["t_median_max"], 3e-6)
        self.assertEqual(r["samples"].tolist(), [[6, 7], [8, 9], [10, 11]])
        self.assertEqual(set(reader.COLLECTIVE_FIELDS) - set(rows[0]) - {"samples"}, set())

    def test_no_steps_in_a_collective_file(self):
        self.assertEqual(reader.read_steps(self.path), [])

    def test_load_reports_unreadable_files(self):
        bad = os.path.join(WORK, "not-hdf5.h5")
        open(bad, "w").write("no")
        rows, badl = reader.load_collectives([self.path, bad, os.path.join(WORK, "missing.h5")], quiet=True)
        self.assertEqual(len(rows), 2)
        self.assertEqual(badl, [bad, os.path.join(WORK, "missing.h5")])

    def test_status(self):
        self.assertEqual(reader.run_statuses(self.path), {"r1": "ok"})


class Steps(unittest.TestCase):
    def setUp(self):
        self.paths = [os.path.join(WORK, f"z{z}.h5") for z in (0, 3)]
        step_file(self.paths[0], 0)
        step_file(self.paths[1], 3, steps=1, rank0_opt=400.0)

    def test_run_dict(self):
        (run,) = reader.read_steps(self.paths[0])
        self.assertEqual(run["attrs"]["degrees"]["dp"], 2)
        self.assertEqual(run["phase_names"], ["forward", "backward", "grad_sync", "optimizer"])
        self.assertEqual(run["step_times"].shape, (2, 2))
        self.assertEqual(run["summary"]["check"], "pass")
        self.assertEqual(run["summary"]["step_time_median"], 0.25)
        self.assertEqual(len(run["comm"]), 3)
        self.assertEqual(len(run["memory"]), 14)
        self.assertEqual(run["run"]["mesh"], {"dp": 2})

    def test_step_table(self):
        runs, bad = reader.load_steps(self.paths)
        self.assertEqual(bad, [])
        t = {r["zero_stage"]: r for r in reader.step_table(runs)}
        z0, z3 = t[0], t[3]
        self.assertEqual((z0["strategy"], z0["degrees"], z0["dp"], z0["microbatches"], z0["steps"]),
                         ("data_parallel", "dp=2", 2, 2, 2))
        # bytes per rank and step: the largest rank's total / timed steps
        self.assertEqual(z0["bytes.dp.reduce_scatter"], 4400 / 2)
        self.assertEqual(z0["bytes.dp.all_gather"], 1000 / 2)
        self.assertEqual(z3["bytes.dp.reduce_scatter"], 4400 / 1)
        # memory: rank 0's, and the totals of the five parts (analytic NaN: activations has none)
        self.assertEqual((z0["mem.optimizer"], z3["mem.optimizer"]), (800.0, 400.0))
        self.assertEqual(z0["mem.total"], 400 + 200 + 800 + 50 + 10)
        self.assertTrue(math.isnan(z0["mem_analytic.total"]))
        self.assertEqual(z0["mem.engine_peak"], 1500.0)
        self.assertEqual((z0["bytes_match"], z0["check"], z0["tokens_per_s"]), (1, "pass", 1000.0))

    def test_filters_span_both_tables(self):
        runs, _ = reader.load_steps(self.paths)
        t = reader.step_table(runs)
        self.assertEqual([r["zero_stage"] for r in tables.apply_filters(t, ["strategy=zero3"])], [3])
        self.assertEqual(len(tables.apply_filters(t, ["mem.optimizer>=500"])), 1)
        self.assertEqual(tables.apply_filters(t, ["collective=all_reduce"]), [])
        with self.assertRaises(ValueError):
            tables.parse_filter("nosuch=1")


    def test_time_split_is_read_not_derived(self):
        """plan_rows: time.<category> is step/time_split's mean over ranks; a file without it has
        no time.* column at all (nothing re-derived from comm or pipeline)."""
        old = os.path.join(WORK, "old.h5")
        step_file(old, 0, split=False)
        (new_row,) = plans.plan_rows(reader.read_steps(self.paths[0]))
        (old_row,) = plans.plan_rows(reader.read_steps(old))
        want = {"time.step": 0.30, "time.compute": 0.175, "time.exposed.dp": 0.075, "time.bubble": 0.0,
                "time.other": 0.05}
        got = {k: v for k, v in new_row.items() if k.startswith("time.")}
        self.assertEqual(got.keys(), want.keys())
        for k, v in want.items():
            self.assertAlmostEqual(got[k], v, places=15)
        self.assertEqual([k for k in old_row if k.startswith("time.")], [])
        self.assertEqual(new_row["tokens_per_step"], 8 * 16)
        self.assertEqual(new_row["_step_samples"], [0.2, 0.4])
        self.assertNotIn("step_time_mean", new_row)
        self.assertNotIn("exposed.dp", new_row)  # the reader's old second definition is gone
        # the worst rank's memory: rank 1 (its optimizer holds 1 byte more)
        self.assertEqual((new_row["mem_worst_rank"], new_row["mem_worst.total"]), (1, 400 + 200 + 801 + 50 + 10))


class Spread(unittest.TestCase):
    def test_median_like_the_binaries(self):
        self.assertEqual(spread.median([3, 1, 2]), 2)
        self.assertEqual(spread.median([4, 1, 3, 2]), 2.5)
        self.assertTrue(math.isnan(spread.median([])))

    def test_interval(self):
        # below 6 samples no 95% interval of the median exists: min-max
        self.assertEqual(spread.interval([5, 1, 3]), (1, 5, "min-max over 3"))
        self.assertEqual(spread.interval([2.0]), (2.0, 2.0, "no spread (1 sample)"))
        # order statistics: n = 6 -> [x(1), x(6)] (coverage 1 - 2/64); n = 20 -> [x(6), x(15)]
        self.assertEqual(spread.interval([6, 5, 4, 3, 2, 1]), (1, 6, "95% CI of the median over 6"))
        self.assertEqual(spread.interval(list(range(1, 21)))[:2], (6, 15))
        self.assertEqual(spread.interval([1, float("nan"), 3])[:2], (1, 3))
        self.assertEqual(spread._ci_rank(100), 40)  # the textbook table: x(40), x(61)

    def test_printing_to_the_spread(self):
        m = spread.Measure(12345.0, 11900.0, 13100.0, 3, "r")
        self.assertEqual(spread.fmt_measure(m), "12,300 (11,900-13,100)")
        self.assertEqual(spread.fmt_measure(spread.Measure(5.31e-3, 5.12e-3, 5.63e-3, 3, "r"), 1e3), "5.31 (5.12-5.63)")
        self.assertEqual(spread.fmt_measure(spread.Measure(0.5152, 0.5152, 0.5152, 1, "r")), "0.515")  # no spread
        self.assertEqual(spread.fmt_measure(spread.Measure(1.3, 0.01, 11000, 1, "r")), "1 (0-11,000)")
        inv = spread.Measure(0.5, 0.4, 0.8, 2, "r").inverse(100.0)
        self.assertEqual((inv.med, inv.lo, inv.hi), (200.0, 125.0, 250.0))

    def test_rounds_rank_and_separate(self):
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
        self.assertEqual([x["plan"] for x in g], ["b", "a", "c", "d"])
        b, a, c, d = g
        self.assertEqual((a["rounds"], a["step"].med, a["step"].lo, a["step"].hi), (3, 1.0, 0.8, 1.25))
        self.assertEqual((a["tokens"].med, a["tokens"].lo, a["tokens"].hi), (100.0, 80.0, 125.0))
        self.assertEqual(a["step"].rule, "min-max over 3 rounds")
        self.assertAlmostEqual(a["time.step"], (1.0 + 0.8 + 1.25) / 3, places=15)
        # one round: its steps' min-max, tokens/s turned over it
        self.assertEqual((b["rounds"], b["step"].lo, b["step"].hi, b["step"].rule), (1, 0.45, 0.6, "1 round: min-max over 3"))
        self.assertAlmostEqual(b["tokens"].lo, 200 * 0.5 / 0.6)
        self.assertEqual((d["rounds"], d["step"], d["status"]), (0, None, "bad usage"))
        # b [167, 222] vs a [80, 125]: separable; a vs c (90, no spread): not; c vs d: no numbers
        self.assertEqual([x["separable"] for x in g], [True, False, None, None])


class Tables(unittest.TestCase):
    def test_sizes(self):
        self.assertEqual(tables.parse_size("64K"), 65536)
        self.assertEqual(tables.fmt_size(1 << 20), "1M")
        self.assertEqual(tables.fmt_size(1000), "1000")


class Plans(unittest.TestCase):
    def test_label_follows_the_order(self):
        deg = {"dp": 2, "tp": 2, "pp": 2, "cp": 1, "ep": 1}
        self.assertEqual(plans.plan_label(deg, "tp-cp-ep-dp-pp", 1, 0, "1f1b", 4), "tp2 x dp2 x pp2 1f1b m=4")
        self.assertEqual(plans.plan_label(deg, "tp-pp-dp", 2, 1, "interleaved", 8, True),
                         "tp2 x pp2 x dp2 interleaved vpp=2 zero1 m=8 sp")
        self.assertEqual(plans.plan_label({"dp": 1}, "", 1, 0, "accumulate", 1), "single")
        self.assertEqual(plans.plan_label({"dp": 4}, "", 1, 0, "accumulate", 1), "dp4")  # no schedule without pp

    def test_cross_nodes(self):
        run = {"spans": {"world": {"inter"}, "tp": {"intra"}, "dp": {"inter"}, "pp": {"intra", "inter"}}}
        self.assertEqual(plans.cross_nodes(run, "tp-cp-ep-dp-pp"), "dp,pp")
        self.assertEqual(plans.cross_nodes(run, "pp-dp-tp"), "pp,dp")
        self.assertEqual(plans.cross_nodes({"spans": {"world": {"intra"}, "tp": {"intra"}}}, ""), "none")
        self.assertEqual(plans.cross_nodes({"spans": {}}, ""), "?")

    def test_family_and_order(self):
        rows = [{"plan": "a", "tokens_per_s": 5.0}, {"plan": "b", "tokens_per_s": None},
                {"plan": "c", "tokens_per_s": 9.0}]
        self.assertEqual([r["plan"] for r in plans.sort_by_throughput(rows)], ["c", "a", "b"])
        one = {"dp": 1, "tp": 2, "pp": 1, "cp": 1, "ep": 1, "order": "tp-cp-ep-dp-pp", "model": "m", "tag": "shm"}
        self.assertEqual(plans.family(dict(one, dp=4)), plans.family(one))
        self.assertEqual(plans.family(one)[2], "tp2")
        self.assertNotEqual(plans.family(dict(one, tp=1)), plans.family(one))

    def test_failed_point_row(self):
        rec = {"id": "p1", "status": "timeout", "ranks": 8, "result": "/x/p1.h5",
               "cmd": "mpiexec -n 8 /b/step_bench --mesh tp=2,pp=2,dp=2 --order tp-pp-dp --schedule gpipe "
                      "--micro-batches 4 --zero 1 --tag tcp -O /x/p1.h5"}
        r = plans.point_row(rec)
        self.assertEqual((r["plan"], r["status"], r["ranks"], r["tag"], r["dp"], r["tp"], r["pp"]),
                         ("tp2 x pp2 x dp2 gpipe zero1 m=4", "timeout", 8, "tcp", 2, 2, 2))


class Names(unittest.TestCase):
    def test_from_mesh_info(self):
        out = subprocess.run([os.path.join(BIN, "mesh_info"), "--list-json"], capture_output=True, text=True,
                             check=True)
        doc = json.loads(out.stdout)
        n = names.load(BIN)
        for k in names.KEYS:
            self.assertEqual(n[k], doc[k])
        self.assertEqual(n["collectives"], ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                            "broadcast", "sendrecv", "all_to_allv"])
        self.assertIn("step", n["bench_binaries"])
        self.assertEqual(n["mesh_dims"], ["tp", "cp", "ep", "dp", "pp", "etp", "edp"])
        self.assertIn("dp-cp", n["group_kinds"])
        self.assertIn("embedding", n["group_kinds"])
        for c in n["collectives"]:  # every listed collective has its binary built
            self.assertTrue(os.access(os.path.join(BIN, c + "_bench"), os.X_OK), c)

    def test_missing_binary_is_a_clear_error(self):
        empty = os.path.join(WORK, "nobin")
        os.makedirs(empty, exist_ok=True)
        with self.assertRaisesRegex(names.NamesError, "mesh_info is missing"):
            names.load(empty)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
