"""scripts/predict-check's pure parts (meshbench.predict_check): the plan list, the verdicts from
report rows, the replicates (the calibration's runs of a check's plans), and --recalibrate's
command taken from a calibration file's argv."""
import json

import h5py
import h5files
import pytest
from meshbench import predict_check as pc


def test_plan_list_parses_and_refuses(tmp_path):
    p = tmp_path / "plans.txt"
    p.write_text("# comment\n2: --model small --mesh dp=2   # trailing\n\n1: --model tiny\n")
    assert pc.parse_plans(str(p)) == [{"ranks": 2, "args": ["--model", "small", "--mesh", "dp=2"]},
                                      {"ranks": 1, "args": ["--model", "tiny"]}]
    for bad in ("--model small\n", "x: --model small\n", "2:\n", "# nothing\n"):
        p.write_text(bad)
        with pytest.raises(pc.CheckError):
            pc.parse_plans(str(p))


def row(pos, tag, q, pred, meas):
    return {"position": pos, "plan": f"plan{pos}", "tag": tag, "quantity": q, "predicted": pred, "measured": meas,
            "error": pred / meas - 1 if meas else None}


def test_verdicts():
    rows = [row(1, "p01", "step time", 1.1, 1.0), row(1, "p01", "tokens/s", 90.0, 100.0),
            row(1, "p01", "exposed tp", 0.06, 0.1),    # 10% of the step, 40% low: counted, not within
            row(1, "p01", "exposed dp", 0.001, 0.002),  # under 5% of the step: not counted
            row(2, "p02", "step time", 0.5, 0.5), row(2, "p02", "tokens/s", 200.0, 200.0),
            row(2, "p02", "bubble", 0.3, 0.25), row(2, "p02", "exposed pp", 0.03, 0.028),
            row(3, "p03", "step time", 0.7, 1.0), row(3, "p03", "tokens/s", 140.0, 100.0)]
    v = pc.verdicts(rows)
    assert v["plans"] == 3
    assert v["step_error_median"] == pytest.approx(0.1) and v["step_error_worst"] == pytest.approx(0.3)
    assert [(b["tag"], b["dim"], b["within_25"]) for b in v["exposed_over_5pct"]] == [("p01", "tp", False),
                                                                                       ("p02", "pp", True)]
    assert v["bubbles"][0]["error"] == pytest.approx(0.2)
    # predicted tokens/s order 200 > 140 > 90, measured 200 > 100 = 100: ties averaged
    assert v["spearman_tokens"] == pytest.approx(0.866, abs=1e-3)
    assert "median |error| 10.0%, worst 30.0%" in pc.summary_text(v)


def test_exposed_misses_are_told_from_the_rounds_own_noise():
    """A miss whose middle rounds lie more than 25% from their median is 'noise' (unresolved on
    this machine), one whose middle rounds agree with it to 25% a 'miss' (the model's)."""
    assert pc.round_spread([0.8, 1.0, 1.2], 1.0) == pytest.approx(0.2)
    assert pc.round_spread([0.5, 1.5], 1.0) == pytest.approx(0.5)
    # 5 rounds: the lowest and highest set aside; one slowed round (5.0) moves nothing
    assert pc.round_spread([5.0, 0.9, 1.0, 1.1, 0.1], 1.0) == pytest.approx(0.1)
    assert pc.round_spread([5.0, 0.7, 1.0, 1.1, 0.1], 1.0) == pytest.approx(0.3)
    # 10 rounds: the 3rd to 8th
    assert pc.round_spread([0.1, 0.2, 0.8, 0.9, 1.0, 1.0, 1.1, 1.2, 3.0, 9.0], 1.0) == pytest.approx(0.2)
    assert pc.round_spread([1.0], 1.0) is None and pc.round_spread([], 1.0) is None
    assert pc.exposed_verdict(0.24, 0.5) == "within" and pc.exposed_verdict(-0.25, None) == "within"
    assert pc.exposed_verdict(-0.4, 0.5) == "noise"
    assert pc.exposed_verdict(-0.4, 0.2) == "miss" and pc.exposed_verdict(0.4, None) == "miss"
    rows = [row(1, "p01", "step time", 1.0, 1.0), row(1, "p01", "tokens/s", 100.0, 100.0),
            dict(row(1, "p01", "exposed dp", 0.06, 0.1), measured_rounds=[0.05, 0.1, 0.15],
                 predicted_rounds=[0.06, 0.06, 0.07]),   # 40% low, rounds 50% from their median: noise
            dict(row(1, "p01", "exposed tp", 0.06, 0.1), measured_rounds=[0.09, 0.1, 0.11]),  # 40% low, 10%: miss
            dict(row(1, "p01", "exposed cp", 0.11, 0.1), measured_rounds=[0.05, 0.1, 0.15])]  # 10% high: within
    v = pc.verdicts(rows)
    got = {b["dim"]: (b["verdict"], b["round_spread"]) for b in v["exposed_over_5pct"]}
    assert got["dp"] == ("noise", pytest.approx(0.5)) and got["tp"] == ("miss", pytest.approx(0.1))
    assert got["cp"] == ("within", pytest.approx(0.5))
    text = pc.summary_text(dict(v, bubbles=[]))
    assert "1 of 3 within 25%; of the 2 not within, 1 where the measurement's middle rounds" in text
    assert "1 beyond that noise (the model's)" in text
    assert "exposed dp 60.00 ms predicted, 100.00 ms measured (-40.0%) [unresolved: noise]; rounds measured 50.0, " \
           "100.0, 150.0, predicted 60.0, 60.0, 70.0 ms, middle rounds within 50% of their median" in text
    assert "(-40.0%) [miss]" in text


def test_recalibrate_command_repeats_the_calibration(tmp_path):
    cal = tmp_path / "cal.h5"
    with h5py.File(cal, "w") as f:
        f.attrs["argv"] = json.dumps(["scripts/calibrate", "--compute", "--steps", "5", "--out", "old.h5", "--force",
                                      "--plot", "figs", "a.h5", "b.h5"])
    cmd = pc.recalibrate_command(str(cal), "/x/cal-round1.h5")
    assert cmd[0].endswith("scripts/calibrate")
    assert cmd[1:] == ["--compute", "--steps", "5", "a.h5", "b.h5", "--out", "/x/cal-round1.h5",
                       "--compute-dir", "/x/cal-round1.compute"]
    with h5py.File(cal, "w") as f:
        f.attrs["argv"] = json.dumps(["scripts/calibrate", "--out", "old.h5", "a.h5"])
    with pytest.raises(pc.CheckError, match="--compute"):
        pc.recalibrate_command(str(cal), "/x/c.h5")


def test_closed_loop_compares_modelled_with_real_per_plan():
    """--modelled: per tag the median over rounds of real and modelled step times, their error,
    and the exposed time per dimension of each; the verdict counts plans within 10%."""
    real = [{"tag": "p01", "plan": "dp=2", "step_time_median": t, "time.compute": 0.09, "time.exposed.dp": 0.01}
            for t in (0.100, 0.104, 0.098)]
    real += [{"tag": "p02", "plan": "tp=2", "step_time_median": 0.2, "time.compute": 0.15, "time.exposed.tp": 0.05}]
    mod = [{"tag": "p01", "plan": "dp=2", "step_time_median": t, "time.compute": 0.09, "time.exposed.dp": 0.012}
           for t in (0.105, 0.101, 0.103)]
    mod += [{"tag": "p02", "plan": "tp=2", "step_time_median": 0.25, "time.compute": 0.15, "time.exposed.tp": 0.1},
            {"tag": "p03", "plan": "pp=2", "step_time_median": 0.3}]  # no real run: not compared
    c = pc.closed_loop(real, mod)
    assert [p["tag"] for p in c["plans"]] == ["p01", "p02"]
    p1, p2 = c["plans"]
    assert p1["real_s"] == pytest.approx(0.100) and p1["modelled_s"] == pytest.approx(0.103)
    assert p1["error"] == pytest.approx(0.03) and p1["rounds"] == 3
    assert p1["exposed"]["dp"] == (pytest.approx(0.01), pytest.approx(0.012))
    assert p2["error"] == pytest.approx(0.25)
    assert (c["within_10"], c["count"]) == (1, 2)
    assert c["error_worst"] == pytest.approx(0.25)
    text = pc.closed_loop_text(c)
    assert "1 of 2 plans within 10%" in text and "+25.0%" in text


def test_a_replicate_that_disagrees_makes_a_miss_unresolved():
    """The same plan measured again in the check (the calibration's runs of it): where it
    differs from the check's measurement by more than 25%, a miss is noise, not the model's."""
    assert pc.exposed_verdict(-0.4, 0.1, replicate_err=0.3) == "noise"
    assert pc.exposed_verdict(-0.4, 0.1, replicate_err=-0.1) == "miss"
    assert pc.exposed_verdict(-0.1, 0.1, replicate_err=0.9) == "within"
    rows = [row(1, "p01", "step time", 1.0, 1.0), row(1, "p01", "tokens/s", 100.0, 100.0),
            dict(row(1, "p01", "exposed dp", 0.06, 0.1), measured_rounds=[0.09, 0.1, 0.11]),
            dict(row(1, "p01", "exposed tp", 0.06, 0.1), measured_rounds=[0.09, 0.1, 0.11])]
    v = pc.verdicts(rows, {("p01", "dp"): (0.14, 3), ("p01", "tp"): (0.11, 3)})
    got = {b["dim"]: b for b in v["exposed_over_5pct"]}
    assert got["dp"]["verdict"] == "noise" and got["dp"]["replicate_error"] == pytest.approx(0.4)
    assert got["tp"]["verdict"] == "miss" and got["tp"]["replicate_runs"] == 3
    text = pc.summary_text(dict(v, bubbles=[]))
    assert "the same plan measured again in this check (the calibration's profiled runs of it): 1 of 2 within" in text
    assert "the same plan's 3 calibration run(s) measured 140.00 ms (+40.0%; the model -57.1% from them)" in text
    # the model against its own calibration runs of the plan: 0.06 / 0.14 and 0.06 / 0.11
    assert got["dp"]["model_vs_replicate"] == pytest.approx(0.06 / 0.14 - 1)
    assert got["tp"]["model_vs_replicate"] == pytest.approx(0.06 / 0.11 - 1)
    assert "within 25% of the check's measurement; the model within 25% of those runs: 0 of 2" in text


def test_replicates_are_the_calibrations_runs_of_the_same_plan(tmp_path):
    """replicate_groups reads OUT/cal-round*.compute/*.h5; replicate_exposed joins them to the
    check's plans by model, ranks, plan and global batch (not the tag), with the plan table's
    number: the median over the runs of the time split's mean over ranks."""
    from meshbench import plans, reader
    for r, exposed in ((1, 0.05), (2, 0.07), (3, 0.30)):
        d = tmp_path / f"cal-round{r}.compute"
        d.mkdir()
        h5files.step_file(str(d / "compute-1.h5"), run_id=f"cal{r}", tag="", start=f"2026-12-01T00:0{r}:00Z")
        with h5py.File(d / "compute-1.h5", "a") as f:
            ts = f[f"runs/cal{r}/step/time_split"][...]
            for row_ in ts:
                if row_["category"] == b"exposed.dp":
                    row_["seconds"] = exposed
            f[f"runs/cal{r}/step/time_split"][...] = ts
    h5files.step_file(str(tmp_path / "plan-01.h5"), run_id="p", tag="p01")
    h5files.step_file(str(tmp_path / "plan-02.h5"), run_id="q", tag="p02", global_batch=16)  # another plan
    groups = pc.replicate_groups(str(tmp_path))
    runs, _ = reader.load_steps([str(tmp_path / "plan-01.h5"), str(tmp_path / "plan-02.h5")], quiet=True)
    got = pc.replicate_exposed(plans.plan_rows(runs), groups)
    assert got == {("p01", "dp"): (pytest.approx(0.07), 3)}
    assert pc.replicate_groups(str(tmp_path / "none")) == {}


def test_plans_run_under_the_calibrations_transport(tmp_path, monkeypatch):
    """A check's plan runs get the environment the calibration's profiled runs got
    (compute.run_env: UCX_TLS=self,sm for 2 or more ranks unless the caller set UCX_TLS), so that
    predicted and measured come from the same transport."""
    seen = []

    class Done:
        returncode, stderr = 0, ""

    def fake_run(cmd, **kw):
        seen.append((cmd, kw["env"]))
        return Done()

    monkeypatch.setattr(pc.subprocess, "run", fake_run)
    plans = [{"ranks": 2, "args": ["--mesh", "tp=2"]}, {"ranks": 1, "args": ["--mesh", "dp=1"]}]
    o = {"out": str(tmp_path), "rounds": 1, "exe": "step_bench", "steps": 2, "warmup": 1, "threads": 1,
         "cal": "cal.h5", "fabric": "", "mpiexec": "mpiexec"}
    lines = []
    monkeypatch.delenv("UCX_TLS", raising=False)
    pc.run_rounds(plans, o, say=lambda *a, **k: lines.append(a[0]))
    assert [c[0] for c, _ in seen] == ["mpiexec", "step_bench"]
    assert seen[0][1]["UCX_TLS"] == "self,sm" and "UCX_TLS" not in seen[1][1]
    assert lines[0].startswith("[round 1/1, plan 1/2] UCX_TLS=self,sm mpiexec -n 2 step_bench")
    seen.clear()
    monkeypatch.setenv("UCX_TLS", "self,tcp")  # the caller's choice wins, for both sides
    pc.run_rounds(plans, o, say=lambda *a, **k: None)
    assert seen[0][1]["UCX_TLS"] == "self,tcp"


def test_bad_inputs_are_one_line_and_nothing_validated_fails(tmp_path, capsys):
    """A missing plan list or a folder: exit 2 with one line naming it (was a traceback);
    --report-only over a folder with no predicted and measured plan: exit 1, one line (was 0
    after validating 0 plans); --report-only without the folder: exit 2."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "step_bench").write_text("#!/bin/sh\n")
    cal = tmp_path / "empty.h5"
    h5py.File(cal, "w").close()
    plans = tmp_path / "plans.txt"
    plans.write_text("2: --model tiny --mesh dp=2\n")
    out = tmp_path / "out"
    out.mkdir()
    common = ["--report-only", "--predict", str(cal), "--out", str(out), "--bin", str(bin_dir)]
    for path, code, line in [
            (tmp_path / "nope.txt", 2, f"predict-check: error: {tmp_path}/nope.txt: cannot read the plan list: "
                                       "No such file or directory"),
            (tmp_path, 2, f"predict-check: error: {tmp_path}: is a folder; the plan list is a file of "
                          "'N: step_bench flags' lines"),
            (plans, 1, f"predict-check: nothing validated: 0 results file(s) in {out}, none with a plan that has both "
                       "a prediction (step_bench --predict) and a measured step time")]:
        assert pc.main([str(path)] + common) == code
        o, e = capsys.readouterr()
        assert (o, e) == ("", line + "\n")
    h5files.step_file(str(out / "plan-01.h5"))  # measured, but made without --predict
    assert pc.main([str(plans)] + common) == 1
    assert capsys.readouterr().err.startswith("predict-check: nothing validated: 1 results file(s) in ")
    assert not (out / "summary.json").exists()
    assert pc.main([str(plans), "--report-only", "--predict", str(cal), "--out", str(tmp_path / "none"),
                    "--bin", str(bin_dir)]) == 2
    assert capsys.readouterr().err == (f"predict-check: error: --out {tmp_path}/none: no such folder (--report-only "
                                       "reads the folder of an earlier check)\n")
