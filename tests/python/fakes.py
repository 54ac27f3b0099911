"""tests/python/fakes.py: stand-ins for the programs scripts/sweep calls, written into a test's
tmp_path as executables, so that sweep expansion, launching and Slurm submission are tested
without MPI, Slurm or a build, with answers the test knows:

  mesh_info    --list-json: the names below (NAMES)
  step_bench   --plan-only [--plan-stdin]: a model with micro_batch 1; refuses tp=4 ("tp=4
               exceeds the 2 heads"); memory total 4000 / (tp pp) + 1000 (ZeRO-0) or 500;
               with --predict CAL a `predicted` object, tokens/s 1000 + 300 tp - 200 pp + 50
               ZeRO - 10 m (a CAL.toml adds cluster and mfu = tokens/s / 4000, as a cluster
               description's; a CAL path holding "nofit": {"error": ...}, as a calibration
               without the fit a plan needs; "nopredict": refused as by a build without
               --predict)
  mpiexec      records its argv (one JSON line per call in $FAKE_LOG), claims the -O file as
               the binaries do (its .lock held, exit 2 when another holds it or the file
               exists) and writes it with one run of status ok; exits 3 without a file when the
               command line holds a word listed in $FAKE_FAIL; with $FAKE_SLEEP set, first
               publishes the file with status running and sleeps that many seconds
  sbatch       records its argv, prints job ids 101, 102, ...
  squeue       prints the jobs listed in $FAKE_SQUEUE (none by default)
Not a test module.
"""
import json
import os
import sys

NAMES = {"collectives": ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv",
                         "all_to_allv"],
         "binaries": ["all_reduce_bench", "all_gather_bench", "reduce_scatter_bench", "all_to_all_bench",
                      "broadcast_bench", "sendrecv_bench", "all_to_allv_bench", "step_bench", "mesh_info"],
         "mesh_dims": ["tp", "cp", "ep", "dp", "pp", "etp", "edp"],
         "order_dims": ["tp", "cp", "ep", "dp", "pp"],
         "group_kinds": ["world", "tp", "cp", "dp", "pp", "dp-cp", "tp-cp", "tp-pp", "ep", "etp", "edp", "embedding"]}

PRESETS = {"shm": {"backend": "mpi", "mem": "host", "launcher": "default", "env": {"UCX_TLS": "self,sm"},
                   "desc": "shared memory"},
           "tcp-lo": {"backend": "mpi", "mem": "host", "launcher": "default",
                      "env": {"UCX_TLS": "self,tcp", "UCX_NET_DEVICES": "lo"}, "desc": "loopback"},
           "nccl": {"backend": "nccl", "mem": "device", "launcher": "default", "env": {}, "desc": "NCCL"}}

MESH_INFO = """
import json, sys
print(json.dumps(%r))
""" % (NAMES,)

STEP_BENCH = r"""
import json, sys
argv = sys.argv[1:]
MODEL = {"micro_batch": 1, "experts": 0, "layers": 2}

def flag(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default

def answer(args):
    deg = {"tp": 1, "cp": 1, "ep": 1, "pp": 1, "dp": 1}
    for part in flag(args, "--mesh", "").split(","):
        if "=" in part:
            k, v = part.split("=")
            deg[k] = int(v)
    if deg["tp"] == 4:
        return {"valid": False, "error": "tp=4 exceeds the 2 heads", "model": MODEL}
    if "nopredict" in (flag(args, "--predict") or ""):
        return {"valid": False, "error": "The following arguments were not expected: " + flag(args, "--predict")
                + " --predict"}
    zero = int(flag(args, "--zero", "0"))
    total = 4000 // (deg["tp"] * deg["pp"]) + (1000 if zero == 0 else 500)
    mem = {"total": total, "pp_rank": 0, "params": total, "grads": 0, "optimizer": 0, "activations": 0,
           "buffers": 0}
    out = {"valid": True, "memory": mem, "model": MODEL, "degrees": deg}
    cal = flag(args, "--predict")
    if cal is not None:
        m = int(flag(args, "--micro-batches", "1"))
        if "nofit" in cal:
            out["predicted"] = {"error": "--predict " + cal + ": no fit for all_reduce over 2 ranks (any fabric)"}
        else:
            tok = 1000.0 + 300 * deg["tp"] - 200 * deg["pp"] + 50 * zero - 10 * m
            out["predicted"] = {"step_time_s": 1000.0 / tok, "tokens_per_s": tok, "exposed_s": {}, "bubble": 0.0,
                                "per_rank": [], "extrapolated": deg["tp"] == 2, "calibration": cal}
            if cal.endswith(".toml"):  # a cluster description: the figures of a plan search
                out["predicted"].update(cluster="fake-cluster", mfu=tok / 4000.0)
    return out

if "--plan-stdin" in argv:
    for line in sys.stdin:
        print(json.dumps(answer(line.split())))
else:
    print(json.dumps(answer(argv)))
"""

MPIEXEC = r"""
import fcntl, json, os, sys, time
import h5py
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps(argv) + "\n")
out = argv[argv.index("-O") + 1]
# The binaries' claim (src/results/output_path.cpp): the lock first, then refuse a file that exists.
fd = os.open(out + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    print(f"-O/--output {out}: in use by {os.pread(fd, 200, 0).decode().strip()}", file=sys.stderr)
    sys.exit(2)
os.pwrite(fd, f"fake_bench (pid {os.getpid()} on host fake since now)\n".encode(), 0)
if os.path.exists(out):
    print(f"-O/--output {out}: the file exists", file=sys.stderr)
    sys.exit(2)
sleep = float(os.environ.get("FAKE_SLEEP", "0"))
if sleep:  # a first publish, as the binaries' at their start: status running
    with h5py.File(out, "w") as f:
        f.create_group("runs/fake").attrs["status"] = "running"
    time.sleep(sleep)
if any(w in argv for w in os.environ.get("FAKE_FAIL", "").split()):
    sys.exit(3)
with h5py.File(out, "a") as f:
    f.require_group("runs/fake").attrs["status"] = "ok"
print("# results: " + out)
os.unlink(out + ".lock")
"""

SBATCH = r"""
import json, os, sys
log = os.environ["FAKE_LOG"]
n = sum(1 for _ in open(log)) if os.path.exists(log) else 0
with open(log, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
print(f"{101 + n};cluster")
"""

SQUEUE = r"""
import os
for job in os.environ.get("FAKE_SQUEUE", "").split():
    print(job)
"""


def names():
    """The stand-in mesh_info's names as meshbench.names.load returns them."""
    n = {k: list(v) for k, v in NAMES.items()}
    n["bench_binaries"] = [b[:-len("_bench")] for b in n["binaries"] if b.endswith("_bench")]
    return n


def write(folder, name, body):
    """An executable `name` in folder running body with this interpreter; returns its path."""
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        fh.write(f"#!{sys.executable}\n{body}")
    os.chmod(path, 0o755)
    return path


def bin_dir(folder):
    """A --bin folder with mesh_info, step_bench and every collective's *_bench (the stand-ins;
    the collectives' never run: mpiexec stands in for the launch)."""
    os.makedirs(folder, exist_ok=True)
    write(folder, "mesh_info", MESH_INFO)
    write(folder, "step_bench", STEP_BENCH)
    for b in NAMES["binaries"]:
        if b.endswith("_bench") and b != "step_bench":
            write(folder, b, "import sys\nsys.exit(0)\n")
    return folder


def calls(log):
    """The argv lists a fake recorded, in order."""
    if not os.path.exists(log):
        return []
    with open(log) as fh:
        return [json.loads(line) for line in fh]


# scripts/calibrate --compute's stand-ins. step_bench: --plan-only ... --op-list prints the op
# list of one rank and step (parts without their role: fwd, bwd); a run with --profile -O FILE
# writes step/events (names role.part: qkv.fwd) with known times for FAKE_WORLD ranks (the rank
# count mpiexec gave it). Under --mesh tp=2 the qkv GEMM is
# 256x48x64 and every op takes twice as long. --mesh bogus=1 is refused; FAKE_NO_OPLIST: a
# build without --op-list; FAKE_FAIL_RUN: a run exits 3 without a file.
COMPUTE_STEP_BENCH = r"""
import json, os, sys
import h5py, numpy as np
argv = sys.argv[1:]
def flag(name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default
mesh = flag("--mesh", "dp=1")
tp = 2 if "tp=2" in mesh else 1
N = 96 // tp
GF, GB = 2.0 * 256 * N * 64, 4.0 * 256 * N * 64
if "--plan-only" in argv:
    if "bogus" in mesh:
        print(json.dumps({"valid": False, "error": "unknown mesh dimension 'bogus'"}))
        sys.exit(2)
    if os.environ.get("FAKE_NO_OPLIST") or "--op-list" not in argv:
        print(json.dumps({"valid": True}))
        sys.exit(0)
    ops = [{"op": "matmul", "phase": "F", "part": "fwd", "elements": 0, "flops": 2 * GF, "m": 256, "n": N,
            "k": 64, "calls": 2},
           {"op": "matmul", "phase": "B", "part": "bwd", "elements": 0, "flops": GB, "m": 256, "n": N, "k": 64,
            "calls": 1},
           {"op": "attention", "phase": "F", "part": "", "elements": 0, "flops": 8e6, "calls": 2},
           {"op": "layernorm", "phase": "F", "part": "", "elements": 49152, "flops": 0, "calls": 3},
           {"op": "adamw", "phase": "O", "part": "", "elements": 100000, "flops": 0, "calls": 1},
           {"op": "residual", "phase": "F", "part": "", "elements": 1000, "flops": 0, "calls": 2}]
    print(json.dumps({"valid": True, "op_list": ops}))
    sys.exit(0)
if os.environ.get("FAKE_FAIL_RUN") and tp == 2:
    sys.exit(3)
out, steps, world = flag("-O"), int(flag("--steps")), int(os.environ.get("FAKE_WORLD", "1"))
EV = np.dtype([("rank", "<i4"), ("step", "<i4"), ("kind", "S24"), ("dim", "S16"), ("phase", "S4"),
               ("flops", "<f8"), ("t_start", "<f8"), ("t_end", "<f8"), ("name", "S32"), ("m", "<i4"), ("n", "<i4"),
               ("k", "<i4")])
rows = []
for r in range(world):
    for s in range(steps):
        t = 10.0 * s
        def ev(kind, phase, dur, flops=0.0, name="", shape=(0, 0, 0), dim="-"):
            global t
            rows.append((r, s, kind, dim, phase, flops, t, t + dur * tp, name) + shape)
            t += dur * tp + 1e-6
        for _ in range(3):
            ev("layernorm.fwd", "F", 5e-5)
        for _ in range(2):
            ev("matmul.fwd", "F", 1e-4 * (1 + 0.1 * s), GF, "qkv.fwd", (256, N, 64))
            ev("attention.fwd", "F", 1e-3, 4e6)
            ev("gelu.fwd", "F", 1e-5)
            ev("all_reduce", "F", 1e-3, dim="tp")
        ev("matmul.bwd", "B", 2e-4, GB, "qkv.bwd", (256, N, 64))
        ev("adamw.opt", "O", 1e-3)
with h5py.File(out, "w") as f:
    run = f.create_group("runs/fake-" + mesh.replace("=", ""))
    run.attrs["status"] = "ok"
    st = run.create_group("step")
    st.attrs["threads"] = int(flag("--threads", "1"))
    st.attrs["device"] = "cpu"
    st["step_times"] = np.full((steps, world), 0.01)
    st["events"] = np.array(rows, EV)
print("step_bench: wrote " + out)
"""

COMPUTE_MPIEXEC = r"""
import json, os, sys
argv = sys.argv[1:]
if os.environ.get("FAKE_LOG"):
    with open(os.environ["FAKE_LOG"], "a") as fh:
        fh.write(json.dumps({"argv": argv, "UCX_TLS": os.environ.get("UCX_TLS")}) + "\n")
n = argv[argv.index("-n") + 1]
rest = argv[argv.index("-n") + 2:]
os.execve(sys.executable, [sys.executable] + rest, {**os.environ, "FAKE_WORLD": n})
"""
