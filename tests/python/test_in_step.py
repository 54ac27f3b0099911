"""meshbench.in_step on generated step/events: the calibration's arrival skew (overall and per
call site), its in-step, posted and overlapped factors and its post factors, matched across the
ranks call by call; which of ZeRO-3's calls are no meeting."""
import json

import pytest
from meshbench import compute, in_step


def _ev(rank, step, dim, kind, t0, t1, t_wait=None, nbytes=0):
    return {"rank": rank, "step": step, "dim": dim, "kind": kind, "t_start": t0, "t_end": t1,
            "t_wait": t0 if t_wait is None else t_wait, "bytes": nbytes}


def test_arrival_skew_and_in_step_factor_from_matched_calls():
    # Two ranks, one step: a compute op from 0, then two blocking all-reduces. Rank 1 reaches the
    # first 0.1 s after rank 0 (segments 1.0 and 1.1: skew 0.1 over 1.05) and the second 0.2 s
    # after (segments 2.0 and 2.2 from the first's end: 0.2 over 2.1). Each all-reduce runs 0.3 s
    # from the last arrival to the first completion, 1.5x a fit of 0.2 s.
    ev = [_ev(r, 0, "-", "matmul.fwd", 0.0, 0.5) for r in (0, 1)]
    ev += [_ev(0, 0, "tp", "all_reduce", 1.0, 1.4, nbytes=1024), _ev(1, 0, "tp", "all_reduce", 1.1, 1.4, nbytes=1024)]
    ev += [_ev(0, 0, "tp", "all_reduce", 3.4, 3.9, nbytes=1024), _ev(1, 0, "tp", "all_reduce", 3.6, 3.9, nbytes=1024)]
    # a posted call (t_wait after t_start) arrives when its wait begins: rank 0 at 4.2, rank 1
    # at 4.3 (segments 0.3 and 0.4 from the last end, 3.9: skew 0.1 over 0.35); it is no sample
    # of the in-step factor (it progressed before the wait). A pipeline call is neither.
    ev += [_ev(0, 0, "dp", "all_reduce", 4.0, 4.5, t_wait=4.2, nbytes=8), _ev(1, 0, "dp", "all_reduce", 4.0, 4.5,
                                                                             t_wait=4.3, nbytes=8)]
    ev += [_ev(r, 0, "pp", "send", 5.0, 5.1) for r in (0, 1)]
    runs = [{"events": ev}, {"events": [_ev(0, 0, "tp", "all_reduce", 1.0, 2.0)]}]  # a 1-rank run: left out
    skew, calls, per_run = in_step.arrival_skew(runs)
    assert calls == 3 and len(per_run) == 1
    assert skew == pytest.approx((0.1 + 0.2 + 0.1) / (1.05 + 2.1 + 0.35))
    # the median over runs: a third run whose ranks drift 10x as fast does not set it
    slow = [dict(e, t_start=e["t_start"] * (1.2 if e["rank"] == 1 else 1.0), t_end=e["t_end"], t_wait=e["t_wait"])
            for e in ev if e["dim"] == "-"]
    slow += [_ev(0, 0, "tp", "all_reduce", 1.0, 2.0), _ev(1, 0, "tp", "all_reduce", 2.0, 2.0)]  # 1.0 over 1.5
    skew3, calls3, per3 = in_step.arrival_skew([runs[0], {"events": ev}, {"events": slow}])
    assert calls3 == 7 and sorted(per3)[-1] == pytest.approx(1.0 / 1.5) and skew3 == pytest.approx(skew)
    # a run under an uneven routing workload is left out (the model times its waits as exposed
    # ep); a balanced one counts: of two runs the lower middle, the drifting one left out
    fast = {"events": [_ev(r, 0, "-", "matmul.fwd", 0.0, 0.5) for r in (0, 1)] +
            [_ev(0, 0, "tp", "all_reduce", 1.0, 2.0), _ev(1, 0, "tp", "all_reduce", 1.01, 2.0)]}  # 0.01 over 1.005
    ep2 = '{"dp":1,"tp":1,"pp":1,"cp":1,"ep":2}'
    hot = dict(fast, attrs={"routing": "hot-expert", "degrees": ep2})
    assert in_step.arrival_skew([runs[0], hot])[0] == pytest.approx(skew)
    for r in ("zipf:1.2", "rotating", "hot-rank"):
        assert in_step.arrival_skew([runs[0], dict(hot, attrs={"routing": r, "degrees": ep2})])[0] == pytest.approx(skew)
    assert in_step.arrival_skew([runs[0], dict(hot, attrs={"routing": "balanced", "degrees": ep2})])[0] == \
        pytest.approx(0.01 / 1.005)
    # without an expert-parallel group no rank leads by its loads: the run counts
    dp2 = '{"dp":2,"tp":1,"pp":1,"cp":1,"ep":1}'
    assert in_step.arrival_skew([runs[0], dict(hot, attrs={"routing": "hot-expert", "degrees": dp2})])[0] == \
        pytest.approx(0.01 / 1.005)
    assert in_step.arrival_skew([hot]) == (None, 0, [])
    fits = lambda coll, n, size: 0.2 if (coll, n, size) == ("all_reduce", 2, 1024) else None
    f, per, calls = in_step.in_step_factors(runs, fits)
    assert calls == 2 and f == pytest.approx(1.5) and per == {"all_reduce": pytest.approx(1.5)}
    assert in_step.arrival_skew([runs[1]]) == (None, 0, [])
    # the posted dp all-reduce: the last rank began to wait at 4.3, the first finished at 4.5:
    # 0.2 s left of a fit of 0.4 s (posted factor 0.5); the blocking calls are not its samples
    pfits = lambda coll, n, size: {1024: 0.2, 8: 0.4}.get(size) if (coll, n) == ("all_reduce", 2) else None
    f, per, calls = in_step.posted_factors(runs, pfits)
    assert calls == 1 and f == pytest.approx(0.5) and per == {"all_reduce": pytest.approx(0.5)}
    assert in_step.posted_factors([runs[1]], pfits) == (None, {}, 0)
    assert in_step.in_step_factors([runs[1]], fits) == (None, {}, 0)


def test_arrival_skews_per_call_site():
    # The same run as above, per (dim, collective): the two blocking tp all-reduces drift 0.1 +
    # 0.2 s over segments of 1.05 + 2.1 s; the posted dp all-reduce 0.1 s over 0.35 s.
    ev = [_ev(r, 0, "-", "matmul.fwd", 0.0, 0.5) for r in (0, 1)]
    ev += [_ev(0, 0, "tp", "all_reduce", 1.0, 1.4), _ev(1, 0, "tp", "all_reduce", 1.1, 1.4)]
    ev += [_ev(0, 0, "tp", "all_reduce", 3.4, 3.9), _ev(1, 0, "tp", "all_reduce", 3.6, 3.9)]
    ev += [_ev(0, 0, "dp", "all_reduce", 4.0, 4.5, t_wait=4.2), _ev(1, 0, "dp", "all_reduce", 4.0, 4.5, t_wait=4.3)]
    skews, runs = in_step.arrival_skews([{"events": ev}])
    assert skews == {"dp/all_reduce": pytest.approx(0.1 / 0.35), "tp/all_reduce": pytest.approx(0.3 / 3.15)}
    assert runs == {"dp/all_reduce": 1, "tp/all_reduce": 1}
    # a second run with one ZeRO-style gather (0.3 s over 1.0 s) and tp all-reduces that drift
    # 10x as fast: per key the median over the runs that make such calls (of two, the lower)
    other = [_ev(r, 0, "-", "matmul.fwd", 0.0, 0.5) for r in (0, 1)]
    other += [_ev(0, 0, "tp", "all_reduce", 1.0, 2.0), _ev(1, 0, "tp", "all_reduce", 2.0, 2.0)]  # 1.0 over 1.5
    other += [_ev(0, 0, "dp", "all_gather", 2.0, 3.5, t_wait=2.85), _ev(1, 0, "dp", "all_gather", 2.0, 3.5,
                                                                         t_wait=3.15)]  # 0.3 over 1.0
    skews, runs = in_step.arrival_skews([{"events": ev}, {"events": other}])
    assert skews == {"dp/all_gather": pytest.approx(0.3), "dp/all_reduce": pytest.approx(0.1 / 0.35),
                     "tp/all_reduce": pytest.approx(0.3 / 3.15)}
    assert runs == {"dp/all_gather": 1, "dp/all_reduce": 1, "tp/all_reduce": 2}
    # an uneven routing workload over ep is no sample (arrival_skew's rule); one rank: no calls
    ep2 = '{"dp":1,"tp":1,"pp":1,"cp":1,"ep":2}'
    assert in_step.arrival_skews([{"events": other, "attrs": {"routing": "hot-expert", "degrees": ep2}}]) == ({}, {})
    assert in_step.arrival_skews([{"events": [_ev(0, 0, "tp", "all_reduce", 1.0, 2.0)]}]) == ({}, {})
    # the calibration file's attributes carry them beside the overall skew
    a = compute.attrs([{"events": ev, "label": "a", "ranks": 2, "command": "c", "plan_command": "p", "file": "f"}],
                      1, "small", {"steps": 1, "warmup": 0})
    assert json.loads(a["arrival_skews"]) == {"dp/all_reduce": pytest.approx(0.1 / 0.35),
                                              "tp/all_reduce": pytest.approx(0.3 / 3.15)}
    assert a["arrival_skew"] == pytest.approx(0.4 / 3.5) and "dim/collective" in a["arrival_skews_rule"]


def _z3(rank, kind, micro, phase, t_post, t_wait, t_end, post=0.01, nbytes=1024):
    """A posted ZeRO-3 call: posted at t_post (for `post` s), waited on from t_wait (t_wait ==
    t_end: a test() found it complete)."""
    return {"rank": rank, "step": 0, "dim": "dp", "kind": kind, "microbatch": micro, "chunk": 0, "phase": phase,
            "t_post": t_post, "t_posted": t_post + post, "t_start": t_post, "t_wait": t_wait, "t_end": t_end,
            "bytes": nbytes}


def test_zero3_calls_the_polls_complete_are_no_meeting():
    # One step of two ranks, one micro-batch: the forward's first gather (waited on once posted:
    # rank 0 from 1.01, rank 1 from 1.11, done at 1.2), a prefetched gather (rank 0 waits from
    # 1.9 to 2.0, rank 1's test finds it done at 2.0), a reduce-scatter the polls complete (3.5)
    # and the step's last reduce-scatter (waited on from 4.01 and 4.21, done at 4.3).
    ev = [_ev(r, 0, "-", "matmul.fwd", 0.0, 0.5) for r in (0, 1)]
    for r in (0, 1):
        ev += [_z3(r, "all_gather", 0, "F", 1.0 + 0.1 * r, 1.01 + 0.1 * r, 1.2),
               _z3(r, "all_gather", 0, "F", 1.0 + 0.1 * r, 1.9 if r == 0 else 2.0, 2.0),
               _z3(r, "reduce_scatter", 0, "B", 3.0, 3.5, 3.5),
               _z3(r, "reduce_scatter", 0, "B", 4.0, 4.01 + 0.2 * r, 4.3)]
    attrs = {"zero_stage": 3, "prefetch": 1, "overlap": 1}
    run = {"events": ev, "attrs": attrs}
    over = in_step.overlapped_calls(run)
    assert over == {id(e) for e in ev if e["dim"] == "dp" and e["t_end"] in (2.0, 3.5)}
    # the meetings' gaps: 0.1 at the first gather over segments 1.01 and 1.11 from the step's
    # start; 0.2 at the last reduce-scatter over segments from the first gather's end (1.2): 2.81
    # and 3.01; the overlapped calls end no segment
    skews, _ = in_step.arrival_skews([run])
    assert skews == {"dp/all_gather": pytest.approx(0.1 / 1.06), "dp/reduce_scatter": pytest.approx(0.2 / 2.91)}
    assert in_step.arrival_skew([run])[0] == pytest.approx(0.3 / (1.06 + 2.91))
    fits = lambda coll, n, size: 0.1 if n == 2 and size == 1024 else None
    # overlapped: the gather blocked 0.1 s on rank 0, 0 on rank 1 (mean 0.05 of a 0.1 s fit); the
    # reduce-scatter 0 on both
    f, per, calls = in_step.overlapped_factors([run], fits)
    assert calls == 2 and per == {"all_gather": pytest.approx(0.5), "reduce_scatter": 0.0}
    assert f == pytest.approx(0.05 / 0.2)
    # the posted factors count the meetings only: the gather from 1.11 to 1.2 (0.09 of 0.1), the
    # reduce-scatter from 4.21 to 4.3
    f, per, calls = in_step.posted_factors([run], fits)
    assert calls == 2 and per == {"all_gather": pytest.approx(0.9), "reduce_scatter": pytest.approx(0.9)}
    # posting: 0.01 s per call of a 0.1 s fit, every call of the site
    posts, calls = in_step.post_factors([run], fits)
    assert calls == 4 and posts == {"dp/all_gather": pytest.approx(0.1), "dp/reduce_scatter": pytest.approx(0.1)}
    # without prefetch every gather is waited on at once, without overlap every reduce-scatter
    ids = lambda kind: {id(e) for e in ev if e["kind"] == kind}
    assert in_step.overlapped_calls({"events": ev, "attrs": dict(attrs, prefetch=0)}) == over - ids("all_gather")
    assert in_step.overlapped_calls({"events": ev, "attrs": dict(attrs, overlap=0)}) == over - ids("reduce_scatter")
    # other runs have none: the same calls of a ZeRO-2 run are all meetings
    assert in_step.overlapped_calls({"events": ev, "attrs": dict(attrs, zero_stage=2)}) == set()
    assert in_step.overlapped_factors([{"events": ev}], fits) == (None, {}, 0)
