"""tests/python/h5files.py: small meshbench result files written with h5py in the layout the
binaries write (docs/results.md; the compound types of src/results and parallel/step), so
that every value a test expects is known exactly. Not a test module: the tests import it.
"""
import json

import h5py
import numpy as np

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
SPLIT_T = np.dtype([("rank", "<i4"), ("category", "S24"), ("seconds", "<f8")])
# Per rank and timed step (s): step = compute + exposed.dp + bubble + other on each rank.
SPLIT = [(0, b"step", 0.25), (0, b"compute", 0.15), (0, b"exposed.dp", 0.05), (0, b"bubble", 0.0), (0, b"other", 0.05),
         (1, b"step", 0.35), (1, b"compute", 0.20), (1, b"exposed.dp", 0.10), (1, b"bubble", 0.0), (1, b"other", 0.05)]


def run_attrs(g, **kw):
    base = {"binary": "all_reduce_bench", "tag": "shm", "backend": "mpi", "mem": "host", "status": "ok",
            "world_size": 2, "nodes": 1, "ranks_per_node": 2, "oversubscribed": 0, "iters": 7,
            "mesh": "{}", "start_time": "2026-12-01T00:00:00Z"}
    base.update(kw)
    for k, v in base.items():
        g.attrs[k] = v


def collective_file(path, tag="shm", scale=1.0, run_id="r1", start="2026-12-01T00:00:00Z", samples=None,
                    status="ok"):
    """all_reduce over a tp group at 8 B and 1 KiB: t_median 1 us and 3 us (x scale), busbw
    0.008 and 0.34 GB/s (/ scale); samples [sizes, iters, ranks] (default 0, 1, 2, ...)."""
    with h5py.File(path, "a") as f:
        run = f.create_group(f"runs/{run_id}")
        run_attrs(run, mesh='{"tp":2}', tag=tag, start_time=start, status=status)
        run["topology/groups"] = np.array([(b"tp", 0, 2, b"0,1", 1, b"intra")], GROUPS_T)
        g = run.create_group("collectives/all_reduce/float-sum-out-of-place-tp")
        for k, v in {"collective": "all_reduce", "placement": "out-of-place", "group": "tp", "warmup": 3}.items():
            g.attrs[k] = v
        s = scale
        g["summary"] = np.array([(8, 2, b"float", b"sum", 0, -1, 1e-6 * s, 9e-7 * s, 1.1e-6 * s, 2e-6 * s, 5e-6 * s,
                                  0.008 / s, 0.008 / s, 0, 1),
                                 (1024, 256, b"float", b"sum", 0, -1, 3e-6 * s, 2e-6 * s, 3e-6 * s, 4e-6 * s,
                                  9e-6 * s, 0.34 / s, 0.34 / s, 0, 0)], ROW_T)
        g["sizes"] = np.array([(8, 2, 8, 8, 16), (1024, 256, 1024, 1024, 2048)], SIZES_T)
        g["samples"] = np.arange(2 * 3 * 2, dtype=float).reshape(2, 3, 2) if samples is None else samples


def step_file(path, stage=0, steps=2, rank0_opt=800.0, split=True, run_id=None, degrees=None, tag="shm",
              start="2026-12-01T00:00:00Z", step_times=None, median=0.25, tokens=1000.0, global_batch=8,
              microbatches=2, status="ok", order="tp-cp-ep-dp-pp", ranks=2):
    """A 2-rank step run: comm totals over `steps` steps, rank 1 moving more than rank 0; with
    split, step/time_split (SPLIT), else the layout before it. step_times [steps, ranks]
    defaults to [[0.1, 0.2], [0.3, 0.4]]; median and tokens go to the summary."""
    degrees = degrees or {"dp": 2, "tp": 1, "pp": 1, "cp": 1, "ep": 1}
    with h5py.File(path, "a") as f:
        run = f.create_group(f"runs/{run_id or f's{stage}'}")
        run_attrs(run, binary="step_bench", mesh=json.dumps({k: v for k, v in degrees.items() if v > 1}),
                  tag=tag, start_time=start, status=status, world_size=ranks)
        s = run.create_group("step")
        s.attrs["strategy"] = f"zero{stage}" if stage else "data_parallel"
        s.attrs["zero_stage"] = stage
        s.attrs["degrees"] = json.dumps(degrees)
        s.attrs["microbatches"] = microbatches
        s.attrs["global_batch"] = global_batch
        s.attrs["order"] = order
        s.attrs["phase_names"] = json.dumps(["forward", "backward", "grad_sync", "optimizer"])
        times = np.array([[0.1, 0.2], [0.3, 0.4]][:steps]) if step_times is None else np.asarray(step_times)
        s["step_times"] = times
        s["phases"] = np.zeros((len(times), 2, 4))
        s["loss"] = np.linspace(4.0, 3.5, len(times))
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
        s["summary"] = np.array([(median, tokens, 0.12, 0.3, 1, 1, b"pass")], SUMMARY_T)
        s.attrs["seq"] = 16
        if split:
            s["time_split"] = np.array(SPLIT, SPLIT_T)


def plan_round(path, plan, run_id, median, tokens, start, tag="shm", spread_frac=0.0):
    """One round of a plan 'dp2', 'tp2', 'pp2', 'dp4' ... (one degree above 1, ranks = it): a step
    file whose summary holds `median` (s) and `tokens` (tokens/s) and whose steps lie within
    +-spread_frac of it."""
    deg = {"dp": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 1}
    deg[plan[:2]] = int(plan[2:])
    lo, hi = median * (1 - spread_frac), median * (1 + spread_frac)
    step_file(path, run_id=run_id, degrees=deg, median=median, tokens=tokens, start=start, tag=tag,
              step_times=[[lo, lo], [median, median], [hi, hi]], ranks=int(plan[2:]))


PIPE_T = np.dtype([("rank", "<i4"), ("peak_held", "<i4"), ("peak_activation_bytes", "<f8"), ("bubble", "<f8"),
                   ("bubble_theory", "<f8")])
SLOT_T = np.dtype([("rank", "<i4"), ("step", "<i4"), ("held", "<i4"), ("bytes", "<f8"), ("t", "<f8")])
PASS_T = np.dtype([("rank", "<i4"), ("step", "<i4"), ("microbatch", "<i4"), ("chunk", "<i4"), ("phase", "S2"),
                   ("t_start", "<f8"), ("t_end", "<f8")])


def pipeline_file(path, schedule="gpipe", run_id="pp"):
    """A 2-stage pipeline run (pp=2, m=2) with one timed step: GPipe order, 1 ms per pass, a send
    and a receive between the stages, activations held per rank, bubble 1/3 (theory)."""
    step_file(path, run_id=run_id, degrees={"dp": 1, "tp": 1, "pp": 2, "cp": 1, "ep": 1}, microbatches=2,
              step_times=[[0.006, 0.006]])
    passes = []
    for mb in (0, 1):
        passes += [(0, 0, mb, 0, b"F", 1.0 + mb * 1e-3, 1.001 + mb * 1e-3),
                   (0, 0, mb, 0, b"S", 1.001 + mb * 1e-3, 1.0012 + mb * 1e-3),
                   (1, 0, mb, 0, b"R", 1.001 + mb * 1e-3, 1.0012 + mb * 1e-3),
                   (1, 0, mb, 0, b"F", 1.0012 + mb * 1e-3, 1.0022 + mb * 1e-3),
                   (1, 0, mb, 0, b"B", 1.003 + mb * 1e-3, 1.004 + mb * 1e-3),
                   (0, 0, mb, 0, b"B", 1.0045 + mb * 1e-3, 1.0055 + mb * 1e-3)]
    with h5py.File(path, "a") as f:
        s = f[f"runs/{run_id}/step"]
        s.attrs["schedule"] = schedule
        s["passes"] = np.array(passes, PASS_T)
        s["activation_slots"] = np.array([(r, 0, h, h * 1048576.0, 1.0 + i * 1e-3) for r in (0, 1)
                                          for i, h in enumerate((1, 2, 1, 0))], SLOT_T)
        s["pipeline"] = np.array([(0, 2, 2097152.0, 0.25, 1 / 3), (1, 2, 2097152.0, 0.4, 1 / 3)], PIPE_T)


FULL_ROW_T = np.dtype(ROW_T.descr + [("iters", "<i4"), ("warmup_calls", "<i4"), ("warmup_converged", "i1"),
                                     ("t_median_max", "<f8"), ("t_median_avg", "<f8"), ("t_median_min", "<f8"),
                                     ("t_median_rank0", "<f8"), ("invalid", "<i4")])


def timed_collective_file(path, sizes, times, collective="all_reduce", tag="shm", run_id="c1", ranks=2,
                          placement="out-of-place", timing="isolated", wrong=None, routing=None, dtype="float"):
    """One world run of `collective` at `sizes` (bytes) whose slowest rank's median (t_median_max)
    is `times` (s), in the summary layout of today's binaries (the adaptive warm-up columns);
    t_median (the headline, here as under --rank-stat avg) and the other rank statistics are
    0.9x it, so a fit that read them would be off. wrong: wrong elements per size."""
    redop = b"none" if collective in ("all_gather", "all_to_all", "sendrecv", "all_to_allv") else b"sum"
    with h5py.File(path, "a") as f:
        run = f.create_group(f"runs/{run_id}")
        run_attrs(run, binary=f"{collective}_bench", tag=tag, world_size=ranks, timing=timing)
        if routing:
            run.attrs["routing"] = routing
        run["topology/groups"] = np.array([(b"world", 0, ranks, b"0,1", 1, b"intra")], GROUPS_T)
        g = run.create_group(f"collectives/{collective}/{dtype}-{redop.decode()}-{placement}-world")
        for k, v in {"collective": collective, "placement": placement, "group": "world", "warmup": -1,
                     "rank_stat": "avg"}.items():
            g.attrs[k] = v
        rows, srows = [], []
        for i, (b, t) in enumerate(zip(sizes, times)):
            w = 0 if wrong is None else wrong[i]
            rows.append((b, b // 4, dtype.encode(), redop, placement == "in-place", -1, t * 0.9, t * 0.9, t, t * 1.1,
                         t * 3, b / t / 1e9, b / t / 1e9, w, 0, 20, 100, 1, t, t * 0.9, t * 0.9, t * 0.9, 0))
            srows.append((b, b // 4, b, b, b * ranks))
        g["summary"] = np.array(rows, FULL_ROW_T)
        g["sizes"] = np.array(srows, SIZES_T)
        g["samples"] = np.tile(np.asarray(times, dtype=float)[:, None, None], (1, 3, ranks))


PRED_EXPOSED_T = np.dtype([("dim", "S16"), ("seconds", "<f8")])
PRED_RANK_T = np.dtype([("rank", "<i4"), ("step_time_s", "<f8"), ("compute_s", "<f8"), ("bubble_s", "<f8"),
                        ("exposed_s", "<f8")])


def predicted(path, run_id, step_time, tokens, bubble=0.0, exposed=None, extrapolated=0, what="",
              calibration="cal.h5", bubble_measured=None):
    """step/predicted of a run (step_bench --predict; parallel/report/step_h5.cpp's layout):
    the attributes, `exposed` {dim: seconds} and one per_rank row per rank of step_times;
    bubble_measured: also write it into the run's summary (the column pipeline runs carry)."""
    with h5py.File(path, "a") as f:
        s = f[f"runs/{run_id}/step"]
        g = s.create_group("predicted")
        for k, v in {"step_time_s": step_time, "tokens_per_s": tokens, "bubble": bubble,
                     "extrapolated": extrapolated, "extrapolated_what": what, "calibration": calibration,
                     "fabric": "shm", "notes": ""}.items():
            g.attrs[k] = v
        g["exposed"] = np.array([(d.encode(), t) for d, t in (exposed or {}).items()], PRED_EXPOSED_T)
        ranks = s["step_times"].shape[1]
        g["per_rank"] = np.array([(r, step_time, step_time / 2, bubble * step_time, 0.0) for r in range(ranks)],
                                 PRED_RANK_T)
        if bubble_measured is not None:
            old = s["summary"][()]
            dt = np.dtype([(c, old.dtype[c]) for c in old.dtype.names] + [("bubble_measured", "<f8")])
            new = np.zeros(old.shape, dt)
            for c in old.dtype.names:
                new[c] = old[c]
            new["bubble_measured"] = bubble_measured
            del s["summary"]
            s["summary"] = new
