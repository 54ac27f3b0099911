#!/usr/bin/python3
"""Side-by-side step time: PyTorch 1.13 CPU against meshbench's step_bench (issue 4).

For each model shape and thread count, runs PyTorch (forward + backward + AdamW, the model a
user would write with nn.Linear/LayerNorm/Embedding and plain causal attention) and
step_bench on the same shape, the same synthetic tokens and the same thread count, in the
same environment, alternating the two `--repeats` times so machine noise hits both. Each run
reports the median step time after warm-up; the table gives the median over repeats and the
ratio torch / step_bench (> 1: step_bench is faster). OPENBLAS_CORETYPE is left as the
machine sets it and recorded. Run with Debian's /usr/bin/python3 (python3-torch).

  scripts/torch_step_bench.py --step-bench build/bin/step_bench --threads 1,2 --json out.json

With --ddp N it compares data parallel instead (and with --zero1, DDP with PyTorch's
ZeroRedundancyOptimizer against step_bench --zero 1): PyTorch DistributedDataParallel (gloo, N
processes started with torch.multiprocessing, --threads each) against
`mpiexec -n N step_bench --mesh dp=N`, the same shape and the same global batch (N x the
micro-batch), each step timed on every rank after a barrier and taken as the slowest rank's.
step_bench's numbers are read from the HDF5 file it writes (scripts/meshbench/reader.py), not
from its console.
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))  # scripts/meshbench, from any cwd
from meshbench import reader  # noqa: E402

SHAPES = {
    # name: layers, hidden, heads, seq, micro_batch, vocab (issue 4's two benchmark shapes)
    "small": dict(layers=2, hidden=256, heads=4, seq=128, micro_batch=8, vocab=4096),
    "medium": dict(layers=4, hidden=512, heads=8, seq=256, micro_batch=4, vocab=8192),
    "tiny": dict(layers=2, hidden=64, heads=4, seq=64, micro_batch=4, vocab=512),
}

M64 = (1 << 64) - 1


def mix(x):
    """splitmix64, as parallel/model/model_layout.cpp's synthetic_batch (random kind)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def synthetic_batch(seed, step, B, T, V, first=0):
    ids = [[mix(mix(mix(mix(seed) ^ step) ^ (first + b)) ^ t) % V for t in range(T + 1)]
           for b in range(B)]
    return [r[:T] for r in ids], [r[1:] for r in ids]


def gpt_model(s):
    """The engine's GPT (tied head, pre-norm blocks, tanh GELU) in PyTorch at shape `s`, with
    step_bench's initialisation."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    L, C, NH, T, B, V = s["layers"], s["hidden"], s["heads"], s["seq"], s["micro_batch"], s["vocab"]
    hs = C // NH

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            # uint8, not bool: gloo (DDP's start-up broadcast of buffers) has no bool type
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.uint8)))

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(self.mask == 0, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C)
            self.head = nn.Linear(C, V)
            self.head.weight = self.wte.weight  # tied, as step_bench's default
            self.register_buffer("pos", torch.arange(T))

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(self.pos)
            for b in self.blocks:
                x = b(x)
            logits = self.head(self.lnf(x))
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    torch.manual_seed(0)
    model = GPT()
    # step_bench's initialisation (GPT-2's): N(0, 0.02) matrices and embeddings, residual
    # projections N(0, 0.02/sqrt(2L)), biases 0, norms 1. PyTorch's defaults (N(0, 1)
    # embeddings, tied to the head) give a loss near 100 whose AdamW updates drive values
    # into denormals within a few steps and slow every op tenfold: not a fair peer.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "ln" in name:
                p.fill_(1.0)
            else:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                p.normal_(0.0, std)
    return model


def torch_optimizer(model, a, world):
    """DDP's wrapper over `model` (world > 1) and AdamW, decay on the matrices only (ZeRO-1:
    the optimizer state sharded over the ranks)."""
    import torch

    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    if world > 1 and a.zero1:
        # DDP + ZeRO-1: the optimizer state sharded over the ranks (one parameter group: the
        # ZeroRedundancyOptimizer of torch 1.13 takes a flat list, so decay applies to all)
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      lr=1e-3, weight_decay=0.01)
    else:
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    return model, opt


def torch_worker(a, rank=0, world=1):
    import torch

    torch.set_num_threads(a.threads)
    if world > 1:
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(a.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    s = SHAPES[a.shape]
    T, B, V = s["seq"], s["micro_batch"], s["vocab"]
    model, opt = torch_optimizer(gpt_model(s), a, world)
    times = []
    for step in range(a.warmup + a.steps):
        x, y = synthetic_batch(a.seed, step, B, T, V, first=rank * B)
        x, y = torch.tensor(x), torch.tensor(y)
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        if world > 1:  # the step's time is its slowest rank's
            d = torch.tensor([t1 - t0], dtype=torch.float64)
            dist.all_reduce(d, op=dist.ReduceOp.MAX)
            t1 = t0 + d.item()
        if step >= a.warmup:
            times.append(t1 - t0)
    if rank == 0:
        print(json.dumps({"median": statistics.median(times), "loss": loss.item(),
                          "torch": torch.__version__, "threads": torch.get_num_threads(),
                          "world": world}), flush=True)
    if world > 1:
        dist.destroy_process_group()


def ddp_entry(rank, a, world):
    torch_worker(a, rank, world)


def env_for(threads):
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
             OMP_WAIT_POLICY=e.get("OMP_WAIT_POLICY", "PASSIVE"))
    return e


def run_torch(a, shape, threads):
    cmd = [sys.executable, __file__, "--worker", "--shape", shape, "--threads", str(threads),
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--seed", str(a.seed),
           "--ddp", str(a.ddp), "--port", str(a.port)] + (["--zero1"] if a.zero1 else [])
    out = subprocess.run(cmd, env=env_for(threads), check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_engine(a, shape, threads, attention="flash"):
    """step_bench (under mpiexec -n N with --ddp N) with --attention `attention`; its numbers from
    the HDF5 step summary, read with scripts/meshbench/reader.py."""
    s = SHAPES[shape]
    with tempfile.TemporaryDirectory() as tmp:
        out_h5 = os.path.join(tmp, "step.h5")
        cmd = [a.step_bench, "--layers", str(s["layers"]), "--hidden", str(s["hidden"]),
               "--heads", str(s["heads"]), "--seq", str(s["seq"]), "--micro-batch", str(s["micro_batch"]),
               "--vocab", str(s["vocab"]), "--threads", str(threads), "--steps", str(a.steps),
               "--warmup", str(a.warmup), "--seed", str(a.seed), "--attention", attention, "-O", out_h5]
        if a.ddp > 1:
            cmd = [os.environ.get("MB_MPIEXEC", "mpiexec"), "-n", str(a.ddp)] + cmd + ["--mesh", f"dp={a.ddp}"]
            if a.zero1:
                cmd += ["--zero", "1"]
        if a.profile:
            cmd.append("--profile")
        out = subprocess.run(cmd, env=env_for(threads), check=True, capture_output=True, text=True).stdout
        runs, bad = reader.load_steps([out_h5], who="torch_step_bench")
        if bad or not runs or not runs[-1]["summary"]:
            raise RuntimeError(f"step_bench wrote no step summary to {out_h5}: {out[-400:]}")
        summary = runs[-1]["summary"]
    # the peak step_bench normalised by (the higher of its before/after measurements), all ranks
    return {"median": summary["step_time_median"], "flops_per_step": summary["flops_per_step"],
            "peak_gflops": summary["peak_measured_flops"] / 1e9,
            "exposed": summary.get("exposed_comm_fraction"), "stdout": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shape", default="small")
    ap.add_argument("--shapes", default="small,medium", help="comma list of " + ",".join(SHAPES))
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="alternating torch/step_bench runs")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--step-bench", default="build/bin/step_bench")
    ap.add_argument("--profile", action="store_true", help="pass --profile to step_bench and print it")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--ddp", type=int, default=1,
                    help="N > 1: PyTorch DDP (gloo, N processes) against mpiexec -n N step_bench --mesh dp=N")
    ap.add_argument("--port", type=int, default=29517, help="gloo rendezvous port on 127.0.0.1 (--ddp)")
    ap.add_argument("--zero1", action="store_true",
                    help="with --ddp: PyTorch's ZeroRedundancyOptimizer against step_bench --zero 1")
    ap.add_argument("--attention", default="flash",
                    help="comma list of step_bench --attention modes (flash, naive), each run after the PyTorch "
                         "peer in every repeat (the peer's attention is the materialised one)")
    a = ap.parse_args()
    modes = a.attention.split(",")
    for m in modes:
        if m not in ("flash", "naive"):
            ap.error(f"--attention {m}: want flash or naive")
    if a.worker:
        a.threads = int(a.threads)
        if a.ddp > 1:
            import torch.multiprocessing as mp  # torchrun crashes on this Python: spawn instead
            mp.spawn(ddp_entry, args=(a, a.ddp), nprocs=a.ddp, join=True)
            return 0
        return torch_worker(a)
    info = {"OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "unset"),
            "OMP_WAIT_POLICY": env_for(1)["OMP_WAIT_POLICY"], "host": platform.node(),
            "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    info["ddp"] = a.ddp
    info["zero1"] = a.zero1
    print(f"torch_step_bench: {'DDP x' + str(a.ddp) + (' + ZeRO-1' if a.zero1 else '') + ', ' if a.ddp > 1 else ''}"
          f"OPENBLAS_CORETYPE={info['OPENBLAS_CORETYPE']} "
          f"OMP_WAIT_POLICY={info['OMP_WAIT_POLICY']} cpus={info['cpus']} load={info['load_before']}")
    rows = []
    for shape in a.shapes.split(","):
        for th in [int(t) for t in a.threads.split(",")]:
            tt, ee, last = [], {m: [] for m in modes}, {}
            for _ in range(a.repeats):  # the peer, then each attention mode, in turn
                tt.append(run_torch(a, shape, th)["median"])
                for m in modes:
                    last[m] = run_engine(a, shape, th, m)
                    ee[m].append(last[m]["median"])
            t_med = statistics.median(tt)
            for m in modes:
                e_med, er = statistics.median(ee[m]), last[m]
                row = dict(shape=shape, threads=th, attention=m, torch_s=t_med, step_bench_s=e_med,
                           speedup=t_med / e_med, torch_runs=tt, step_bench_runs=ee[m],
                           flops_per_step=er["flops_per_step"], peak_gflops=er["peak_gflops"],
                           step_bench_gflops=er["flops_per_step"] / e_med / 1e9,
                           torch_gflops=er["flops_per_step"] / t_med / 1e9)
                row["mfu"] = row["step_bench_gflops"] / row["peak_gflops"]
                rows.append(row)
                print(f"{shape:>7} threads={th} attention={m}: torch {t_med*1e3:8.2f} ms  step_bench {e_med*1e3:8.2f} ms  "
                      f"speedup {row['speedup']:.2f}x  step_bench {row['step_bench_gflops']:.1f} GFLOP/s "
                      f"({100*row['mfu']:.0f}% of SGEMM peak {row['peak_gflops']:.1f}"
                      f"{', exposed comm %.0f%%' % (100 * er['exposed']) if a.ddp > 1 else ''})  "
                      f"runs torch {[round(x*1e3,1) for x in tt]} engine {[round(x*1e3,1) for x in ee[m]]}",
                      flush=True)
                if a.profile:
                    print(er["stdout"])
    info["load_after"] = os.getloadavg()
    if a.json:
        json.dump({"info": info, "rows": rows}, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
