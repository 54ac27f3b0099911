"""scripts/sweep --steps --predict CAL.h5 --top N --spread K (meshbench.predict_ranking): which
plans run, Spearman's rank correlation with ties, and the sweep with the stand-in step_bench
(fakes.py: its --plan-only --predict answers tokens/s 1000 + 300 tp - 200 pp + 50 ZeRO - 10 m)
and mpiexec, no MPI."""
import glob
import json
import math
import os

import h5files
import numpy as np
import pytest
from meshbench import predict_ranking


def test_choose_the_top_and_a_spread_over_the_rest():
    # 10 plans, the 2 best, 3 more: the last of each third of the other 8 (ranks 5, 7, 10).
    assert predict_ranking.choose(10, 2, 3) == {0: "top", 1: "top", 4: "spread", 6: "spread", 9: "spread"}
    assert predict_ranking.choose(10, 0, 2) == {4: "spread", 9: "spread"}
    assert predict_ranking.choose(4, 3, 3) == {0: "top", 1: "top", 2: "top", 3: "spread"}   # fewer left than K
    assert predict_ranking.choose(5, None, 3) == {i: "top" for i in range(5)}               # no --top: all
    assert predict_ranking.choose(3, 7, 3) == {0: "top", 1: "top", 2: "top"}
    assert predict_ranking.choose(0, 2, 3) == {}
    # K spread picks are distinct and end at the worst plan for any rest.
    for total in range(1, 30):
        for top in range(0, total):
            for k in range(0, 6):
                got = predict_ranking.choose(total, top, k)
                spread = sorted(i for i, w in got.items() if w == "spread")
                assert len(spread) == min(k, total - top) and (not spread or spread[-1] == total - 1)


def test_select_ranks_by_predicted_tokens():
    def cand(i, tok):
        return {"id": i, "plan": {"predicted": {"tokens_per_s": tok}}}
    ranked, chosen = predict_ranking.select([cand("a", 10.0), cand("b", 30.0), cand("c", 20.0), cand("d", 30.0),
                                             cand("e", 5.0)], 1, 1)
    assert [(c["id"], c["pred_rank"], c["selected"]) for c in ranked] == [
        ("b", 1, "top"), ("d", 2, ""), ("c", 3, ""), ("a", 4, ""), ("e", 5, "spread")]   # a tie: by id
    assert [c["id"] for c in chosen] == ["b", "e"]


def test_spearman_with_ties_averaged():
    assert list(predict_ranking.ranks([10, 20, 20, 30])) == [1, 2.5, 2.5, 4]
    assert list(predict_ranking.ranks([3, 1, 2])) == [3, 1, 2]
    assert predict_ranking.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert predict_ranking.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # Ties: ranks [1, 2.5, 2.5, 4] against [1, 3, 2, 4]: 4.5 / sqrt(4.5 x 5)
    rho = predict_ranking.spearman([1, 2, 2, 3], [1, 3, 2, 4])
    assert rho == pytest.approx(4.5 / math.sqrt(22.5))
    assert rho == pytest.approx(np.corrcoef([1, 2.5, 2.5, 4], [1, 3, 2, 4])[0, 1])
    # One swap of three: 1 - 6 x 2 / (3 x 8) = 0.5
    assert predict_ranking.spearman([1360, 1080, 860], [1000, 1100, 900]) == pytest.approx(0.5)
    assert math.isnan(predict_ranking.spearman([1], [2])) and math.isnan(predict_ranking.spearman([1, 2], [3, 3]))
    with pytest.raises(ValueError):
        predict_ranking.spearman([1, 2], [1])


def sweep(cli, capsys, *argv):
    rc = cli["sweep"].main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def pred_env(tmp_path, fake_bin, fake_tools, monkeypatch):
    for k in [k for k in os.environ if k.startswith("MESHBENCH_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("FAKE_LOG", fake_tools["mpiexec"][1])
    cal = tmp_path / "cal.h5"
    cal.write_text("stand-in: the fake step_bench does not read it\n")
    return cal, fake_bin, tmp_path / "out", fake_tools["mpiexec"]


# 4 valid plans at 2 ranks, predicted tokens/s: tp2 m4 1360, dp2 z1 1130, dp2 z0 1080, pp2 m4 860
FLAGS = ["--steps", "--world", "2", "--tp", "1,2", "--pp", "1,2", "--zero", "0,1", "--global-batch", "4"]


def test_dry_run_prints_the_ranking_and_what_it_would_run(cli, capsys, pred_env):
    cal, bin_dir, out, _ = pred_env
    rc, text, err = sweep(cli, capsys, *FLAGS, "--bin", bin_dir, "--out", out, "--predict", cal, "--top", "1",
                          "--spread", "2", "--dry-run")
    assert rc == 0, err
    assert (f"ranks=2: 4 valid plans ranked by predicted tokens/s (calibration {cal}); running the 1 best and 2 "
            "spread over the rest") in text
    assert "| 1 | tp2cp1ep1dp1pp1-z0-m4-otcedp | 1,360 | 735.3 | yes | top |" in text
    assert "| 2 | tp1cp1ep1dp2pp1-z1-m2-otcedp | 1,130 | 885 | no | - |" in text
    assert "| 3 | tp1cp1ep1dp2pp1-z0-m2-otcedp | 1,080 | 925.9 | no | spread |" in text
    assert "| 4 | tp1cp1ep1dp1pp2-z0-1f1b-m4-otcedp | 860 | 1163 | no | spread |" in text
    cmds = [ln for ln in text.splitlines() if ln.startswith("[")]
    assert len(cmds) == 3 and all(ln.endswith(f"--predict {cal}") for ln in cmds)
    assert "z1-m2" not in "".join(cmds) and not out.exists()
    # Without --top every valid plan runs; --predict-fabric goes to the plan and the runs.
    rc, text, _ = sweep(cli, capsys, *FLAGS, "--bin", bin_dir, "--out", out, "--predict", cal, "--predict-fabric",
                        "shm", "--dry-run")
    cmds = [ln for ln in text.splitlines() if ln.startswith("[")]
    assert rc == 0 and len(cmds) == 4 and all(ln.endswith(f"--predict {cal} --predict-fabric shm") for ln in cmds)


@pytest.mark.parametrize("extra, message", [
    (["--top", "2"], "[steps] top: only with predict"),
    (["--predict", "CAL", "--spread", "2"], "[steps] spread: only with top"),
    (["--predict", "CAL", "--top", "-1"], "[steps] top: want a count >= 0, got -1"),
    (["--predict", "missing.h5"], "[steps] predict: missing.h5: no such file (a calibration file"),
    (["--predict", "NOFIT"], "plan tp1cp1ep1dp2pp1-z0-m2-otcedp: --predict "),
    (["--predict", "NOPREDICT"], "plan tp1cp1ep1dp2pp1-z0-m2-otcedp: The following arguments were not expected"),
    (["--predict-fabric", "shm"], "[steps] predict_fabric: only with predict"),
])
def test_bad_predict_options_exit_2(cli, capsys, pred_env, tmp_path, extra, message):
    cal, bin_dir, out, _ = pred_env
    other = {"CAL": str(cal)}
    for name in ("nofit", "nopredict"):
        (tmp_path / f"{name}.h5").write_text("x")
        other[name.upper()] = str(tmp_path / f"{name}.h5")
    extra = [other.get(a, a) for a in extra]
    rc, _, err = sweep(cli, capsys, *FLAGS, "--bin", bin_dir, "--out", out, *extra)
    assert rc == 2 and message in err, err
    assert not out.exists()


def test_run_then_compare_predicted_and_measured(cli, capsys, pred_env):
    cal, bin_dir, out, (mpiexec, log) = pred_env
    argv = [*FLAGS, "--bin", bin_dir, "--out", out, "--mpiexec", mpiexec, "--predict", cal, "--top", "1",
            "--spread", "2", "--rounds", "1", "--no-report"]
    rc, text, err = sweep(cli, capsys, *argv)
    assert rc == 0, err
    runs = [json.loads(ln) for ln in open(log)]
    assert len(runs) == 3 and all(r[-2:] == ["--predict", str(cal)] for r in runs)
    # The stand-in's files hold no step run: nothing measured yet, no correlation.
    assert "Spearman rank correlation between predicted and measured tokens/s over 0 plans: -" in text
    ranking = json.load(open(out / "ranking.json"))
    assert [r["selected"] for r in ranking[0]["ranking"]] == ["top", "", "spread", "spread"]
    # Give the three runs measured numbers (tp2 1000, dp2 1100, pp2 900 tokens/s: one swap) and
    # run the sweep again: every point is done, the comparison reads the files.
    measured = {"tp2cp1": 1000.0, "dp2pp1-z0": 1100.0, "pp2-z0": 900.0}
    for path in glob.glob(str(out / "*.h5")):
        tok = next(v for k, v in measured.items() if k in os.path.basename(path).replace("dp1pp2", "pp2"))
        os.remove(path)
        h5files.step_file(path, tokens=tok, median=4.0 / tok)
    rc, text, err = sweep(cli, capsys, *argv)
    assert rc == 0, err
    assert "... skip (done)" in text
    block = text[text.index("Predicted against measured tokens/s, ranks=2 mpi shm"):]
    assert "| 1 | 2 | step-r2-mpi-shm-tp2cp1ep1dp1pp1-z0-m4-otcedp | top | 1,360 | 1,000 | +36.0% |" in block
    assert "| 3 | 1 | step-r2-mpi-shm-tp1cp1ep1dp2pp1-z0-m2-otcedp | spread | 1,080 | 1,100 | -1.8% |" in block
    assert "| 4 | 3 | step-r2-mpi-shm-tp1cp1ep1dp1pp2-z0-1f1b-m4-otcedp | spread | 860 | 900 | -4.4% |" in block
    assert "Spearman rank correlation between predicted and measured tokens/s over 3 plans: 0.500" in block
    (comp,) = json.load(open(out / "prediction.json"))
    assert comp["spearman"] == pytest.approx(0.5) and comp["pairs"] == 3


def test_dry_run_estimates_the_wall_time_from_the_predicted_steps(cli, capsys, pred_env):
    """3 chosen plans x 3 rounds, each 2 s + (2 warm-up + 10 steps) x its predicted step (1000 /
    tokens/s: 0.735, 0.926, 1.163 s): 9 runs, 119.7 s."""
    cal, bin_dir, out, _ = pred_env
    rc, text, err = sweep(cli, capsys, *FLAGS, "--bin", bin_dir, "--out", out, "--predict", cal, "--top", "1",
                          "--spread", "2", "--dry-run")
    assert rc == 0, err
    assert ("estimated wall time: 2 min 0 s for 9 run(s) (9 from the predicted step: 2 s + (warmup + steps) x step) "
            "(rule: scripts/meshbench/estimate.py, docs/sweeps.md)") in text.splitlines()
    rc, text, _ = sweep(cli, capsys, *FLAGS, "--bin", bin_dir, "--out", out, "--predict", cal, "--top", "1",
                        "--spread", "0", "--args=--steps 3 --warmup 0", "--dry-run")
    assert "estimated wall time: 13 s for 3 run(s) (3 from the predicted step: " in text  # 3 x (2 + 3 x 0.735)


def test_a_cluster_search_prints_its_plans_not_launch_lines(cli, capsys, pred_env, tmp_path):
    """--predict CLUSTER.toml: the chosen plans with their predicted step, tokens/s and MFU in a
    table, and no mpiexec line (the world is the cluster's, not this machine's)."""
    _, bin_dir, out, _ = pred_env
    cluster = tmp_path / "c.toml"
    cluster.write_text("# stand-in: the fake step_bench does not read it\n")
    rc, text, err = sweep(cli, capsys, *FLAGS, "--bin", bin_dir, "--out", out, "--predict", cluster, "--top", "1",
                          "--spread", "1", "--dry-run")
    assert rc == 0, err
    lines = text.splitlines()
    i = lines.index("| # | pred # | plan | ranks | predicted step (ms) | predicted tokens/s | MFU | chosen | "
                    "step_bench flags |")
    assert lines[i - 1].startswith("the chosen plans of the search (2): predicted for the cluster, nothing runs here")
    assert lines[i + 2].startswith("| 1 | 1 | step-r2-mpi-shm-tp2cp1ep1dp1pp1-z0-m4-otcedp | 2 | 735.3 | 1,360 | 34.0% "
                                   "| top | `--mesh tp=2,dp=1 --order tp-cp-ep-dp-pp ")
    assert lines[i + 3].startswith("| 2 | 4 | step-r2-mpi-shm-tp1cp1ep1dp1pp2-z0-1f1b-m4-otcedp | 2 | 1163 | 860 | "
                                   "21.5% | spread |")
    assert "mpiexec" not in text and not any(ln.startswith("[") for ln in lines)
    assert "estimated wall time" not in text


def test_help_shows_the_slurm_entry_points(cli, capsys):
    with pytest.raises(SystemExit) as e:
        cli["sweep"].main(["--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0 and "--run-point PLAN INDEX" in text and "--run-plan PLAN" in text
    assert "inside a Slurm job" in text
