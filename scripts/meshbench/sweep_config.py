"""meshbench.sweep_config: a sweep file as scripts/sweep reads it: the TOML, the keys it knows
and their defaults, the fabric presets (slurm/env.sh is their one source), meshes, rounds, and
the `--steps`/step flags that write or override a [steps] table. Every check here raises
SweepError, which scripts/sweep reports as exit 2 before anything runs.

Not here: turning the document into points (expand), running them (launch, rounds, slurm).
"""
import os
import re
import shlex
import subprocess
import tomllib

# The repository root: slurm/env.sh, scripts/netns-fabric, scripts/report live under it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

# Binary, collective, mesh-dimension and group names come from the binaries themselves
# (`mesh_info --list-json`, read by meshbench.names), never copied from the C++.
KEYS = {"name", "binaries", "ranks", "fabrics", "backends", "mem", "meshes", "min_bytes",
        "max_bytes", "step_factor", "iters", "warmup", "check", "dtype", "op", "inplace",
        "timing", "time_limit", "timeout", "ranks_per_node", "args", "env", "steps", "rounds"}
DEFAULTS = {"binaries": ["all_reduce"], "ranks": [2], "fabrics": ["shm"], "backends": ["mpi"],
            "meshes": [None], "min_bytes": "8", "max_bytes": "1M", "step_factor": 2,
            "check": 1, "timeout": 600, "args": [], "env": {}}  # no iters/warmup: the binaries' adaptive defaults

# Rounds per point when the file does not say (`rounds`, --rounds): a step plan's step time
# moves by tens of percent between runs on a shared machine, so plans are measured R times,
# interleaved (round 1 of every plan, then round 2, ...); a collective point already times
# each size many times.
DEFAULT_ROUNDS = {"step": 3, "collective": 1}


class SweepError(Exception):
    """A bad sweep file or option: reported as exit 2 before anything runs."""


# --- fabric presets (slurm/env.sh is the one source) ------------------------------------------
def fabric_presets():
    out = subprocess.run(["bash", "-c", f'. "{ROOT}/slurm/env.sh" >/dev/null && mb_fabric_list'],
                         capture_output=True, text=True, env={**os.environ, "MB_RESULTS": "/nonexistent"})
    if out.returncode != 0:
        raise SweepError(f"cannot read fabric presets from slurm/env.sh: {out.stderr.strip()}")
    presets = {}
    for line in out.stdout.splitlines():
        f = line.split("|")
        if len(f) < 6:
            continue
        env = {}
        for kv in f[4].split():
            k, _, v = kv.partition("=")
            if v:
                env[k] = v
        presets[f[0]] = {"backend": f[1], "mem": f[2], "launcher": f[3], "env": env, "desc": f[5],
                         "reach": f[6] if len(f) > 6 else "nodes"}
    return presets


def fabric_vars(presets):
    """Every variable any preset sets: cleared before a point's preset is applied."""
    v = set()
    for p in presets.values():
        v |= set(p["env"])
    return v | {"UCX_TLS", "UCX_NET_DEVICES", "UCX_IB_GID_INDEX", "NCCL_P2P_DISABLE",
                "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_IB_HCA",
                "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME"}


# --- the file, meshes and rounds ------------------------------------------------------------
def load_doc(path):
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SweepError(f"no such sweep file: {path}")
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{path}: not valid TOML: {e}")


SIZE_RE = re.compile(r"^\d+(\.\d+)?[KMGT]?$", re.I)


def parse_mesh(entry, where, names):
    """{"mesh": "tp=2,dp=2", "group": "tp"} or "tp=2,dp=2:tp" -> (degrees dict, group, text).
    names: meshbench.names.load()'s lists (mesh_dims, group_kinds)."""
    mesh_dims, group_dims = names["mesh_dims"], names["group_kinds"]
    if entry is None:
        return None
    if isinstance(entry, str):
        text, _, group = entry.partition(":")
        entry = {"mesh": text, "group": group or "world"}
    if not isinstance(entry, dict) or "mesh" not in entry:
        raise SweepError(f"{where}: a mesh is {{mesh=\"tp=2,dp=2\", group=\"tp\"}} or \"tp=2,dp=2:tp\", got {entry!r}")
    extra = set(entry) - {"mesh", "group", "order"}
    if extra:
        raise SweepError(f"{where}: unknown mesh key(s) {sorted(extra)} in {entry!r}")
    degrees = {}
    for part in str(entry["mesh"]).split(","):
        k, _, v = part.strip().partition("=")
        if k not in mesh_dims:
            raise SweepError(f"{where}: mesh '{entry['mesh']}': unknown dimension '{k}' (known: {', '.join(mesh_dims)})")
        if not v.isdigit() or int(v) < 1:
            raise SweepError(f"{where}: mesh '{entry['mesh']}': degree of {k} must be a positive integer, got '{v}'")
        degrees[k] = int(v)
    group = entry.get("group", "world")
    if group not in group_dims:
        raise SweepError(f"{where}: mesh '{entry['mesh']}': unknown group '{group}' (known: {', '.join(group_dims)})")
    if group in mesh_dims and group not in degrees and group != "dp":
        raise SweepError(f"{where}: mesh '{entry['mesh']}': group '{group}' is not a dimension of the mesh")
    return {"degrees": degrees, "group": group, "text": str(entry["mesh"]), "order": entry.get("order")}


def check_mesh_ranks(mesh, ranks, where):
    prod = 1
    for k, v in mesh["degrees"].items():
        if k in ("etp", "edp", "ep"):
            continue  # the expert grid is checked by the binary (ep must divide dp*cp)
        prod *= v
    if "dp" in mesh["degrees"]:
        if prod != ranks:
            raise SweepError(f"{where}: mesh '{mesh['text']}' needs {prod} ranks, not ranks={ranks}")
    elif ranks % prod != 0:
        raise SweepError(f"{where}: mesh '{mesh['text']}' (product {prod}) does not divide ranks={ranks}")


def as_list(v):
    return v if isinstance(v, list) else [v]


def rounds_of(cfg, kind, where):
    """The rounds of a point: the table's `rounds`, else DEFAULT_ROUNDS[kind]."""
    r = cfg.get("rounds")
    if r is None:
        return DEFAULT_ROUNDS[kind]
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise SweepError(f"{where}: rounds must be a positive integer, got {r!r}")
    return r


# --- step sweeps from flags --------------------------------------------------------------------
def _list_flag(text):
    """'1,2,4' -> [1, 2, 4]; 'auto' stays; names stay strings."""
    if text == "auto":
        return text
    return [int(v) if v.strip().isdigit() else v.strip() for v in text.split(",")]


def steps_doc(args):
    """`--steps` without a file: the sweep document the flags describe."""
    world = args.world or (int(os.environ["SLURM_NTASKS"]) if os.environ.get("SLURM_NTASKS", "").isdigit() else None)
    if not world:
        raise SweepError("--steps: give --world N (or run inside a Slurm allocation)")
    steps = {"model": args.model} if args.model else {}
    return {"name": f"steps-{args.model or 'custom'}-w{world}", "ranks": [world], "fabrics": [args.fabric],
            "timeout": args.timeout, "args": shlex.split(args.args), "steps": steps}


def apply_step_flags(doc, args):
    """--world, --model, --memory-per-rank and the degree flags override every [steps] table."""
    tables = [doc["steps"]] if isinstance(doc.get("steps"), dict) else []
    tables += [s["steps"] for s in doc.get("sweep") or [] if isinstance(s, dict) and isinstance(s.get("steps"), dict)]
    flags = {"memory_per_rank": args.memory_per_rank, "model": args.model, "predict": args.predict,
             "predict_fabric": args.predict_fabric, "top": args.top, "spread": args.spread}
    for key in ("tp", "cp", "ep", "pp", "zero", "vpp", "micro_batches", "schedule", "orders", "global_batch",
                "recompute", "cp_algo"):
        v = getattr(args, key)
        flags[key] = _list_flag(v) if v is not None else None
    if (any(v is not None for v in flags.values()) or args.world) and not tables:
        raise SweepError("--world, --model, --memory-per-rank, --predict, --top, --spread and the degree flags apply "
                         "to step sweeps ([steps] or --steps)")
    for t in tables:
        # The flag wins over the table's other way of fixing the batch.
        if flags["global_batch"] is not None:
            t.pop("micro_batches", None)
        if flags["micro_batches"] is not None:
            t.pop("global_batch", None)
        t.update({k: v for k, v in flags.items() if v is not None})
    if args.world:
        doc["ranks"] = [args.world]
        for s in doc.get("sweep") or []:
            s.pop("ranks", None)
