"""tests/python/fakes.py: stand-ins for the programs scripts/sweep calls, written into a test's
tmp_path as executables, so that sweep expansion, launching and Slurm submission are tested
without MPI, Slurm or a build, with answers the test knows:

  mesh_info    --list-json: the names below (NAMES)
  step_bench   --plan-only [--plan-stdin]: a model with micro_batch 1; refuses tp=4 ("tp=4
               exceeds the 2 heads"); memory total 4000 / (tp pp) + 1000 (ZeRO-0) or 500
  mpiexec      records its argv (one JSON line per call in $FAKE_LOG) and writes the -O file
               with one run of status ok; exits 3 without a file when the command line holds
               a word listed in $FAKE_FAIL; sleeps $FAKE_SLEEP seconds first when set
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
    zero = int(flag(args, "--zero", "0"))
    total = 4000 // (deg["tp"] * deg["pp"]) + (1000 if zero == 0 else 500)
    mem = {"total": total, "pp_rank": 0, "params": total, "grads": 0, "optimizer": 0, "activations": 0,
           "buffers": 0}
    return {"valid": True, "memory": mem, "model": MODEL, "degrees": deg}

if "--plan-stdin" in argv:
    for line in sys.stdin:
        print(json.dumps(answer(line.split())))
else:
    print(json.dumps(answer(argv)))
"""

MPIEXEC = r"""
import json, os, sys, time
import h5py
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps(argv) + "\n")
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
if any(w in argv for w in os.environ.get("FAKE_FAIL", "").split()):
    sys.exit(3)
out = argv[argv.index("-O") + 1]
with h5py.File(out, "w") as f:
    f.create_group("runs/fake").attrs["status"] = "ok"
print("# results: " + out)
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
