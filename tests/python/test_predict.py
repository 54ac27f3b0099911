"""step_bench --plan-only --predict CAL (parallel/predict/): the step model on generated
calibration files with known costs. A pipeline whose only cost is its GEMMs has a known
critical path (GPipe over two stages); a single rank's step is the sum of its op list; bad
calibration files are exit 2 naming what is missing; sizes beyond a fit are flagged.
Needs the build (MB_BIN, default build/bin); skipped without step_bench."""
import json
import os
import subprocess

import h5py
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MB_BIN", os.path.join(ROOT, "build", "bin"))
STEP = os.path.join(BIN, "step_bench")
pytestmark = pytest.mark.skipif(not os.path.exists(STEP), reason="needs build/bin/step_bench")

NS = 1e-9  # seconds per GEMM FLOP in the generated calibrations
ELEMENTWISE = ["embedding", "layernorm", "gelu", "residual", "crossentropy", "adamw", "router", "permute", "copy"]


def table(rows, fields):
    """A compound array with fixed-length strings, as scripts/calibrate writes."""
    dt = []
    for name, kind in fields:
        if kind == "S":
            width = max([len(str(r[name])) for r in rows] + [1])
            dt.append((name, f"S{width}"))
        else:
            dt.append((name, kind))
    a = np.zeros(len(rows), dtype=dt)
    for i, r in enumerate(rows):
        for name, kind in fields:
            a[i][name] = r[name].encode() if kind == "S" else r[name]
    return a


def write_cal(path, fits, gemm_parts=("fwd", "bwd"), rate=0.0, version=2, compute_attrs=None, ns=NS):
    """fits: (collective, group_size, tag, [(lo, hi, alpha, beta)]). Every GEMM part costs `ns`
    (NS) per FLOP (one measured shape each, so every other shape is scaled from it); every other
    op `rate` seconds per unit."""
    with h5py.File(path, "w") as f:
        f.attrs["kind"] = "meshbench calibration"
        f.attrs["format_version"] = version
        rows = []
        for coll, n, tag, segs in fits:
            for i, (lo, hi, a, b) in enumerate(segs):
                rows.append(dict(collective=coll, backend="mpi", dtype="float", group_size=n, span="intra", tag=tag,
                                 segment=i, segments=len(segs), lo=lo, hi=hi, alpha=a, beta=b))
        f.create_dataset("collectives/fits", data=table(rows, [
            ("collective", "S"), ("backend", "S"), ("dtype", "S"), ("group_size", "<i4"), ("span", "S"), ("tag", "S"),
            ("segment", "<i4"), ("segments", "<i4"), ("lo", "<u8"), ("hi", "<u8"), ("alpha", "<f8"), ("beta", "<f8")]))
        g = f.require_group("compute")
        for k, v in (compute_attrs or {}).items():
            g.attrs[k] = v
        # a backward's call runs two GEMMs of its shape (dinput and dweight), as the events count it
        two = [2 if p == "bwd" or p.endswith(".bwd") else 1 for p in gemm_parts]
        gem = [dict(part=p, m=100, n=100, k=100, flops=2e6 * t, seconds=2e6 * t * ns) for p, t in zip(gemm_parts, two)]
        g.create_dataset("gemm", data=table(gem, [("part", "S"), ("m", "<i4"), ("n", "<i4"), ("k", "<i4"),
                                                  ("flops", "<f8"), ("seconds", "<f8")]))
        rates = [dict(op=o, phase=ph, part="", unit="element", seconds_per_unit=rate)
                 for o in ELEMENTWISE for ph in "FBO"]
        rates += [dict(op="attention", phase=ph, part="", unit="flop", seconds_per_unit=rate) for ph in "FB"]
        rates.append(dict(op="residual", phase="F", part="bias_residual", unit="element", seconds_per_unit=rate))
        g.create_dataset("rates", data=table(rates, [("op", "S"), ("phase", "S"), ("part", "S"), ("unit", "S"),
                                                    ("seconds_per_unit", "<f8")]))


FREE = [(c, 2, "shm", [(1, 1 << 30, 0.0, 0.0)]) for c in ("all_reduce", "sendrecv", "all_gather", "reduce_scatter")]


def plan(cal, *args, world=1, check=True):
    p = subprocess.run([STEP, "--plan-only", "--world", str(world), "--predict", str(cal), *args],
                       capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["predicted"]
    return p


def tiny_flops():
    """The tiny preset's GEMM FLOPs of one block and of the head, forward (docs: --model tiny)."""
    C, F, V, N = 64, 256, 512, 4 * 64  # 2 layers: one block per stage
    block = 2.0 * N * (C * 3 * C + C * C + 2 * C * F)
    head = 2.0 * N * C * V
    return block, head


def test_gpipe_two_stages_has_the_known_critical_path(tmp_path):
    # Only GEMMs cost: stage 0 runs block 0 (f0, b0 = 2 f0), stage 1 block 1 and the head
    # (f1, b1 = 2 f1 > b0). GPipe's critical path: f0, then the last stage's m forwards and m
    # backwards back to back, then stage 0's last backward: f0 + m (f1 + b1) + b0.
    cal = tmp_path / "cal.h5"
    write_cal(cal, FREE)
    block, head = tiny_flops()
    f0, f1 = block * NS, (block + head) * NS
    b0, b1 = 2 * f0, 2 * f1
    m = 3
    p = plan(cal, "--model", "tiny", "--mesh", "pp=2", "--micro-batches", str(m), "--schedule", "gpipe", world=2)
    want = f0 + m * (f1 + b1) + b0
    assert p["step_time_s"] == pytest.approx(want, rel=1e-9)
    r0, r1 = p["per_rank"]
    assert r0["compute_s"] == pytest.approx(m * (f0 + b0), rel=1e-9)
    assert r1["compute_s"] == pytest.approx(m * (f1 + b1), rel=1e-9)
    assert r1["bubble_s"] == pytest.approx(f0, rel=1e-9)  # waits for stage 0's first forward
    # then, at the gradient sync, for stage 0's last backward: the tied embedding's all-reduce
    assert r1["exposed_s"]["embedding"] == pytest.approx(b0, rel=1e-9)
    assert r1["step_time_s"] == pytest.approx(want, rel=1e-9)
    assert p["exposed_s"]["embedding"] == pytest.approx(b0 / 2, rel=1e-9)  # the mean over ranks
    assert r0["bubble_s"] == pytest.approx(want - m * (f0 + b0), rel=1e-9)
    assert p["bubble"] == pytest.approx((r0["bubble_s"] / want + r1["bubble_s"] / want) / 2, rel=1e-9)
    assert p["extrapolated"] is True  # every GEMM shape was scaled from the one measured
    assert p["tokens_per_s"] == pytest.approx(m * 4 * 64 / want, rel=1e-9)


def test_one_rank_is_the_sum_of_its_op_list(tmp_path):
    cal = tmp_path / "cal.h5"
    write_cal(cal, FREE, rate=1e-9)
    p = plan(cal, "--model", "tiny", "--micro-batches", "2")
    ops = json.loads(subprocess.run([STEP, "--plan-only", "--op-list", "--model", "tiny", "--micro-batches", "2"],
                                    capture_output=True, text=True, check=True).stdout)["op_list"]
    want = sum((o["flops"] if o["op"] == "matmul" else o["flops"] + o["elements"]) * NS for o in ops)
    assert p["step_time_s"] == pytest.approx(want, rel=1e-9)
    assert p["exposed_s"] == {}


def test_communication_is_charged_from_the_fits(tmp_path):
    # tp=2 without SP: per micro-batch and block 2 forward and 2 backward all-reduces of
    # b x s x h floats, the embedding's 1, the head's 1 (input gradient) + 3 (cross-entropy).
    cal = tmp_path / "cal.h5"
    alpha, beta = 5e-6, 1e-9
    write_cal(cal, [("all_reduce", 2, "shm", [(1, 1 << 30, alpha, beta)])], gemm_parts=("fwd", "dinput", "dweight", "bwd"))
    p = plan(cal, "--model", "tiny", "--mesh", "tp=2", world=2)
    act, n = 4 * 64 * 64 * 4, 4 * 64 * 4
    want = (4 * 2 + 1 + 1) * (alpha + beta * act) + 3 * (alpha + beta * n)
    assert p["exposed_s"]["tp"] == pytest.approx(want, rel=1e-9)


def test_extrapolated_sizes_are_flagged(tmp_path):
    cal = tmp_path / "cal.h5"
    write_cal(cal, [("all_reduce", 2, "shm", [(8, 1024, 1e-6, 1e-9)])], gemm_parts=("fwd", "dinput", "dweight", "bwd"))
    p = plan(cal, "--model", "tiny", "--mesh", "tp=2", world=2)
    assert p["extrapolated"] is True
    assert any("all_reduce of 65536 B over 2 ranks" in w for w in p["extrapolated_what"])


def test_a_missing_fit_is_exit_2_naming_collective_group_and_fabric(tmp_path):
    cal = tmp_path / "cal.h5"
    write_cal(cal, [("all_reduce", 2, "shm", [(1, 1 << 30, 0.0, 0.0)])])
    p = plan(cal, "--model", "tiny", "--mesh", "pp=2", "--micro-batches", "2", world=2, check=False)
    assert p.returncode == 2
    assert "no fit for sendrecv over 2 ranks" in p.stderr
    assert "sendrecv" in json.loads(p.stdout)["predicted"]["error"]
    p = plan(cal, "--model", "tiny", "--mesh", "tp=2", "--predict-fabric", "tcp-lo", world=2, check=False)
    assert p.returncode == 2 and "fabric tag 'tcp-lo'" in p.stderr


def test_two_fabrics_need_a_choice(tmp_path):
    cal = tmp_path / "cal.h5"
    fits = [("all_reduce", 2, t, [(1, 1 << 30, a, 0.0)]) for t, a in (("shm", 1e-6), ("tcp-lo", 1e-3))]
    write_cal(cal, fits, gemm_parts=("fwd", "dinput", "dweight", "bwd"))
    p = plan(cal, "--model", "tiny", "--mesh", "tp=2", world=2, check=False)
    assert p.returncode == 2 and "--predict-fabric" in p.stderr
    shm = plan(cal, "--model", "tiny", "--mesh", "tp=2", "--predict-fabric", "shm", world=2)
    tcp = plan(cal, "--model", "tiny", "--mesh", "tp=2", "--predict-fabric", "tcp-lo", world=2)
    assert tcp["exposed_s"]["tp"] == pytest.approx(shm["exposed_s"]["tp"] * 1000, rel=1e-9)
    assert tcp["fabric"] == "tcp-lo"


@pytest.mark.parametrize("content", ["missing", "not-hdf5", "other-kind", "version"])
def test_bad_calibration_files_are_exit_2(tmp_path, content):
    cal = tmp_path / "cal.h5"
    if content == "not-hdf5":
        cal.write_text("hello")
    elif content == "other-kind":
        with h5py.File(cal, "w") as f:
            f.attrs["kind"] = "meshbench results"
    elif content == "version":
        write_cal(cal, FREE, version=7)
    p = plan(cal, "--model", "tiny", world=1, check=False)
    assert p.returncode == 2, p.stdout
    assert "--predict" in p.stderr and str(cal) in p.stderr


def test_a_missing_compute_rate_is_exit_2(tmp_path):
    cal = tmp_path / "cal.h5"
    write_cal(cal, FREE, gemm_parts=("fwd",))
    p = plan(cal, "--model", "tiny", check=False)
    assert p.returncode == 2 and "no measured GEMM of part 'bwd'" in p.stderr


def test_in_step_factors_and_arrival_skew_apply(tmp_path):
    # tp=2 without SP: 13 all-reduces (test_communication_is_charged_from_the_fits); the
    # calibration says all-reduces take 2x their fit inside a step. With an arrival skew of 0.1
    # s per s of compute, each also waits half the skew of the compute since the last call:
    # summed over the step, half the skew of all the compute before the last all-reduce.
    alpha = 5e-6
    plain, scaled, skewed = (tmp_path / f"{n}.h5" for n in ("plain", "scaled", "skewed"))
    parts = ("fwd", "dinput", "dweight", "bwd")
    fits = [("all_reduce", 2, "shm", [(1, 1 << 30, alpha, 0.0)])]
    write_cal(plain, fits, gemm_parts=parts)
    write_cal(scaled, fits, gemm_parts=parts, compute_attrs={"in_step_factor": 3.0, "in_step_factors": '{"all_reduce": 2.0}'})
    write_cal(skewed, fits, gemm_parts=parts, compute_attrs={"arrival_skew": 0.1})
    a = plan(plain, "--model", "tiny", "--mesh", "tp=2", world=2)
    b = plan(scaled, "--model", "tiny", "--mesh", "tp=2", world=2)
    c = plan(skewed, "--model", "tiny", "--mesh", "tp=2", world=2)
    assert b["exposed_s"]["tp"] == pytest.approx(2 * a["exposed_s"]["tp"], rel=1e-9)
    assert any("2.00x" in n or "all_reduce 2.00" in n for n in b["notes"])
    # every timed op precedes the last all-reduce (GEMM-only rates here: the embedding's
    # backward and the optimizer take no time), which stands at its wait after qkv's weight
    # gradient in block 0 (linear.cpp posts it before that GEMM): all the compute is waited on
    compute = a["per_rank"][0]["compute_s"]
    extra = c["exposed_s"]["tp"] - a["exposed_s"]["tp"]
    assert extra == pytest.approx(0.5 * 0.1 * compute, rel=1e-9)
    assert c["step_time_s"] == pytest.approx(a["step_time_s"] + extra, rel=1e-9)


def test_arrival_skews_per_call_site_apply(tmp_path):
    # tp=2 without SP: every call is a tp all-reduce. A calibration whose per-call-site skew for
    # tp/all_reduce is 0.2 charges twice the wait of the overall 0.1 (a drift alone is waited
    # for by half its mean gap: linear in the rate); an entry for another call site leaves the
    # all-reduces on the overall rate.
    parts = ("fwd", "dinput", "dweight", "bwd")
    fits = [("all_reduce", 2, "shm", [(1, 1 << 30, 5e-6, 0.0)])]
    cals = {n: tmp_path / f"{n}.h5" for n in ("plain", "overall", "site", "elsewhere")}
    write_cal(cals["plain"], fits, gemm_parts=parts)
    write_cal(cals["overall"], fits, gemm_parts=parts, compute_attrs={"arrival_skew": 0.1})
    write_cal(cals["site"], fits, gemm_parts=parts,
              compute_attrs={"arrival_skew": 0.1, "arrival_skews": '{"tp/all_reduce": 0.2}'})
    write_cal(cals["elsewhere"], fits, gemm_parts=parts,
              compute_attrs={"arrival_skew": 0.1, "arrival_skews": '{"tp/all_gather": 0.5, "dp/all_reduce": 0.3}'})
    got = {n: plan(c, "--model", "tiny", "--mesh", "tp=2", world=2) for n, c in cals.items()}
    extra = {n: got[n]["exposed_s"]["tp"] - got["plain"]["exposed_s"]["tp"] for n in cals}
    assert extra["overall"] > 0
    assert extra["site"] == pytest.approx(2 * extra["overall"], rel=1e-9)
    assert extra["elsewhere"] == pytest.approx(extra["overall"], rel=1e-12)
    assert any("per call site" in n and "tp/all_reduce 0.200" in n for n in got["site"]["notes"])
    bad = tmp_path / "bad.h5"
    write_cal(bad, fits, gemm_parts=parts, compute_attrs={"arrival_skew": 0.1, "arrival_skews": "[0.2]"})
    p = plan(bad, "--model", "tiny", "--mesh", "tp=2", world=2, check=False)
    assert p.returncode == 2 and "arrival_skews is not a JSON object" in p.stderr


def test_uneven_expert_loads_are_waited_for_as_exposed_ep(tmp_path):
    # tiny with 8 experts, k = 2, over ep = 2 (4 local experts): N = 4 x 64 = 256 tokens per
    # rank. Under hot-expert half of each rank's tokens choose the hot expert (128 pairs) and the
    # other 2 x 256 - 128 = 384 choices spread over the 7 others in whole pairs (55, 55, 55, 55,
    # 55, 55, 54); EP rank 0 holds the hot expert and the next three and receives as much from
    # the other rank: 256 + 3 x 110 = 586 rows, the group's mean rank N k = 512. Communication is
    # free and only GEMMs cost time, so the mean rank's wait, its exposed ep, is (1 - 512 / 586)
    # of the busiest rank's expert GEMMs, fc and proj, forward and backward (2x).
    cal = tmp_path / "cal.h5"
    fits = FREE + [("all_to_all", 2, "shm", [(1, 1 << 30, 0.0, 0.0)])]
    write_cal(cal, fits, gemm_parts=("fwd", "dinput", "dweight", "bwd", "router.fwd", "router.bwd", "expert.fc.fwd",
                                     "expert.proj.fwd", "expert.fc.bwd", "expert.proj.bwd"))
    moe = ["--model", "tiny", "--experts", "8", "--top-k", "2", "--mesh", "ep=2"]
    even = plan(cal, *moe, "--routing", "balanced", world=2)
    hot = plan(cal, *moe, "--routing", "hot-expert", world=2)
    assert even["exposed_s"].get("ep", 0.0) == pytest.approx(0.0, abs=1e-12)
    C, F, layers = 64, 256, 2
    busiest = 256 + 3 * 110
    expert_gemms = NS * 2 * C * F * (256 + 3 * 110) * 2 * 3 * layers  # fc + proj, forward 1x + backward 2x
    assert hot["exposed_s"]["ep"] == pytest.approx((1 - 512 / busiest) * expert_gemms, rel=1e-9)
    r = hot["per_rank"][0]
    assert r["compute_s"] + sum(r["exposed_s"].values()) == pytest.approx(r["step_time_s"], rel=1e-9)
    assert any("hot-expert" in n for n in hot["notes"])


def test_the_drift_adds_less_where_the_busiest_rank_leads(tmp_path):
    # The same tiny MoE model as above, with an arrival skew: each ep call also waits for the
    # drift between the ranks. Balanced, that is half the skew's share of the compute since the
    # last call; hot-expert, the busiest rank already leads the exchange after the experts by
    # the loads' difference (charged as the idle share), and the drift changes by how much it
    # leads rather than adding its own wait (arrival_wait: a folded normal's mean). So the skew
    # adds less exposed ep to the hot plan than to the balanced one, and the busiest rank's step
    # (the plan's) grows by what it adds.
    fits = FREE + [("all_to_all", 2, "shm", [(1, 1 << 30, 0.0, 0.0)])]
    parts = ("fwd", "dinput", "dweight", "bwd", "router.fwd", "router.bwd", "expert.fc.fwd", "expert.proj.fwd",
             "expert.fc.bwd", "expert.proj.bwd")
    plain, skewed = tmp_path / "plain.h5", tmp_path / "skewed.h5"
    write_cal(plain, fits, gemm_parts=parts)
    write_cal(skewed, fits, gemm_parts=parts, compute_attrs={"arrival_skew": 0.1})
    moe = ["--model", "tiny", "--experts", "8", "--top-k", "2", "--mesh", "ep=2"]
    got = {(c, r): plan(cal, *moe, "--routing", r, world=2) for c, cal in (("plain", plain), ("skewed", skewed))
           for r in ("balanced", "hot-expert")}
    added = {r: got["skewed", r]["exposed_s"]["ep"] - got["plain", r]["exposed_s"].get("ep", 0.0)
             for r in ("balanced", "hot-expert")}
    assert 0 < added["hot-expert"] < added["balanced"]
    for r in ("balanced", "hot-expert"):
        a, b = got["plain", r], got["skewed", r]
        extra = sum(b["exposed_s"].values()) - sum(a["exposed_s"].values())
        assert b["step_time_s"] == pytest.approx(a["step_time_s"] + extra, rel=1e-9)


def test_posted_factors_time_the_data_parallel_calls(tmp_path):
    # dp=2 over tp=2 (world 4): the gradient buckets (dp) are posted, the tensor-parallel
    # all-reduces blocking. A posted factor of 0.5 halves exposed dp and leaves exposed tp as the
    # blocking factor (2.0) makes it; without posted factors the buckets take the blocking one.
    alpha = 5e-6
    parts = ("fwd", "dinput", "dweight", "bwd")
    fits = [("all_reduce", 2, "shm", [(1, 1 << 30, alpha, 0.0)])]
    plain, posted = tmp_path / "plain.h5", tmp_path / "posted.h5"
    write_cal(plain, fits, gemm_parts=parts, compute_attrs={"in_step_factors": '{"all_reduce": 2.0}'})
    write_cal(posted, fits, gemm_parts=parts, compute_attrs={"in_step_factors": '{"all_reduce": 2.0}',
                                                             "posted_factors": '{"all_reduce": 0.5}'})
    args = ("--model", "tiny", "--mesh", "tp=2,dp=2")
    a, b = plan(plain, *args, world=4), plan(posted, *args, world=4)
    assert b["exposed_s"]["tp"] == pytest.approx(a["exposed_s"]["tp"], rel=1e-12)
    assert b["exposed_s"]["dp"] == pytest.approx(a["exposed_s"]["dp"] / 4, rel=1e-9)  # 0.5 for 2.0
    assert any("posted calls" in n and "all_reduce 0.50" in n for n in b["notes"])


def test_zero3_meets_only_where_a_rank_blocks(tmp_path):
    # ZeRO-3 over dp=2, 2 micro-batches. The executor waits at once on each pass's first gather
    # and on the step's last reduce-scatter (the ranks meet there); its polls complete the
    # prefetched gathers and the other reduce-scatters while the rank computes (overlapped: the
    # calibration's overlapped factors, no arrival wait, the compute since the last meeting runs
    # on). Only GEMMs cost time (the embedding's backward and the optimizer take none).
    parts = ("fwd", "dinput", "dweight", "bwd")
    a = 5e-6
    fits = [(c, 2, "shm", [(1, 1 << 30, a, 0.0)]) for c in ("all_gather", "reduce_scatter")]
    free = [(c, 2, "shm", [(1, 1 << 30, 0.0, 0.0)]) for c in ("all_gather", "reduce_scatter")]
    none = '{"all_gather": 0.0, "reduce_scatter": 0.0}'
    cals = {
        "free": (free, {}),
        "gathers": (fits, {"posted_factors": '{"all_gather": 1.0, "reduce_scatter": 0.0}',
                           "overlapped_factors": '{"all_gather": 1.0, "reduce_scatter": 0.0}'}),
        "scatters": (fits, {"posted_factors": '{"all_gather": 0.0, "reduce_scatter": 1.0}',
                            "overlapped_factors": '{"all_gather": 0.0, "reduce_scatter": 1.0}'}),
        "meetings": (fits, {"posted_factors": '{"all_gather": 1.0, "reduce_scatter": 1.0}', "overlapped_factors": none}),
        "posts": (fits, {"posted_factors": none, "overlapped_factors": none,
                         "post_factors": '{"dp/all_gather": 0.5, "dp/reduce_scatter": 0.25}'}),
        "skewed": (free, {"arrival_skew": 0.1, "arrival_skews": '{"dp/all_gather": 0.2, "dp/reduce_scatter": 0.0}'}),
    }
    got = {}
    for name, (f, attrs) in cals.items():
        path = tmp_path / f"{name}.h5"
        write_cal(path, f, gemm_parts=parts, compute_attrs=attrs)
        got[name] = plan(path, "--model", "tiny", "--mesh", "dp=2", "--zero", "3", "--micro-batches", "2", world=2)
    dp = {n: got[n]["exposed_s"].get("dp", 0.0) for n in got}
    gathers, scatters = dp["gathers"] / a, dp["scatters"] / a
    assert gathers == pytest.approx(round(gathers)) and gathers > 4
    assert scatters == pytest.approx(round(scatters)) and scatters > 1
    # 4 passes' first gathers and the step's last reduce-scatter: the meetings
    assert dp["meetings"] == pytest.approx(5 * a, rel=1e-9)
    assert dp["posts"] == pytest.approx(0.5 * dp["gathers"] + 0.25 * dp["scatters"], rel=1e-9)
    assert any("posting a call" in n and "dp/all_gather 0.500" in n for n in got["posts"]["notes"])
    assert any("without a meeting" in n for n in got["meetings"]["notes"])
    assert any("but ZeRO-3's calls that the polls complete" in n for n in got["meetings"]["notes"])
    # with every call waited on at once (no prefetch, no overlap) none is polled, and the poll
    # note says every call is charged in full
    waited = plan(tmp_path / "meetings.h5", "--model", "tiny", "--mesh", "dp=2", "--zero", "3", "--micro-batches", "2",
                  "--prefetch", "0", "--no-overlap", world=2)
    assert waited["exposed_s"]["dp"] == pytest.approx(dp["gathers"] + dp["scatters"], rel=1e-9)
    assert not any("but ZeRO-3's" in n for n in waited["notes"])
    # the skew: each meeting waits half its site's rate of the compute since the last meeting.
    # The gathers' (0.2) cover the step from its start to the last backward's first gather (the
    # forward, backward and forward before it); the last reduce-scatter's (0) the last backward.
    r = got["free"]["per_rank"][0]
    compute, backward = r["compute_s"], r["phases"]["backward"]
    assert dp["skewed"] == pytest.approx(0.5 * 0.2 * (compute - backward / 2), rel=1e-9)
