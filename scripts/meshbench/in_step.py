"""meshbench.in_step: what the calibration's profiled runs say about collectives inside a step
(scripts/calibrate --compute; docs/predict.md, "Durations and the rules"): how far apart the
ranks arrive (the arrival skew, overall and per call site) and how much longer a call takes in
a step than its isolated fit (the in-step and posted factors). Each reads step/events of runs of
2 or more ranks (reader.read_events), matched across the ranks call by call."""
import json

# The dimensions whose calls the executor posts and the step model times with the posted factors
# (parallel/predict/op_list.cpp posted_dim).
POSTED_DIMS = ("dp", "edp")


def _arrival(e):
    """When a rank reached a call: its start, or for a posted call when it began to wait."""
    return max(e["t_start"], e.get("t_wait", e["t_start"]))


def _int_attr(a, key, default):
    try:
        return int(a.get(key, default))
    except (TypeError, ValueError):
        return default


def overlapped_calls(run):
    """The ids (id(event)) of a run's calls that the executor's polls complete while the rank
    computes, so that no rank blocks on them long and the ranks do not meet there (the step
    model's PassItem::overlapped, parallel/predict/op_list.cpp): in a ZeRO-3 run, per rank and
    step, the dp gathers its prefetch posted a unit ahead (every dp/all_gather of a pass but the
    pass's first, with --prefetch 1 or more) and, with overlap on, the dp reduce-scatters before
    the step's last. Empty for every other run."""
    a = run.get("attrs") or {}
    if _int_attr(a, "zero_stage", 0) != 3:
        return set()
    prefetch, overlap = _int_attr(a, "prefetch", 1) > 0, _int_attr(a, "overlap", 1) != 0
    out, by = set(), {}
    for e in run.get("events") or []:
        if e["dim"] == "dp":
            by.setdefault((e["rank"], e["step"]), []).append(e)
    for evs in by.values():
        evs.sort(key=lambda e: e["t_start"])
        seen = set()
        for e in evs:
            if e["kind"] == "all_gather":
                key = (e.get("microbatch"), e.get("chunk"), e.get("phase"))
                if key in seen and prefetch:
                    out.add(id(e))
                seen.add(key)
        rs = [e for e in evs if e["kind"] == "reduce_scatter"]
        if overlap:
            out.update(id(e) for e in rs[:-1])
    return out


def matched_calls(run, posted=False, overlapped=False):
    """The collectives of one run of 2 or more ranks, matched across its ranks: a list of
    {rank: (event, segment)} with every rank present. A call is matched by (step, dim, kind,
    its index among that step's calls of that dim and kind on the rank); its segment runs from
    the rank's last communication call's end in the step (a completed collective: the ranks
    met), or from its first event of the step, to its arrival (_arrival). Blocking calls only,
    unless `posted`: then posted calls (t_wait after t_start: data parallel's buckets, ZeRO's
    reductions, the overlapped exchanges) too, arriving when the rank began to wait on them.
    Either way a posted call's end ends a segment. ZeRO-3's calls that the polls complete
    (overlapped_calls) are no meeting: they are left out and do not end a segment, unless
    `overlapped`, which returns those calls alone (matched, their segments not meaningful).
    Pipeline sends and receives are left out (their wait is the bubble). Times on rank 0's
    clock (step/events). [] for one rank."""
    by_rank = {}
    for e in run.get("events") or []:
        by_rank.setdefault(e["rank"], []).append(e)
    if len(by_rank) < 2:
        return []
    skip = overlapped_calls(run)
    seen = {}
    for rank, evs in by_rank.items():
        evs.sort(key=lambda e: e["t_start"])
        count, met = {}, {}
        for e in evs:
            met.setdefault(e["step"], e["t_start"])  # the step's first event
            if e["dim"] in ("-", "pp"):
                continue
            k = (e["step"], e["dim"], e["kind"])
            i = count.get(k, 0)
            count[k] = i + 1
            if (id(e) in skip) != overlapped:
                continue
            if posted or overlapped or e.get("t_wait", e["t_start"]) <= e["t_start"]:
                seen.setdefault(k + (i,), {})[rank] = (e, max(0.0, _arrival(e) - met[e["step"]]))
            met[e["step"]] = max(met[e["step"]], e["t_end"])
    return [c for c in seen.values() if len(c) == len(by_rank)]


# Routing workloads whose uneven expert loads the step model charges itself (the group's mean
# rank waits for the busiest: parallel/predict, "Expert parallel"): a run under one of them is
# no sample of the random drift between ranks (its ranks arrive apart by design).
UNEVEN_ROUTINGS = ("hot-expert", "hot-rank", "zipf", "rotating")


def uneven_routing(run):
    """The run's routing workload when the step model times its uneven loads itself (one of
    UNEVEN_ROUTINGS over an expert-parallel group: parallel/predict/op_list.cpp charges the idle
    share only for ep > 1; under dp alone every rank computes its own tokens), else ''."""
    a = run.get("attrs") or {}
    routing = str(a.get("routing") or "")
    try:
        ep = int(json.loads(a.get("degrees") or "{}").get("ep", 1))
    except (ValueError, TypeError, AttributeError):
        ep = 1
    return routing if ep > 1 and routing.split(":", 1)[0] in UNEVEN_ROUTINGS else ""


def _site_gaps(runs):
    """Per counted run (2 or more ranks, no uneven routing workload: uneven_routing), in order,
    {"dim/collective": [summed max - min arrival, summed mean segment, calls]} over its matched
    calls, posted ones included (matched_calls(run, posted=True): data parallel's sync after the
    whole backward is where the longest segments end). The arrival gap, not the wait it causes:
    for a posted call that progressed inside the later rank's other MPI calls, the earlier rank
    stops waiting sooner than the gap (twice the mean wait less the time after the last arrival
    was tried as the measure on 2026-12-03 and predicted worse: docs/history.md, "The
    arrival skew per call site")."""
    out = []
    for run in runs:
        if uneven_routing(run):
            continue
        acc = {}
        for c in matched_calls(run, posted=True):
            e0 = next(iter(c.values()))[0]
            arrivals = [_arrival(e) for e, _ in c.values()]
            a = acc.setdefault(f"{e0['dim']}/{e0['kind']}", [0.0, 0.0, 0])
            a[0] += max(arrivals) - min(arrivals)
            a[1] += sum(seg for _, seg in c.values()) / len(c)
            a[2] += 1
        out.append(acc)
    return out


def _lower_median(xs):
    return sorted(xs)[(len(xs) - 1) // 2]


def arrival_skew(runs):
    """(skew, calls, per_run): how far apart the ranks of a run reach the same collective, per
    second since each last met the others (its compute and host work in between). Per counted
    run (_site_gaps: the uneven routing workloads left out, as the model charges their waits as
    exposed ep already and their ranks arrive apart by design): the sum over its matched calls
    of max - min arrival, over the sum of the ranks' mean segment; `skew` is the median over the
    runs (the lower middle of an even count): one run whose rank the OS descheduled for tens of
    milliseconds moves it little (a pooled sum over the runs let one such run set it: 0.08
    against 0.05 here; pooled again on 2026-12-03, it did no better out of sample:
    docs/history.md, "Checks I, J and K"). per_run: each counted run's ratio. (None, 0, [])
    when no run counts."""
    per_run, calls = [], 0
    for acc in _site_gaps(runs):
        num, den = sum(a[0] for a in acc.values()), sum(a[1] for a in acc.values())
        calls += sum(a[2] for a in acc.values())
        if den > 0:
            per_run.append(num / den)
    if not per_run:
        return None, 0, []
    return _lower_median(per_run), calls, per_run


def arrival_skews(runs):
    """({"dim/collective": skew}, {"dim/collective": runs}): arrival_skew per call site. The
    ranks drift apart at different rates before different calls: ZeRO-3's gathers and
    reductions (dp/all_gather, dp/reduce_scatter) measured 1.7 to 2.8 times the rate of data
    parallel's bucket all-reduces (dp/all_reduce) in each of nine checks of 2026-12-03 (the
    median over each check's calibrations; docs/history.md, "The arrival skew per call
    site"). Per counted run and per site of its matched calls (_site_gaps), the summed gap over
    the summed segment; per site the median over the runs that make such calls (the lower
    middle of an even count)."""
    per = {}
    for acc in _site_gaps(runs):
        for k, (num, den, _) in acc.items():
            if den > 0:
                per.setdefault(k, []).append(num / den)
    return ({k: _lower_median(v) for k, v in sorted(per.items())}, {k: len(v) for k, v in sorted(per.items())})


def _ratio_factors(samples, predict, site=False):
    """(overall, {collective: factor}, calls) of (events, seconds taken) samples: per
    collective (per call site "dim/collective" with `site`) the summed seconds over the summed
    fit predictions (all_to_allv by the all_to_all fit); samples without a fit are left out.
    (None, {}, 0) without one."""
    sums = {}
    for evs, took in samples:
        kind = "all_to_all" if evs[0]["kind"] == "all_to_allv" else evs[0]["kind"]
        t = predict(kind, len(evs), max(int(e.get("bytes", 0)) for e in evs))
        if t is None or t <= 0:
            continue
        a = sums.setdefault(f"{evs[0]['dim']}/{evs[0]['kind']}" if site else kind, [0.0, 0.0, 0])
        a[0] += max(0.0, took)
        a[1] += t
        a[2] += 1
    if not sums:
        return None, {}, 0
    total = [sum(v[0] for v in sums.values()), sum(v[1] for v in sums.values())]
    return total[0] / total[1], {k: v[0] / v[1] for k, v in sums.items()}, sum(v[2] for v in sums.values())


def in_step_factors(runs, predict):
    """(factor over every collective, {collective: factor}, calls): how much longer a blocking
    collective takes inside a step than its fit says (the fit comes from the isolated
    collective benchmarks: a barrier before each call, the same buffer each time): the sum over
    matched calls (matched_calls) of the time from the last rank's arrival to the first rank's
    completion (min t_end - max t_start), over the sum of the fit's predictions, per collective
    and over all. `predict(collective, group_size, bytes)` gives the fit's seconds or None (no
    fit: the call is left out; all_to_allv is timed by the all_to_all fit, as the step model
    does). (None, {}, 0) without a call."""
    samples = []
    for run in runs:
        for c in matched_calls(run):
            evs = [e for e, _ in c.values()]
            samples.append((evs, min(e["t_end"] for e in evs) - max(e["t_start"] for e in evs)))
    return _ratio_factors(samples, predict)


def posted_factors(runs, predict):
    """(factor over every collective, {collective: factor}, calls) of the posted calls of the
    dimensions the step model times as posted (POSTED_DIMS: data parallel's buckets, ZeRO's
    reductions and gathers; t_wait after t_start), as in_step_factors does for blocking ones
    but from the wait on: the sum over posted calls matched across the ranks (matched_calls(run, posted=True)) of the time from the
    last rank's start of the wait to the first rank's completion (0 when one rank found it done),
    over the sum of the fits' predictions. Under --progress poll a posted call progresses inside
    the MPI calls made meanwhile (the next buckets' posts, the waits on earlier ones), so what is
    left at its wait is less than a blocking call's time. (None, {}, 0) without a call."""
    samples = []
    for run in runs:
        for c in matched_calls(run, posted=True):
            evs = [e for e, _ in c.values()]
            if evs[0]["dim"] not in POSTED_DIMS or not all(e.get("t_wait", e["t_start"]) > e["t_start"] for e in evs):
                continue  # blocking (in_step_factors'), or a dimension the model times as blocking
            samples.append((evs, min(e["t_end"] for e in evs) - max(_arrival(e) for e in evs)))
    return _ratio_factors(samples, predict)


def overlapped_factors(runs, predict):
    """(factor over every collective, {collective: factor}, calls) of ZeRO-3's calls that the
    polls complete while the rank computes (overlapped_calls): the sum over those calls matched
    across the ranks of the ranks' mean blocked time (t_end - t_wait: 0 where a test() found the
    call complete) over the sum of the fits' predictions. What such a call still costs at its
    wait, the step model's charge for PassItem::overlapped. (None, {}, 0) without a call."""
    samples = []
    for run in runs:
        for c in matched_calls(run, overlapped=True):
            evs = [e for e, _ in c.values()]
            samples.append((evs, sum(e["t_end"] - e.get("t_wait", e["t_start"]) for e in evs) / len(evs)))
    return _ratio_factors(samples, predict)


def post_factors(runs, predict):
    """({"dim/collective": factor}, calls): the time a rank spends posting a call (t_posted -
    t_post in step/events: MPI may copy or hand over the message there; the time split counts it
    as exposed), per call site, over the fits' predictions: per site the sum over the site's
    calls matched across the ranks, blocking (which post nothing) and posted, of the ranks' mean
    posting time over the sum of the fits' times. The step model charges every call of the site
    this share of its fit. ({}, 0) without a call."""
    samples = []
    for run in runs:
        for c in matched_calls(run, posted=True) + matched_calls(run, overlapped=True):
            evs = [e for e, _ in c.values()]
            samples.append((evs, sum(max(0.0, e.get("t_posted", e["t_start"]) - e.get("t_post", e["t_start"]))
                                     for e in evs) / len(evs)))
    _, per, calls = _ratio_factors(samples, predict, site=True)
    return per, calls
