"""meshbench.names: the suite's names as the binaries know them, read from
`mesh_info --list-json` (collectives/mesh_info.cpp), so that scripts never copy lists from
the C++ and go stale when a collective, mesh dimension or group kind is added.

  from meshbench import names
  n = names.load("build/bin")      # raises names.NamesError if mesh_info is missing or fails
  n["collectives"], n["bench_binaries"], n["mesh_dims"], n["order_dims"], n["group_kinds"]

Not a cache on disk: each process runs mesh_info once per folder (a few milliseconds; it
initialises no MPI with --list-json).
"""
import json
import os
import subprocess

KEYS = ("collectives", "binaries", "mesh_dims", "order_dims", "group_kinds")


class NamesError(Exception):
    """mesh_info is missing, failed, or printed something that is not the expected JSON."""


_cache = {}


def load(bin_dir):
    """{collectives, binaries, mesh_dims, order_dims, group_kinds: [str]} plus bench_binaries
    (the binaries' names without '_bench', e.g. 'all_reduce', 'step': what sweep files say)."""
    bin_dir = os.path.abspath(bin_dir)
    if bin_dir in _cache:
        return _cache[bin_dir]
    exe = os.path.join(bin_dir, "mesh_info")
    if not os.access(exe, os.X_OK):
        raise NamesError(f"cannot read the suite's names: {exe} is missing (build first with make, or pass --bin)")
    try:
        out = subprocess.run([exe, "--list-json"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NamesError(f"cannot run {exe} --list-json: {e}")
    if out.returncode != 0:
        raise NamesError(f"{exe} --list-json exited {out.returncode}: {out.stderr.strip()}")
    try:
        doc = json.loads(out.stdout)
    except ValueError as e:
        raise NamesError(f"{exe} --list-json printed no JSON ({e}): {out.stdout[:200]!r}")
    missing = [k for k in KEYS if not isinstance(doc.get(k), list)]
    if missing:
        raise NamesError(f"{exe} --list-json lacks {', '.join(missing)} (an older build? rebuild)")
    doc["bench_binaries"] = [b[:-len("_bench")] for b in doc["binaries"] if b.endswith("_bench")]
    _cache[bin_dir] = doc
    return doc
