"""scripts/report's modules on small files written here (h5files.py): the collective table,
--compare, --expect-order, the step table, the plan ranking with its spread and separability,
--baseline verdicts, and the exit codes of scripts/report's main."""
import csv
import io
import json
import math

import h5py
import h5files
import pytest
from meshbench import plans, reader, regression, report_collectives, report_plans, report_steps, spread


def run(cli, capsys, *argv):
    """(exit code, stdout, stderr) of scripts/report's main(argv)."""
    rc = cli["report"].main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def fabrics(tmp_path):
    """shm.h5 and tcp.h5: the same two all_reduce points, tcp twice as fast (a suspect order)."""
    shm, tcp = tmp_path / "shm.h5", tmp_path / "tcp.h5"
    h5files.collective_file(str(shm), tag="shm")
    h5files.collective_file(str(tcp), tag="tcp", scale=0.5)
    return shm, tcp


# dp2 in 3 rounds, tp2 in 2, pp2 in 1 (its steps +-10%): (median step s, tokens/s) per round
ROUNDS = {"dp2": [(0.100, 1280.0), (0.110, 1163.6), (0.090, 1422.2)], "tp2": [(0.200, 640.0), (0.210, 609.5)],
          "pp2": [(0.105, 1219.0)]}


def write_plans(folder, scale=1.0, tag="shm"):
    for plan, rs in ROUNDS.items():
        for i, (m, t) in enumerate(rs):
            h5files.plan_round(str(folder / f"{plan}-{i}.h5"), plan, f"{plan}.{i}", m * scale, t / scale,
                               f"2026-12-01T00:{i:02d}:00Z", tag=tag, spread_frac=0.1 if plan == "pp2" else 0.0)
    return folder


def test_collective_markdown_and_csv(cli, capsys, fabrics):
    rc, out, _ = run(cli, capsys, *fabrics)
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "## all_reduce" and lines[1] == ""
    assert lines[2].startswith("| binary | tag | backend | ranks | nodes | group | placement | size | time (us)")
    assert lines[4] == "| all_reduce_bench | shm | mpi | 2 | 1 | tp | out-of-place | 8 | 1.00 | 0.008 | 0.008 | 2.00 | 1 | 0 |"
    assert lines[7] == "| all_reduce_bench | tcp | mpi | 2 | 1 | tp | out-of-place | 1K | 1.50 | 0.68 | 0.68 | 2.00 | 0 | 0 |"
    rc, out, _ = run(cli, capsys, fabrics[0], "-f", "csv", "--where", "bytes>=1K")
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert (row["bytes"], float(row["t_median"]), float(row["busbw"]), row["group"]) == ("1024", 3e-6, 0.34, "tp")


def test_compare_joins_the_points(cli, capsys, fabrics):
    rc, out, _ = run(cli, capsys, *fabrics, "--compare", "tag=shm", "tag=tcp")
    assert rc == 0
    assert out.splitlines()[0] == ("| collective | size | time shm (us) | time tcp (us) | time tcp/shm | busbw shm | "
                                   "busbw tcp | busbw shm/tcp | wrong |")
    assert "| all_reduce | 1K | 3.00 | 1.50 | 0.5 | 0.34 | 0.68 | 0.5 | 0 |" in out
    assert "- all_reduce: time tcp/shm = 0.5x at 8, 0.5x at 1K" in out
    rows, _ = reader.load_collectives([str(p) for p in fabrics])
    joined, varying, unmatched, dups, differ = report_collectives.compare(rows, "tag=shm", "tag=tcp")
    assert [(r["bytes"], r["ratio_t"], r["ratio_busbw"]) for r in joined] == [(8, 0.5, 0.5), (1024, 0.5, 0.5)]
    assert (varying, unmatched, dups, differ) == (["collective", "bytes"], 0, 0, [])


def test_expect_order_flags_a_faster_slow_fabric(cli, capsys, fabrics):
    rc, out, _ = run(cli, capsys, *fabrics, "--expect-order", "tag=shm,tcp")
    assert rc == 0  # a note, not a failure
    assert "2 point(s) break the fabric order tag=shm,tcp:" in out
    assert ("- suspect: tag=tcp reads 2.00x faster than tag=shm at all_reduce out-of-place 8 (0.50 vs 1.00 us)"
            in out)
    rc, out, _ = run(cli, capsys, *fabrics, "--expect-order", "tag=tcp,shm")
    assert "- fabric order tag=tcp,shm: no point where a slower one reads more than 20% faster" in out
    rc, _, err = run(cli, capsys, *fabrics, "--expect-order", "tag=shm")
    assert rc == 2 and "--expect-order takes COLUMN=FASTEST,...,SLOWEST with 2 or more values" in err


def test_exit_codes(cli, capsys, fabrics, tmp_path):
    rc, _, err = run(cli, capsys, fabrics[0], "--where", "tag=none")
    assert (rc, err) == (1, "report: no rows in 1 path(s) after filters\n")
    rc, _, err = run(cli, capsys, fabrics[0], "--where", "nosuch=1")
    assert rc == 2 and err.startswith("report: unknown column 'nosuch'")
    bad = tmp_path / "bad.h5"
    bad.write_text("no")
    rc, out, err = run(cli, capsys, fabrics[0], bad)
    assert rc == 1 and "size" in out and f"report: cannot read {bad}" in err
    rc, _, err = run(cli, capsys, fabrics[0], "--threshold", "5%")
    assert (rc, err) == (2, "report: --threshold needs --baseline OLD\n")


def test_zero_stages_side_by_side(cli, capsys, tmp_path):
    h5files.step_file(str(tmp_path / "z0.h5"), 0)
    h5files.step_file(str(tmp_path / "z3.h5"), 3, steps=1, rank0_opt=400.0)
    rc, out, _ = run(cli, capsys, tmp_path)
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "| | data_parallel | zero3 |"
    assert "| optimizer (rank 0) | 800 B | 400 B |" in lines
    assert "| optimizer analytic | 800 B | 800 B |" in lines
    assert "| dp reduce_scatter (bytes/rank/step) | 2.148 KiB | 4.297 KiB |" in lines
    runs, _ = reader.load_steps([str(tmp_path)])
    assert report_steps.zero_side_by_side(plans.plan_rows(runs))


def test_step_cells_follow_the_spread():
    r = {"step_time_median": 0.0123456, "tokens_per_s": 12345.6, "_step_samples": [0.0120, 0.0123, 0.0131]}
    # min-max 12.0-13.1 ms: 2 significant digits of the 1.1 ms width -> 0.1 ms
    assert report_steps.step_cell("step_time_median", r) == "12.3"
    assert report_steps.run_tokens_cell(r) == "12,300"
    assert report_steps.step_human("exposed_comm_fraction", 0.257) == "25.7%"
    assert report_steps.step_human("bytes_match", 0) == "NO"


def test_plan_ranking_spread_and_separability(tmp_path):
    runs, _ = reader.load_steps([str(write_plans(tmp_path))])
    groups = report_plans.rank_groups(plans.plan_rows(runs))
    assert [(g["position"], g["plan"], g["rounds"]) for g in groups] == [(1, "dp2 m=2", 3), (2, "pp2 m=2", 1),
                                                                          (3, "tp2 m=2", 2)]
    dp, pp, tp = groups
    assert (dp["tokens"].med, dp["tokens"].lo, dp["tokens"].hi) == (1280.0, 1163.6, 1422.2)
    assert (dp["step"].med, dp["step"].rule) == (0.1, "min-max over 3 rounds")
    assert (tp["tokens"].med, tp["step"].med) == ((640.0 + 609.5) / 2, pytest.approx(0.205))
    # one round: the spread of its steps, and tokens/s turned over it
    assert pp["step"].rule == "1 round: min-max over 3"
    assert pp["tokens"].lo == pytest.approx(1219.0 * 0.105 / 0.1155)
    # dp2 [1164, 1422] overlaps pp2 [1108, 1354]; pp2 lies above tp2 [610, 640]
    assert [g["separable"] for g in groups] == [False, True, None]
    table = report_plans.plan_markdown(plans.plan_rows(runs)).splitlines()
    assert table[4] == ("| 1 | dp2 m=2 | 2 | 8 | 1,280 (1,160-1,420) | 100 (90-110) | min-max over 3 rounds | "
                        "not separable | 12.0% | 75 | - | 1.465 KiB (rank 0) | 1 | ? | pass |")
    assert "- #1 dp2 m=2 and #2 pp2 m=2: their tokens/s intervals overlap: not separable" in "\n".join(table)


def test_plan_table_csv(cli, capsys, tmp_path):
    rc, out, _ = run(cli, capsys, write_plans(tmp_path), "--table", "plans", "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and [r["plan"] for r in rows] == ["dp2 m=2", "pp2 m=2", "tp2 m=2"]
    assert (rows[0]["run_ids"], rows[0]["tokens_per_s_lo"], rows[0]["separable_next"]) == ("dp2.0 dp2.1 dp2.2",
                                                                                           "1163.6", "False")
    assert float(rows[2]["step_time"]) == pytest.approx(0.205)


def test_step_compare_pairs_plans(cli, capsys, tmp_path):
    write_plans(tmp_path, tag="shm")
    slow = tmp_path / "tcp"
    slow.mkdir()
    write_plans(slow, scale=2.0, tag="tcp")
    rc, out, _ = run(cli, capsys, tmp_path, "--compare", "tag=shm", "tag=tcp", "-f", "json")
    rows = json.loads(out)
    assert rc == 0 and sorted(r["plan"] for r in rows) == ["dp2 m=2", "pp2 m=2", "tp2 m=2"]
    assert {round(r["ratio_t"], 12) for r in rows} == {2.0}  # each plan's latest round on each side
    rc, out, _ = run(cli, capsys, tmp_path, "--compare", "tag=shm", "tag=tcp")
    assert "| plan | step shm (ms) | step tcp (ms) | time tcp/shm |" in out
    assert "(0 runs without a partner, 6 duplicates: latest run kept)" in out


@pytest.mark.parametrize("old, new, verdict", [
    ((1.0, 0.9, 1.1), (1.5, 1.4, 1.6), "slower"),            # +50%, new above old's interval
    ((1.0, 0.9, 1.1), (1.2, 1.05, 1.3), "within noise"),     # +20%, overlapping
    ((1.0, 0.9, 1.1), (1.03, 0.95, 1.1), "within threshold"),
    ((1.0, 0.9, 1.1), (0.5, 0.45, 0.55), "faster"),
    ((1.0, 0.9, 1.1), (0.8, 0.7, 0.95), "within noise"),
])
def test_verdicts(old, new, verdict):
    o, n = spread.Measure(*old, 3, "r"), spread.Measure(*new, 3, "r")
    ratio, v = regression.verdict(o, n, 0.05)
    assert v == verdict
    assert (ratio.med, ratio.lo, ratio.hi) == (new[0] / old[0], new[1] / old[2], new[2] / old[1])


def test_threshold_parsing():
    assert regression.parse_threshold(" 7.5 %") == 0.075
    for bad in ("5", "-5%", "nan%", "x"):
        with pytest.raises(ValueError, match="--threshold takes a percentage such as 5%"):
            regression.parse_threshold(bad)


def test_baseline_exit_codes(cli, capsys, tmp_path):
    old, same, slow = (tmp_path / n for n in ("old", "same", "slow"))
    for d in (old, same, slow):
        d.mkdir()
    write_plans(old)
    write_plans(same, scale=1.02)
    write_plans(slow, scale=1.5)
    rc, out, _ = run(cli, capsys, same, "--baseline", old)
    assert rc == 0 and "0 of 3 match(es) slower beyond 5% and outside the noise: exit 0" in out
    rc, out, _ = run(cli, capsys, slow, "--baseline", old, "--threshold", "10%")
    assert rc == 1 and "- slower: dp2 m=2 (shm): time x1.5" in out
    rows = {r["plan"]: r for r in json.loads(run(cli, capsys, slow, "--baseline", old, "-f", "json")[1])}
    # dp2: 3 rounds each; its ratio's interval is new lo / old hi .. new hi / old lo
    assert rows["dp2 m=2"]["verdict"] == "slower"
    assert rows["dp2 m=2"]["ratio_lo"] == pytest.approx(0.135 / 0.11)
    assert rows["tp2 m=2"]["verdict"] == "slower" and rows["pp2 m=2"]["verdict"] == "slower"
    rc, _, err = run(cli, capsys, slow, "--baseline", tmp_path / "none")
    assert rc == 2 and "no such file or folder" in err
    rc, _, err = run(cli, capsys, slow, "--baseline", old, "--threshold", "5")
    assert rc == 2 and "--threshold takes a percentage" in err
    rc, _, err = run(cli, capsys, slow, "--baseline", old, "--where", "tag=tcp")
    assert rc == 1 and "nothing to judge" in err


def test_collective_rounds_measure(fabrics):
    rows, _ = reader.load_collectives([str(fabrics[0])], with_samples=True)
    # one round: the spread of its iterations, the statistic over ranks its t_median uses (max)
    assert regression.iteration_times(rows[0]) == [1.0, 3.0, 5.0]
    m = regression.collective_measures(rows)
    assert [(k[-1], v[1].med, v[1].lo, v[1].hi) for k, v in m.items()] == [(8, 1e-6, 1.0, 5.0), (1024, 3e-6, 7.0, 11.0)]
    assert not math.isnan(m[next(iter(m))][1].lo)


# --- predicted against measured (step_bench --predict) ------------------------------------
def predicted_files(tmp_path):
    """dp2 in 2 rounds (each measured 0.25 s, 1000 tokens/s; exposed dp = the split's mean over
    ranks, (0.05 + 0.10) / 2 = 0.075 s) predicted 0.3 s, 800 tokens/s, exposed dp 0.06 s and tp
    0 (extrapolated); a pp=2 GPipe run (0.25 s, 1000 tokens/s, bubble_measured 0.25) predicted
    0.2 s, 1250 tokens/s, bubble 0.3, exposed pp 0.2 ms; a tp2 run without a prediction."""
    for i in (0, 1):
        p = str(tmp_path / f"dp{i}.h5")
        h5files.step_file(p, run_id=f"dp.{i}", start=f"2026-12-01T00:0{i}:00Z")
        h5files.predicted(p, f"dp.{i}", 0.3, 800.0, exposed={"dp": 0.06, "tp": 0.0}, extrapolated=1,
                          what="all_reduce over 2 ranks at 512M (measured up to 16M)")
    pp = str(tmp_path / "pp.h5")
    h5files.pipeline_file(pp)
    h5files.predicted(pp, "pp", 0.2, 1250.0, bubble=0.3, exposed={"pp": 0.0002}, bubble_measured=0.25)
    h5files.plan_round(str(tmp_path / "tp.h5"), "tp2", "tp", 0.2, 640.0, "2026-12-01T00:05:00Z")
    return tmp_path


def test_predicted_against_measured(cli, capsys, tmp_path):
    folder = predicted_files(tmp_path)
    rc, out, _ = run(cli, capsys, folder)
    assert rc == 0
    block = out[out.index("Predicted against measured"):]
    # Plans in the plan table's order (dp2 and pp2 tie at 1000 tokens/s: by name); tp2 has no
    # prediction; numbers to the plan table's precision (its step time's spread); a quantity
    # one side lacks reads '-'; the extrapolated prediction is marked.
    assert block.splitlines()[2:12] == [
        "| # | plan | quantity | predicted | measured | error |",
        "|---:|---|---|---:|---:|---:|",
        "| 1 | dp2 m=2 | step time (ms) | 300 * | 250 | +20.0% |",
        "|   |   | tokens/s | 800 * | 1,000 | -20.0% |",
        "|   |   | exposed dp (ms) | 60 * | 75 | -20.0% |",
        "| 2 | pp2 gpipe m=2 | step time (ms) | 200 | 250 | -20.0% |",
        "|   |   | tokens/s | 1,250 | 1,000 | +25.0% |",
        "|   |   | bubble | 30.0% | 25.0% | +20.0% |",
        "|   |   | exposed dp (ms) | - | 75 | - |",
        "|   |   | exposed pp (ms) | 0 | - | - |"]
    assert "tp2" not in block.split("\n\n")[1]
    assert ("- #1 dp2 m=2: * extrapolated (beyond the calibration's measured sizes or shapes): all_reduce over 2 "
            "ranks at 512M (measured up to 16M)") in block
    # --table predicted: the rows alone, as CSV with full precision.
    rc, out, _ = run(cli, capsys, folder, "--table", "predicted", "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and [(r["position"], r["quantity"]) for r in rows] == [
        ("1", "step time"), ("1", "tokens/s"), ("1", "exposed dp"), ("2", "step time"), ("2", "tokens/s"),
        ("2", "bubble"), ("2", "exposed dp"), ("2", "exposed pp")]
    dp = {r["quantity"]: r for r in rows if r["position"] == "1"}
    assert float(dp["exposed dp"]["measured"]) == pytest.approx(0.075)
    # both rounds' own exposed dp (the same split): the min-max the mean is over
    assert float(dp["exposed dp"]["measured_min"]) == float(dp["exposed dp"]["measured_max"]) == pytest.approx(0.075)
    assert dp["step time"]["measured_min"] == ""  # only the exposed rows keep their rounds
    assert float(dp["exposed dp"]["error"]) == pytest.approx(-0.2)
    assert (dp["step time"]["extrapolated"], dp["step time"]["runs"], dp["step time"]["calibration"]) == \
        ("1", "2", "cal.h5")
    assert dp["step time"]["unit"] == "s" and float(dp["step time"]["predicted"]) == 0.3
    assert float(rows[5]["predicted"]) == 0.3 and float(rows[5]["measured"]) == 0.25
    # The step rows carry the pred.* columns as stored; a run without --predict has none.
    runs, _ = reader.load_steps([str(folder)])
    by = {r["run_id"]: r for r in plans.plan_rows(runs)}
    assert by["dp.0"]["pred.exposed.dp"] == 0.06 and by["dp.0"]["pred.extrapolated"] == 1
    assert by["pp"]["pred.bubble"] == 0.3 and by["pp"]["bubble_mean"] == 0.25
    assert "pred.step_time" not in by["tp"] and [r["predicted"] for r in runs if r["run_id"] == "tp"] == [None]


def test_predicted_exposed_shows_the_rounds_spread(cli, capsys, tmp_path):
    """Rounds whose exposed time differs: the measured cell is their median (not their mean: one
    round whose rank the machine slowed would set it) with their min-max; the plan table's
    exposed column is the same number."""
    folder = predicted_files(tmp_path)
    p = str(tmp_path / "dp2.h5")  # a third round, exposed dp 0.075 like round 1
    h5files.step_file(p, run_id="dp.2", start="2026-12-01T00:02:00Z")
    h5files.predicted(p, "dp.2", 0.3, 800.0, exposed={"dp": 0.06, "tp": 0.0}, extrapolated=1,
                      what="all_reduce over 2 ranks at 512M (measured up to 16M)")
    with h5py.File(folder / "dp1.h5", "a") as f:  # round 2: exposed dp 0.45 on both ranks (mean over rounds 0.2)
        ts = f["runs/dp.1/step/time_split"][...]
        for row in ts:
            if row["category"] == b"exposed.dp":
                row["seconds"] = 0.45
        f["runs/dp.1/step/time_split"][...] = ts
    rc, out, _ = run(cli, capsys, folder)
    assert rc == 0 and "|   |   | exposed dp (ms) | 60 * | 75 (75-450) | -20.0% |" in out
    assert "exposed the median over rounds of the time split's mean over ranks (in brackets the rounds' min-max)" in out
    plan_row = next(ln for ln in out.splitlines() if ln.startswith("| 1 | dp2 m=2 |") and "separable" in ln)
    assert "| 75 |" in plan_row and "| 200 |" not in plan_row


def test_predicted_table_needs_a_prediction(cli, capsys, tmp_path):
    h5files.step_file(str(tmp_path / "s.h5"))
    rc, out, err = run(cli, capsys, tmp_path / "s.h5", "--table", "predicted")
    assert rc == 2 and "--table predicted: none of the step runs holds a prediction" in err
    rc, out, _ = run(cli, capsys, tmp_path / "s.h5")
    assert rc == 0 and "Predicted against measured" not in out


def test_plan_label_names_the_cp_algorithm_and_a_routing_workload():
    from meshbench.plans import plan_label
    assert plan_label({"cp": 2}, "tp-cp-ep-dp-pp", cp_algo="ulysses") == "cp2 ulysses"
    assert plan_label({"dp": 2}, "tp-cp-ep-dp-pp", cp_algo="ring") == "dp2"  # no cp: no algorithm
    assert plan_label({"ep": 2}, "tp-cp-ep-dp-pp", routing="hot-expert") == "ep2 hot-expert"
    assert plan_label({"ep": 2}, "tp-cp-ep-dp-pp", routing="learned") == "ep2"


def test_a_part_of_the_step_keeps_its_first_digit():
    """Exposed time and bubble print to the step time's place (2 significant digits of its
    spread), but never coarser than their own first digit: 4.3 ms of exposed cp beside a step of
    120 ms whose rounds spread from 110 to 250 ms prints 4, not 0 (check W, 2026-12-04, printed
    '0 (0-30)' against an error of -4.5%)."""
    g = {"step": spread.Measure.of_rounds([0.110, 0.120, 0.250])}
    assert report_plans.step_place_ms(g) == 1                    # the step: tens of ms
    assert spread.fmt(4.3, report_plans.step_place_ms(g, 0.0043)) == "4"
    assert spread.fmt(0.43, report_plans.step_place_ms(g, 0.00043)) == "0.4"
    assert spread.fmt(75.4, report_plans.step_place_ms(g, 0.0754)) == "80"  # the step's place where coarser
    assert report_plans.step_place_ms(g, 0.0) == 1 and report_plans.step_place_ms({"step": None}, 0.1) is None


def test_a_malformed_file_is_one_line_exit_2(cli, capsys, tmp_path):
    """step_times of strings (an HDF5 file the binaries did not write): report, plot and plot
    --timeline print one line naming the file, the dataset and what it holds, and exit 2 (was a
    ValueError traceback); nothing is written."""
    import numpy as np
    path = str(tmp_path / "strings.h5")
    h5files.step_file(path, step_times=np.array([[b"a", b"b"], [b"c", b"d"]]))
    want = (f"{path}: /runs/s0/step/step_times holds strings (|S1), not numbers: not a file the binaries wrote, "
            "or a damaged one (docs/results.md)\n")
    for prog, argv in (("report", [path]), ("plot", [path, "-o", tmp_path / "p"]),
                       ("plot", ["--timeline", path, "-o", tmp_path / "p"])):
        assert cli[prog].main([str(a) for a in argv]) == 2
        out, err = capsys.readouterr()
        assert (out, err) == ("", f"{prog}: {want}")
    assert not (tmp_path / "p").exists()


def test_collectives_are_grouped_and_a_point_without_off_rank_bytes_says_so(cli, capsys, tmp_path):
    """Two collectives: a heading and a table each (was one table of every row); an all_to_allv
    point whose routing sent nothing off-rank (total_bytes 0, busbw 0) reads "0 (no off-rank
    bytes)" with a note, not a bare 0."""
    import h5py
    h5files.collective_file(str(tmp_path / "ar.h5"))
    h5files.timed_collective_file(str(tmp_path / "a2av.h5"), sizes=[8, 16384], times=[1e-6, 2e-6],
                                  collective="all_to_allv")
    with h5py.File(tmp_path / "a2av.h5", "a") as f:
        (g,) = [g for g in f["runs/c1/collectives/all_to_allv"].values()]
        summary, sizes = g["summary"][()], g["sizes"][()]
        summary["busbw"][1] = summary["algbw"][1] = 0.0
        sizes["total_bytes"][1] = 0
        g["summary"][...], g["sizes"][...] = summary, sizes
    rc, out, _ = run(cli, capsys, tmp_path)
    lines = out.splitlines()
    assert rc == 0 and [ln for ln in lines if ln.startswith("## ")] == ["## all_reduce", "## all_to_allv"]
    a2av = lines[lines.index("## all_to_allv"):]
    assert sum(1 for ln in a2av if ln.startswith("| all_to_allv_bench")) == 2
    (quiet,) = [ln for ln in a2av if "| 16K |" in ln]
    assert quiet.count(" 0 (no off-rank bytes) |") == 2  # algbw and busbw
    assert ("- 1 point(s) moved no bytes between ranks (total_bytes 0: the routing kept every token on its rank), "
            "so their bandwidth is 0 and busbw.png leaves them out: all_to_allv 16K") in lines
