"""meshbench.expand: a sweep document -> its points. Every [[sweep]] table (over the top level's
defaults) is checked whole, then each combination of binary, ranks, backend, fabric and mesh is
one point; a [steps] table's points are the plans step_bench --plan-only accepts (meshbench.steps
enumerates and prunes them: global batch, degenerate, refused, memory).

A point is a plain dict: id, binary, ranks, backend, fabric, mesh ({degrees, group, text,
order} or None), kind ("collective" or "other"), rounds, cfg (the table's keys); a step point
adds plan_args, plan (the binary's JSON) and global_batch. Not here: running them (launch,
rounds, slurm).
"""
import itertools
import os
import re

from . import predict_ranking, steps as mb_steps
from .sweep_config import KEYS, DEFAULTS, SIZE_RE, SweepError, as_list, check_mesh_ranks, parse_mesh, rounds_of


def step_points(cfg, where, bins, ranks, pairs, bin_dir, names, pruned, batches):
    """A [steps] table's points: every plan step_bench --plan-only accepts at each rank count,
    for each (backend, fabric) pair; the refused, degenerate, too-large plans and those that
    cannot reach the global batch go to `pruned`; each rank count's global batch rule to
    `batches` ({"ranks", "global_batch", "global_batch_rule"}). With [steps] predict the valid
    plans are ranked by predicted tokens/s and only the chosen ones (top, spread:
    predict_ranking.select) become points; the batch then holds the whole "ranking"."""
    if bins != ["step"]:
        raise SweepError(f"{where}: a [steps] table runs step_bench only (binaries = [\"step\"]), got {bins}")
    exe = os.path.join(bin_dir, "step_bench")
    if not os.access(exe, os.X_OK):
        raise SweepError(f"{where}: step_bench is not built: {exe} missing (run make, or pass --bin)")
    if not isinstance(cfg["steps"], dict):
        raise SweepError(f"{where}: steps must be a table ([steps])")
    points = []
    for r in ranks:
        info = {}
        try:
            valid, refused = mb_steps.enumerate_plans(cfg["steps"], r, exe, [str(a) for a in cfg["args"]],
                                                      names["order_dims"], info)
        except mb_steps.StepsError as e:
            raise SweepError(f"{where}: {e}")
        batch = {"where": where, "ranks": r} | info
        st = cfg["steps"]
        if st.get("predict"):
            top = st.get("top")
            ranked, valid = predict_ranking.select(valid, top, st.get("spread", 3) if top is not None else 0)
            batch.update(predict=st["predict"], ranking=[
                {"id": c["id"], "mesh": c["mesh"], "pred_rank": c["pred_rank"], "selected": c["selected"],
                 "tokens": predict_ranking.predicted_tokens(c), "predicted": c["plan"].get("predicted")}
                for c in ranked])
        batches.append(batch)
        pruned += [p | {"id": f"step-r{r}-{p['id']}", "ranks": r} for p in refused]
        for (be, fb), c in itertools.product(pairs, valid):
            mesh = {"degrees": c["degrees"], "group": "world", "text": c["mesh"], "order": c["order"]}
            points.append({"id": f"step-r{r}-{be}-{fb}-{c['id']}", "binary": "step", "ranks": r, "backend": be,
                           "fabric": fb, "mesh": mesh, "kind": "other", "plan_args": c["args"], "plan": c["plan"],
                           "global_batch": c["global_batch"], "rounds": rounds_of(cfg, "step", where),
                           "pred_rank": c.get("pred_rank"), "selected": c.get("selected"),
                           "choice": {k: c.get(k) for k in ("degrees", "etp", "order", "zero", "schedule", "vpp",
                                                            "global_batch", "recompute", "cp_algo")}
                           | {"model": st.get("model")},
                           "cfg": {k: cfg.get(k) for k in KEYS if k in cfg and k != "steps"}})
    return points


def table_config(base, sub, where):
    """One [[sweep]] table over the top level's keys and DEFAULTS; a step table runs step_bench,
    at the allocation's size under Slurm when it names no ranks."""
    bad = set(sub) - KEYS
    if bad:
        raise SweepError(f"{where}: unknown key(s) {sorted(bad)} (known: {', '.join(sorted(KEYS))})")
    cfg = {**DEFAULTS, **base, **sub}
    rounds_of(cfg, "collective", where)  # a bad `rounds` is refused before any plan is asked about
    if cfg.get("steps") is not None:  # a step sweep: step_bench, the allocation's size under Slurm
        if "binaries" not in base and "binaries" not in sub:
            cfg["binaries"] = ["step"]
        if "ranks" not in base and "ranks" not in sub and os.environ.get("SLURM_NTASKS", "").isdigit():
            cfg["ranks"] = [int(os.environ["SLURM_NTASKS"])]
    return cfg


def table_binaries(cfg, where, bin_dir, names, built):
    """The table's binaries without '_bench', each known to mesh_info (and built, if `built`)."""
    benches = names["bench_binaries"]
    bins = []
    for b in as_list(cfg["binaries"]):
        name = str(b).removesuffix("_bench")
        if name not in benches:
            raise SweepError(f"{where}: unknown binary '{b}' (known: {', '.join(x + '_bench' for x in benches)})")
        exe = os.path.join(bin_dir, name + "_bench")
        if built and not os.access(exe, os.X_OK):
            raise SweepError(f"{where}: binary '{b}' is not built: {exe} missing (run make, or pass --bin)")
        bins.append(name)
    return bins


def check_table(cfg, where, presets, bin_dir, names, built):
    """(binaries, ranks, backends, fabrics, meshes) of one table, every entry checked."""
    for key in ("min_bytes", "max_bytes"):
        if not SIZE_RE.match(str(cfg[key])):
            raise SweepError(f"{where}: {key} = {cfg[key]!r} is not a size like 8, 64K, 128M, 1G")
    bins = table_binaries(cfg, where, bin_dir, names, built)
    ranks = as_list(cfg["ranks"])
    for r in ranks:
        if not isinstance(r, int) or r < 1:
            raise SweepError(f"{where}: ranks must be positive integers, got {r!r}")
    backends = as_list(cfg["backends"])
    for be in backends:
        if be not in ("mpi", "nccl"):
            raise SweepError(f"{where}: unknown backend '{be}' (mpi or nccl)")
    fabrics = as_list(cfg["fabrics"])
    for fb in fabrics:
        if fb not in presets:
            raise SweepError(f"{where}: unknown fabric preset '{fb}' (known: {', '.join(presets)})")
        if presets[fb]["backend"] not in backends:
            raise SweepError(f"{where}: fabric '{fb}' is a {presets[fb]['backend']} preset but backends = {backends}")
        job_nodes = os.environ.get("SLURM_JOB_NUM_NODES", "1")
        if presets[fb].get("reach") == "node" and job_nodes.isdigit() and int(job_nodes) > 1:
            raise SweepError(f"{where}: fabric '{fb}' connects ranks on one node only, and this job has {job_nodes} "
                             "nodes (SLURM_JOB_NUM_NODES): name a fabric between nodes (--fabric tcp, ib, roce; "
                             "scripts/sweep --list-fabrics)")
    meshes = [parse_mesh(m, where, names) for m in as_list(cfg["meshes"])]
    if not isinstance(cfg["args"], list) or not isinstance(cfg["env"], dict):
        raise SweepError(f"{where}: args must be a list of strings and env a table")
    return bins, ranks, backends, fabrics, meshes


def point_id(binary, ranks, backend, fabric, mesh):
    """all_reduce-r4-mpi-shm, or with a mesh all_gather-r4-mpi-shm-tp2dp2-tp."""
    pid = f"{binary}-r{ranks}-{backend}-{fabric}"
    if mesh is not None:
        pid += "-" + re.sub(r"[^a-z0-9]+", "", mesh["text"].replace("=", "")) + f"-{mesh['group']}"
    return pid


def collective_points(cfg, where, table, presets, names):
    """The points of one table without [steps]: every (binary, ranks, backend, fabric, mesh)
    whose fabric preset belongs to its backend."""
    bins, ranks, backends, fabrics, meshes = table
    points = []
    for b, r, be, fb, m in itertools.product(bins, ranks, backends, fabrics, meshes):
        if presets[fb]["backend"] != be:
            continue
        if m is not None:
            check_mesh_ranks(m, r, where)
        if r < 2 and b == "sendrecv":
            raise SweepError(f"{where}: sendrecv needs at least 2 ranks, got ranks={r}")
        kind = "collective" if b in names["collectives"] else "other"
        points.append({"id": point_id(b, r, be, fb, m), "binary": b, "ranks": r, "backend": be, "fabric": fb,
                       "mesh": m, "kind": kind,
                       "rounds": rounds_of(cfg, "step" if b == "step" else "collective", where),
                       "cfg": {k: cfg.get(k) for k in KEYS if k in cfg}})
    return points


def expand(doc, presets, bin_dir, names, check_binaries=True, pruned=None, batches=None):
    """Validate the whole document and return the list of points (dicts). names:
    meshbench.names.load(bin_dir), the binaries' own lists. Step plans that are pruned
    (meshbench.steps: global batch, degenerate, refused, memory) are appended to `pruned` with
    their reason and category, each step table's global batch rule to `batches`. A point id
    that two tables both give is kept once (the first)."""
    pruned = [] if pruned is None else pruned
    batches = [] if batches is None else batches
    unknown_top = set(doc) - KEYS - {"sweep", "report"}
    if unknown_top:
        raise SweepError(f"unknown key(s) {sorted(unknown_top)} at the top level (known: {', '.join(sorted(KEYS))}, [[sweep]], [report])")
    base = {k: v for k, v in doc.items() if k in KEYS}
    subs = doc.get("sweep") or [{}]
    if not isinstance(subs, list):
        raise SweepError("'sweep' must be an array of tables ([[sweep]])")
    points, seen = [], set()
    for si, sub in enumerate(subs):
        where = f"[[sweep]] #{si + 1}" if "sweep" in doc else "sweep file"
        cfg = table_config(base, sub, where)
        table = check_table(cfg, where, presets, bin_dir, names, check_binaries)
        if cfg.get("steps") is not None:
            bins, ranks, backends, fabrics, _ = table
            pairs = [(be, fb) for be in backends for fb in fabrics if presets[fb]["backend"] == be]
            new = step_points(cfg, where, bins, ranks, pairs, bin_dir, names, pruned, batches)
        else:
            new = collective_points(cfg, where, table, presets, names)
        for p in new:
            if p["id"] not in seen:
                seen.add(p["id"])
                points.append(p)
    if not points and not pruned:
        raise SweepError("the sweep file expands to no points")
    return points


def print_pruned(pruned):
    if pruned:
        print(f"pruned {len(pruned)} plan(s) ({mb_steps.prune_counts(pruned)}):")
        for p in pruned:
            print(f"  {p['id']}: {p['reason']}")


def print_batches(batches):
    """One line per step table and world size: the global batch its plans train, and why."""
    for b in batches:
        print(f"ranks={b['ranks']}: {b.get('global_batch_rule', '')}")
