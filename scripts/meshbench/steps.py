"""meshbench.steps: the plans of a step sweep. Given a world size, a model shape and
constraints ([steps] in a sweep file, or `scripts/sweep --steps`), enumerate every plan
(tp, cp, ep, dp, pp, vpp, ZeRO stage, schedule, micro-batches, order) and ask the binary
which are valid: `step_bench --plan-only` validates each with the rules a real run uses and
prints its analytic memory per rank. Plans are pruned, each with its reason and a category:

  global batch  the plan cannot train the sweep's global batch: it is not a multiple of
                b x dp, or it leaves a pipeline fewer micro-batches than stages (m < pp)
  degenerate    the same work and memory as another plan: ZeRO > 0 whose data-parallel groups
                are one rank (dp x cp for the dense parameters and, with expert parallel, edp
                for the experts: zero_is_degenerate), or a candidate equal to one listed
                before it
  refused       step_bench --plan-only refuses it (its own message)
  memory        its worst rank's analytic total exceeds memory_per_rank

the rest become sweep points.

The global batch is fixed across plans by default, so that plans are ranked on the same work:
each plan runs m = global_batch / (b x dp) micro-batches. Without global_batch or
micro_batches the sweep picks the smallest global batch every candidate mesh reaches: a
multiple of b x dp for every dp, with m >= pp on every pipeline (default_global_batch; at
most b x world). Giving micro_batches instead lets the global batch vary with dp (b x m x dp):
plans are then ranked per global batch.

Deliberately not here: any rule of what step_bench accepts (only the arithmetic of writing a
mesh down: dp = world / (tp cp pp) must be a whole number, and the sweep's own choices above),
running points (scripts/sweep).

  [steps]                          # every key optional; lists or "auto"
  model = "small"                  # a preset (step_bench --model); shape flags go in `args`
  tp = "auto"                      # "auto": every divisor of the world size
  cp = [1]
  ep = [1]                         # default "auto" when the model has experts
  pp = "auto"
  zero = [0, 1]
  schedule = ["1f1b"]              # pipeline plans only; "auto": gpipe, 1f1b, interleaved
  recompute = ["none"]             # "auto": none, selective, full (the step model's: --plan-only --predict)
  cp_algo = ["ring"]               # plans with cp > 1; "auto": ring, allgather, ulysses
  vpp = [2]                        # interleaved only
  global_batch = "auto"            # the default; or 32, or [32, 64]: m = global_batch / (b dp)
  micro_batches = "auto"           # instead of global_batch: pp = 1: [1]; pp > 1: [pp, 2 pp]
  orders = ["tp-cp-ep-dp-pp"]      # "auto": every order, one per distinct rank layout
  memory_per_rank = "80G"          # prune plans whose worst rank's analytic total exceeds it
  max_plans = 2000                 # refuse to ask about more candidates than this
  predict = "cal.h5"               # step_bench --predict: rank the valid plans by predicted
                                   # tokens/s, run top + spread of them (predict_ranking.py); a
                                   # cluster description (.toml) ranks for that cluster: memory
                                   # against its GPUs (memory_per_rank defaults to their HBM)
  predict_fabric = "shm"           # --predict-fabric: the calibration's fits of that tag
  top = 5                          # with predict: run the 5 best (default: every valid plan)
  spread = 3                       # and 3 more spread over the rest of the ranking (default 3)
"""
import itertools
import json
import math
import os
import re
import subprocess

from . import tables

STEP_KEYS = {"model", "tp", "cp", "ep", "pp", "dp", "etp", "zero", "schedule", "vpp", "micro_batches",
             "global_batch", "orders", "memory_per_rank", "max_plans", "predict", "predict_fabric", "top", "spread",
             "recompute", "cp_algo"}
RECOMPUTE = ["none", "selective", "full"]
CP_ALGOS = ["ring", "allgather", "ulysses"]
SCHEDULES = ["gpipe", "1f1b", "interleaved"]
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


class StepsError(Exception):
    """A bad [steps] table: the sweep reports it as exit 2 before anything runs."""


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _ints(value, key, auto):
    """A list of positive integers, or "auto" -> auto (a list)."""
    if value == "auto":
        return auto
    vals = value if isinstance(value, list) else [value]
    for v in vals:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise StepsError(f"[steps] {key}: want integers or \"auto\", got {value!r}")
    return vals


def _human(b):
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= mult:
            return f"{b / mult:.2f} {unit}"
    return f"{int(b)} B"


PARALLEL_MIN = 200  # candidates per --plan-stdin process before the list is split over the cores


def plan_only(exe, world, argv, lines=None):
    """step_bench --plan-only --world WORLD ARGV -> its JSON object; with `lines` (a list of
    argument lists, one candidate each) --plan-stdin answers them all -> a list, in order: one
    process, or one per core (at most 4) for long lists (a 16384-GPU search predicts thousands)."""
    if lines is not None and len(lines) >= 2 * PARALLEL_MIN:
        import concurrent.futures
        k = max(1, min(4, os.cpu_count() or 1, len(lines) // PARALLEL_MIN))
        if k > 1:
            size = -(-len(lines) // k)
            parts = [lines[i:i + size] for i in range(0, len(lines), size)]
            with concurrent.futures.ThreadPoolExecutor(len(parts)) as pool:
                answers = list(pool.map(lambda part: _plan_only_one(exe, world, argv, part), parts))
            return [d for a in answers for d in a]
    return _plan_only_one(exe, world, argv, lines)


def _plan_only_one(exe, world, argv, lines):
    cmd = [exe, "--plan-only", "--world", str(world)] + argv + (["--plan-stdin"] if lines is not None else [])
    stdin = "".join(" ".join(a) + "\n" for a in lines) if lines is not None else None
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=600)
    docs = []
    for text in out.stdout.splitlines():
        try:
            docs.append(json.loads(text))
        except ValueError:
            pass
    want = len(lines) if lines is not None else 1
    if len(docs) != want:
        raise StepsError(f"step_bench --plan-only (exit {out.returncode}) answered {len(docs)} of {want} plans: "
                         f"{(out.stderr or out.stdout).strip()[:300]}")
    return docs if lines is not None else docs[0]


def layout_key(order, deg, expert_grid):
    """Orders that give the same rank layout: the relative order of the dimensions whose
    degree is above 1 (a dimension of size 1 takes no place in the mixed-radix rank), in the
    dense grid and, for a MoE model, the expert grid (etp in tp's place, edp in dp's)."""
    dims = order.split("-")
    dense = tuple(d for d in dims if d in ("tp", "cp", "dp", "pp") and deg[d] > 1)
    if not expert_grid:
        return dense
    edeg = {"tp": deg["etp"], "ep": deg["ep"], "dp": deg["edp"], "pp": deg["pp"]}
    return dense, tuple(d for d in dims if d in edeg and edeg[d] > 1)


def orders_for(spec, order_dims):
    if spec == "auto":
        perms = ["-".join(p) for p in itertools.permutations(order_dims)]
        return [DEFAULT_ORDER] + [p for p in perms if p != DEFAULT_ORDER]
    orders = spec if isinstance(spec, list) else [spec]
    for o in orders:
        bad = [d for d in str(o).split("-") if d not in order_dims]
        if bad:
            raise StepsError(f"[steps] orders: '{o}' names {bad} (dimensions: {', '.join(order_dims)})")
    return [str(o) for o in orders]


def model_info(exe, base_args):
    """The model the sweep's flags describe, as step_bench resolves it (a one-rank plan may
    break a rule, e.g. --inject-fault without data parallel: the model is still there)."""
    doc = plan_only(exe, 1, base_args)
    if "model" not in doc:
        raise StepsError(f"the model flags {' '.join(base_args)!r} are refused by step_bench: {doc.get('error')}")
    return doc["model"]


def zero_is_degenerate(deg, moe=False):
    """Whether ZeRO shards nothing under these degrees (tp cp ep dp pp etp edp; edp 0: no whole
    expert grid). ZeRO shards the dense parameters over dp x cp and, with the experts placed on
    the expert grid (ep > 1, or etp > 1 with MoE blocks), the experts over edp (their expert
    data-parallel group); otherwise the experts are part of their unit and shard over dp x cp
    with the rest. So it is the same memory and work as ZeRO-0 only when dp x cp is one rank
    and, with placed experts, edp is one rank too. With placed experts and no whole edp (0)
    the mesh itself is impossible: the binary says why."""
    if deg["dp"] * deg["cp"] > 1:
        return False
    placed = deg["ep"] > 1 or (moe and deg.get("etp", 1) > 1)
    return not placed or deg["edp"] == 1


def meshes(world, tps, cps, pps):
    """The (tp, cp, pp, dp) meshes of `world` ranks from the degree lists (dp: the rest)."""
    out = []
    for tp, cp, pp in itertools.product(tps, cps, pps):
        if tp < 1 or cp < 1 or pp < 1 or world % (tp * cp * pp):
            continue  # no whole dp: not a mesh of this world
        out.append((tp, cp, pp, world // (tp * cp * pp)))
    return out


def default_global_batch(mesh_list, b):
    """The smallest global batch every mesh reaches: a multiple of b x dp for each dp (m whole)
    with m = G / (b dp) >= pp on each pipeline. Returns (G, the rule in words)."""
    if not mesh_list:
        return None, "no mesh"
    lcm = math.lcm(*(dp for _, _, _, dp in mesh_list))
    need, who = b * lcm, None
    for tp, cp, pp, dp in mesh_list:
        if pp > 1 and b * dp * pp > need:
            need, who = b * dp * pp, (tp, cp, pp, dp)
    g = b * lcm * -(-need // (b * lcm))
    dps = sorted({dp for _, _, _, dp in mesh_list})
    why = f"the smallest multiple of b x dp = {b} x {{{', '.join(map(str, dps))}}}"
    if who is not None:
        why += f" with m >= pp on every pipeline (pp={who[2]} at dp={who[3]} needs m >= {who[2]})"
    return g, why


def _global_batches(spec, mesh_list, b):
    """[steps] global_batch -> ([G, ...], rule text)."""
    if spec is None or spec == "auto":
        g, why = default_global_batch(mesh_list, b)
        return ([g] if g else []), f"global batch {g} (auto: {why})"
    vals = spec if isinstance(spec, list) else [spec]
    for v in vals:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise StepsError(f"[steps] global_batch: want positive integers or \"auto\", got {spec!r}")
    return vals, f"global batch {', '.join(map(str, vals))} (given)"


def _micro_batches(gbs, b, mesh, out):
    """The micro-batch counts m = G / (b dp) of one (tp, cp, pp, dp) mesh for the global batches
    it reaches; one pruned candidate per global batch it cannot (appended to out)."""
    tp, cp, pp, dp = mesh
    mbs = []
    for g in gbs:
        why = None
        if g % (b * dp):
            why = f"global batch {g} is not a multiple of b x dp = {b} x {dp}"
        elif pp > 1 and g // (b * dp) < pp:
            why = (f"global batch {g} gives m = {g} / ({b} x {dp}) = {g // (b * dp)} micro-batches "
                   f"for pp = {pp} stages: m < pp, the pipeline never fills")
        if why:
            out.append({"degrees": {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp},
                        "order": DEFAULT_ORDER, "zero": 0, "schedule": None, "vpp": 1,
                        "m": g // (b * dp), "etp": 0, "global_batch": g,
                        "pruned": why, "category": "global batch"})
        else:
            mbs.append(g // (b * dp))
    return mbs


def _names(steps, key, default, known):
    """A [steps] list of names (or 'auto': all of `known`), each one checked."""
    v = steps.get(key, default)
    v = known if v == "auto" else (v if isinstance(v, list) else [v])
    for x in v:
        if x not in known:
            raise StepsError(f"[steps] {key}: unknown '{x}' (known: {', '.join(known)}, auto)")
    return v


def _axes(steps, world, model, order_dims):
    """The [steps] table's lists of degrees and choices, checked: what candidates() crosses."""
    unknown = set(steps) - STEP_KEYS
    if unknown:
        raise StepsError(f"[steps]: unknown key(s) {sorted(unknown)} (known: {', '.join(sorted(STEP_KEYS))})")
    divs = divisors(world)
    moe = model.get("experts", 0) > 0
    ax = {
        "moe": moe, "divs": divs,
        "tps": _ints(steps.get("tp", "auto"), "tp", divs),
        "cps": _ints(steps.get("cp", [1]), "cp", divs),
        "pps": _ints(steps.get("pp", "auto"), "pp", divs),
        "eps": _ints(steps.get("ep", "auto" if moe else [1]), "ep", divs),
        "etps": _ints(steps.get("etp", [1] if moe else [0]), "etp", divs),
        "zeros": _ints(steps.get("zero", [0, 1]), "zero", [0, 1, 2, 3]),
        "vpps": _ints(steps.get("vpp", [2]), "vpp", [2]),
        "recomputes": _names(steps, "recompute", ["none"], RECOMPUTE),
        "cp_algos": _names(steps, "cp_algo", ["ring"], CP_ALGOS),
        "scheds": _names(steps, "schedule", ["1f1b"], SCHEDULES),
    }
    if steps.get("global_batch") is not None and "micro_batches" in steps:
        raise StepsError("[steps]: give micro_batches (the global batch varies with dp) or global_batch "
                         "(fixed; the default), not both")
    ax["orders"] = orders_for(steps.get("orders", [DEFAULT_ORDER]), order_dims)
    return ax


def _mesh_list(steps, world, ax):
    """The (tp, cp, pp, dp) meshes of `world` ranks, kept to [steps] dp when it is given."""
    mesh_list = meshes(world, ax["tps"], ax["cps"], ax["pps"])
    if steps.get("dp") is None:
        return mesh_list
    dps = _ints(steps["dp"], "dp", ax["divs"])  # only these data-parallel degrees (the rest of the world)
    kept = [m for m in mesh_list if m[3] in dps]
    if mesh_list and not kept:
        raise StepsError(f"[steps] dp = {dps}: no mesh of {world} ranks from tp, cp, pp leaves that data-parallel "
                         f"degree (they leave {sorted({m[3] for m in mesh_list})})")
    return kept


def _mesh_plans(mesh, mbs, ax, world, model, out, seen_plans):
    """Appends to `out` the plans of one (tp, cp, pp, dp) mesh: every expert layout, distinct
    rank order, ZeRO stage, schedule, micro-batch count, recomputation and CP algorithm; a
    degenerate one (ZeRO over one rank, an etp equal to tp already listed) marked pruned."""
    tp, cp, pp, dp = mesh
    moe, b, layers = ax["moe"], model["micro_batch"], model.get("layers", 1)
    sched_vpp = [(None, 1)] if pp == 1 else [(s, v) for s in ax["scheds"] for v in (ax["vpps"] if s == "interleaved" else [1])]
    for ep, etp in itertools.product(ax["eps"], ax["etps"]):
        e_tp = etp if etp > 0 else tp
        deg = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp, "etp": e_tp,
               "edp": world // (e_tp * ep * pp) if world % (e_tp * ep * pp) == 0 else 0}
        seen = set()
        for order in ax["orders"]:
            key = layout_key(order, deg, moe)
            if key in seen:
                continue  # the same rank layout as an order already listed
            seen.add(key)
            algos = ax["cp_algos"] if cp > 1 else [None]
            for zero, (sched, vpp), m, rc, algo in itertools.product(ax["zeros"], sched_vpp, mbs, ax["recomputes"], algos):
                c = {"degrees": {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}, "etp": etp,
                     "order": order, "zero": zero, "schedule": sched, "vpp": vpp, "m": m,
                     "global_batch": b * dp * m, "recompute": rc, "cp_algo": algo,
                     "layers_per_stage": stage_split(layers, pp * vpp) if pp > 1 else None}
                same = (tp, cp, ep, dp, pp, e_tp if moe else 0, key, zero, sched, vpp, m, rc, algo)
                if zero > 0 and zero_is_degenerate(deg, moe):
                    experts = " and its experts over edp = 1 rank" if ep > 1 else ""
                    c.update(pruned=f"degenerate: ZeRO-{zero} shards over its data-parallel group "
                                    f"dp x cp = 1 rank{experts}: the same memory and work as ZeRO-0",
                             category="degenerate")
                elif same in seen_plans:
                    c.update(pruned=f"degenerate: the same plan as {plan_id(seen_plans[same])} "
                                    f"(etp {etp or 'default'} is tp = {tp})", category="degenerate")
                else:
                    seen_plans[same] = c
                out.append(c)


def candidates(steps, world, model, order_dims, info=None):
    """Every candidate plan at `world` ranks: dicts with degrees, order, zero, schedule, vpp, m,
    global_batch; or a 'pruned' reason and 'category' already (a global batch the plan cannot
    reach, a degenerate plan). `info`, a dict, receives the global batch rule
    ('global_batch': [G...] or None when micro_batches lets it vary, 'global_batch_rule')."""
    info = {} if info is None else info
    ax = _axes(steps, world, model, order_dims)
    b = model["micro_batch"]
    mesh_list = _mesh_list(steps, world, ax)
    if "micro_batches" in steps:
        gbs = None
        info.update(global_batch=None, global_batch_rule="global batch varies: b x m x dp (micro_batches given)")
    else:
        gbs, rule = _global_batches(steps.get("global_batch"), mesh_list, b)
        info.update(global_batch=gbs, global_batch_rule=rule)
    out, seen_plans = [], {}
    for mesh in mesh_list:
        if gbs is None:
            mbs = _ints(steps["micro_batches"], "micro_batches", [1] if mesh[2] == 1 else [mesh[2], 2 * mesh[2]])
        else:
            mbs = _micro_batches(gbs, b, mesh, out)
        _mesh_plans(mesh, mbs, ax, world, model, out, seen_plans)
    return out


def stage_split(layers, stages):
    """None when `stages` virtual stages divide the layers evenly (step_bench's default split);
    else an even-as-possible split, the middle stages taking the extra layers (the first and
    last hold the embedding and the head: Llama 3's layout keeps them a layer shorter)."""
    if stages < 1 or layers % stages == 0 or layers < stages:
        return None
    base, extra = divmod(layers, stages)
    split = [base] * stages
    order = sorted(range(stages), key=lambda i: (i in (0, stages - 1), abs(i - (stages - 1) / 2)))
    for i in order[:extra]:
        split[i] += 1
    return split


def mesh_text(c):
    d = c["degrees"]
    parts = [f"{k}={d[k]}" for k in ("tp", "cp", "ep", "pp") if d[k] > 1]
    if c.get("etp"):
        parts.append(f"etp={c['etp']}")
    return ",".join(parts + [f"dp={d['dp']}"])


def plan_id(c):
    """The plan's part of a point id: degrees, ZeRO, schedule, micro-batches, order."""
    d = c["degrees"]
    short = "".join(x[0] for x in c["order"].split("-"))  # tp-cp-ep-dp-pp -> tcedp
    sched = "" if c["schedule"] is None else f"-{c['schedule']}" + (f"v{c['vpp']}" if c["vpp"] > 1 else "")
    etp = f"etp{c['etp']}" if c.get("etp") else ""
    rc = f"-r{c['recompute']}" if c.get("recompute") not in (None, "none") else ""
    algo = f"-{c['cp_algo']}" if c.get("cp_algo") not in (None, "ring") else ""
    return f"tp{d['tp']}cp{d['cp']}ep{d['ep']}{etp}dp{d['dp']}pp{d['pp']}-z{c['zero']}{sched}{rc}{algo}-m{c['m']}-o{short}"


def plan_args(c):
    """The step_bench flags of one candidate (besides --mesh and --order, which the sweep adds)."""
    a = ["--zero", str(c["zero"]), "--micro-batches", str(c["m"])]
    if c["schedule"] is not None:
        a += ["--schedule", c["schedule"], "--vpp", str(c["vpp"])]
    if c.get("recompute") not in (None, "none"):
        a += ["--recompute", c["recompute"]]
    if c.get("cp_algo") not in (None, "ring"):
        a += ["--cp-algo", c["cp_algo"]]
    if c.get("layers_per_stage"):
        a += ["--layers-per-stage", ",".join(map(str, c["layers_per_stage"]))]
    return a


def _over_memory(doc, limit):
    """The memory reason when a valid plan does not fit, else None. On a cluster (a prediction
    with memory_per_stage: GPU bytes) its worst stage against memory_per_rank, else against the
    GPU's HBM; otherwise the engine's analytic memory against memory_per_rank (if given)."""
    pred = doc.get("predicted") or {}
    stages = pred.get("memory_per_stage")
    if stages:
        worst = max(stages, key=lambda m: m["total"])
        cap = limit if limit is not None else pred.get("hbm_bytes")
        if cap is not None and worst["total"] > cap:
            return _memory_reason(worst, cap) + (" (GPU bytes: mixed precision, flash attention)")
        return None
    if limit is not None and doc["memory"]["total"] > limit:
        return _memory_reason(doc["memory"], limit)
    return None


def _memory_reason(mem, limit):
    parts = ", ".join(f"{k} {_human(mem[k])}" for k in ("params", "grads", "optimizer", "activations", "buffers"))
    return (f"memory: {_human(mem['total'])} per rank (pp stage {mem['pp_rank']}: {parts}) exceeds "
            f"memory_per_rank {_human(limit)}")


CATEGORIES = ["global batch", "degenerate", "refused", "memory"]


def predict_args(steps):
    """The step_bench flags of [steps] predict (and predict_fabric): ["--predict", CAL, ...],
    [] without; StepsError for a missing calibration file, top/spread/predict_fabric without
    predict, or a top/spread that is not a count."""
    path = steps.get("predict")
    if not path:
        given = [k for k in ("predict_fabric", "top", "spread") if steps.get(k) is not None]
        if given:
            raise StepsError(f"[steps] {', '.join(given)}: only with predict (a calibration file: --predict CAL.h5)")
        return []
    if steps.get("spread") is not None and steps.get("top") is None:
        raise StepsError("[steps] spread: only with top (without top every valid plan runs)")
    if not isinstance(path, str):
        raise StepsError(f"[steps] predict: want a calibration file's path, got {path!r}")
    if not os.path.isfile(path):
        raise StepsError(f"[steps] predict: {path}: no such file (a calibration file: scripts/calibrate --out writes one; or a cluster description: examples/clusters/)")
    for k in ("top", "spread"):
        v = steps.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise StepsError(f"[steps] {k}: want a count >= 0, got {v!r}")
    args = ["--predict", os.path.abspath(path)]
    if steps.get("predict_fabric"):
        args += ["--predict-fabric", str(steps["predict_fabric"])]
    return args


def check_prediction(c, doc, pred_args):
    """StepsError when step_bench --plan-only --predict gave a valid plan no prediction: the
    calibration lacks a fit or a rate the plan needs (its message), or the build has no
    --predict; a prediction is never skipped silently."""
    p = doc.get("predicted")
    if not isinstance(p, dict):
        raise StepsError(f"step_bench --plan-only {' '.join(pred_args)} gave plan {c['id']} no prediction (does this "
                         "build know --predict?)")
    if p.get("error"):
        raise StepsError(f"plan {c['id']}: {p['error']}")
    if not isinstance(p.get("tokens_per_s"), (int, float)):
        raise StepsError(f"plan {c['id']}: its prediction has no tokens_per_s: {json.dumps(p)[:200]}")


def enumerate_plans(steps, world, exe, base_args, order_dims, info=None):
    """(valid, pruned) for one world size. valid: candidates with 'id', 'mesh', 'args' (the
    flags besides the sweep's own args, --mesh and --order) and the binary's JSON ('plan');
    pruned: candidates with 'id', 'reason' and 'category' (CATEGORIES: the global batch, a
    degenerate plan, the binary's message, the memory estimate against memory_per_rank).
    `info`, a dict, receives the global batch rule (candidates)."""
    model_args = (["--model", str(steps["model"])] if steps.get("model") else []) + base_args
    pred = predict_args(steps)
    # a cluster's prediction accepts shapes past the engine's attention limit (llama3-405b)
    model = model_info(exe, model_args + (pred if str(steps.get("predict", "")).endswith(".toml") else []))
    cands = candidates(steps, world, model, order_dims, info)
    cap = int(steps.get("max_plans", 2000))
    if len(cands) > cap:
        raise StepsError(f"[steps]: {len(cands)} candidate plans at {world} ranks exceed max_plans = {cap}: "
                         f"narrow tp/cp/ep/pp/zero/schedule/global_batch/orders, or raise max_plans")
    limit = None
    if steps.get("memory_per_rank") is not None:
        try:
            limit = tables.parse_size(steps["memory_per_rank"])
        except ValueError:
            raise StepsError(f"[steps] memory_per_rank = {steps['memory_per_rank']!r} is not a size like 80G")
    for c in cands:
        c["id"] = plan_id(c)
        c["mesh"] = mesh_text(c)
        c["args"] = model_args[:2 if steps.get("model") else 0] + plan_args(c) + pred

    asked = [c for c in cands if "pruned" not in c]
    docs = plan_only(exe, world, model_args, [["--mesh", c["mesh"], "--order", c["order"]] + plan_args(c) + pred
                                              for c in asked]) if asked else []
    answers = {id(c): d for c, d in zip(asked, docs)}
    valid, pruned = [], []
    # --compute modelled allocates no model: the run checks its communication buffers itself
    modelled = any(a == "modelled" and i > 0 and base_args[i - 1] == "--compute" for i, a in enumerate(base_args)) or \
        "--compute=modelled" in base_args
    for c in cands:
        doc = answers.get(id(c))
        if doc is None:
            pruned.append(c | {"reason": c.pop("pruned")})
        elif not doc.get("valid"):
            if pred and "--predict" in str(doc.get("error", "")):
                raise StepsError(f"plan {c['id']}: {doc.get('error')}")
            pruned.append(c | {"reason": doc.get("error", "refused"), "category": "refused"})
        elif not modelled and (over := _over_memory(doc, limit)) is not None:
            pruned.append(c | {"reason": over, "category": "memory", "plan": doc})
        else:
            if pred:
                check_prediction(c, doc, pred)
            valid.append(c | {"plan": doc})
    return valid, pruned


def prune_counts(pruned):
    """'3 global batch, 2 degenerate, 8 refused' (the categories with any plan, in order)."""
    n = {k: 0 for k in CATEGORIES}
    for p in pruned:
        n[p.get("category", "refused")] = n.get(p.get("category", "refused"), 0) + 1
    return ", ".join(f"{v} {k}" for k, v in n.items() if v)


def write_pruned(out_dir, valid, pruned, info=None):
    """<out>/plans.json (every candidate: valid with its plan, pruned with its reason and
    category; the global batch rule of each world size) and <out>/pruned.txt (one line per
    pruned plan: id, category, reason)."""
    os.makedirs(out_dir, exist_ok=True)
    counts = {k: sum(1 for p in pruned if p.get("category") == k) for k in CATEGORIES}
    with open(os.path.join(out_dir, "plans.json"), "w") as fh:
        json.dump({"valid": valid, "pruned": pruned, "pruned_counts": counts,
                   "global_batch": info or {}}, fh, indent=1)
    with open(os.path.join(out_dir, "pruned.txt"), "w") as fh:
        for p in pruned:
            reason = re.sub(r"\s+", " ", p["reason"])
            fh.write(f"{p['id']}\t{p.get('category', 'refused')}\t{reason}\n")
