"""meshbench.sweep_config and meshbench.expand: a sweep document -> points, every refusal with
its message, and a step table's plans pruned per category (fake step_bench, fakes.py)."""
import tomllib

import fakes
import pytest
from meshbench import expand, steps, sweep_config
from meshbench.sweep_config import SweepError

NAMES = fakes.names()


def points(doc, bin_dir="/nonexistent", **kw):
    return expand.expand(doc, fakes.PRESETS, bin_dir, NAMES, check_binaries=False, **kw)


def test_defaults_are_one_point():
    (p,) = points({})
    assert (p["id"], p["binary"], p["ranks"], p["backend"], p["fabric"], p["mesh"], p["kind"], p["rounds"]) == \
        ("all_reduce-r2-mpi-shm", "all_reduce", 2, "mpi", "shm", None, "collective", 1)
    assert p["cfg"]["max_bytes"] == "1M" and p["cfg"]["timeout"] == 600


def test_product_in_order_and_mesh_ids():
    doc = tomllib.loads("""
ranks = [2, 4]
fabrics = ["shm", "tcp-lo"]
binaries = ["all_reduce_bench", "all_gather"]
rounds = 2
[[sweep]]
[[sweep]]
binaries = ["all_gather"]
ranks = [4]
meshes = ["tp=2,dp=2:tp", {mesh = "tp=2", group = "dp", order = "dp-tp"}]
""")
    pts = points(doc)
    ids = [p["id"] for p in pts]
    # table 1: binaries x ranks x fabrics; table 2 adds the meshes (its plain point is table 1's)
    assert ids[:8] == ["all_reduce-r2-mpi-shm", "all_reduce-r2-mpi-tcp-lo", "all_reduce-r4-mpi-shm",
                       "all_reduce-r4-mpi-tcp-lo", "all_gather-r2-mpi-shm", "all_gather-r2-mpi-tcp-lo",
                       "all_gather-r4-mpi-shm", "all_gather-r4-mpi-tcp-lo"]
    assert ids[8:] == ["all_gather-r4-mpi-shm-tp2dp2-tp", "all_gather-r4-mpi-shm-tp2-dp",
                       "all_gather-r4-mpi-tcp-lo-tp2dp2-tp", "all_gather-r4-mpi-tcp-lo-tp2-dp"]
    m = pts[9]["mesh"]
    assert (m["degrees"], m["group"], m["text"], m["order"]) == ({"tp": 2}, "dp", "tp=2", "dp-tp")
    assert {p["rounds"] for p in pts} == {2}


def test_nccl_fabric_pairs_with_nccl_backend_only():
    pts = points({"backends": ["mpi", "nccl"], "fabrics": ["shm", "nccl"]})
    assert [p["id"] for p in pts] == ["all_reduce-r2-mpi-shm", "all_reduce-r2-nccl-nccl"]


@pytest.mark.parametrize("toml, message", [
    ('binaries = ["all_reduce", "allreduce"]',
     "sweep file: unknown binary 'allreduce' (known: all_reduce_bench, all_gather_bench, reduce_scatter_bench, "
     "all_to_all_bench, broadcast_bench, sendrecv_bench, all_to_allv_bench, step_bench)"),
    ('ranks = [6]\n[[sweep]]\n[[sweep]]\nmeshes = [{ mesh = "tp=4", group = "tp" }]',
     "[[sweep]] #2: mesh 'tp=4' (product 4) does not divide ranks=6"),
    ('ranks = [2]\nmeshes = ["tp=2,dp=2:tp"]', "sweep file: mesh 'tp=2,dp=2' needs 4 ranks, not ranks=2"),
    ('fabrics = ["shm", "infiniband"]', "sweep file: unknown fabric preset 'infiniband' (known: shm, tcp-lo, nccl)"),
    ('fabrics = ["nccl"]', "sweep file: fabric 'nccl' is a nccl preset but backends = ['mpi']"),
    ('rank = [2]', "unknown key(s) ['rank'] at the top level"),
    ('[[sweep]]\nbinary = "x"', "[[sweep]] #1: unknown key(s) ['binary']"),
    ('[[sweep]]\nrounds = 0', "[[sweep]] #1: rounds must be a positive integer, got 0"),
    ('rounds = true', "sweep file: rounds must be a positive integer, got True"),
    ('max_bytes = "1X"', "sweep file: max_bytes = '1X' is not a size like 8, 64K, 128M, 1G"),
    ('ranks = [0]', "sweep file: ranks must be positive integers, got 0"),
    ('backends = ["gloo"]', "sweep file: unknown backend 'gloo' (mpi or nccl)"),
    ('binaries = ["sendrecv"]\nranks = [1]', "sweep file: sendrecv needs at least 2 ranks, got ranks=1"),
    ('args = "--x"', "sweep file: args must be a list of strings and env a table"),
    ('meshes = ["xp=2"]', "mesh 'xp=2': unknown dimension 'xp' (known: tp, cp, ep, dp, pp, etp, edp)"),
    ('meshes = ["tp=0"]', "mesh 'tp=0': degree of tp must be a positive integer, got '0'"),
    ('meshes = ["tp=2:rows"]', "mesh 'tp=2': unknown group 'rows'"),
    ('meshes = ["tp=2:pp"]', "mesh 'tp=2': group 'pp' is not a dimension of the mesh"),
    ('meshes = [{mesh = "tp=2", colour = "red"}]', "unknown mesh key(s) ['colour']"),
    ('sweep = 3', "'sweep' must be an array of tables ([[sweep]])"),
    ('steps = {}\nbinaries = ["all_reduce"]',
     "sweep file: a [steps] table runs step_bench only (binaries = [\"step\"]), got ['all_reduce']"),
])
def test_refusals_name_the_entry(toml, message):
    with pytest.raises(SweepError) as e:
        points(tomllib.loads(toml))
    assert message in str(e.value)


def test_unbuilt_binary_is_refused(tmp_path):
    with pytest.raises(SweepError, match=r"binary 'all_gather' is not built: .*all_gather_bench missing"):
        expand.expand({"binaries": ["all_gather"]}, fakes.PRESETS, str(tmp_path), NAMES)


def test_load_doc_errors(tmp_path):
    with pytest.raises(SweepError, match="no such sweep file: /nonexistent.toml"):
        sweep_config.load_doc("/nonexistent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text('binaries = ["all_reduce"\n')
    with pytest.raises(SweepError, match=f"{bad}: not valid TOML"):
        sweep_config.load_doc(str(bad))


def test_real_presets_come_from_env_sh():
    p = sweep_config.fabric_presets()
    assert p["shm"]["env"] == {"UCX_TLS": "self,sm"} and p["shm"]["backend"] == "mpi"
    assert p["netns"]["launcher"] == "netns"
    assert p["tcp"]["env"] == {"UCX_TLS": "self,sm,tcp"}  # UCX_NET_DEVICES= empty: not set
    assert {"UCX_TLS", "NCCL_P2P_DISABLE", "NCCL_SOCKET_IFNAME"} <= sweep_config.fabric_vars(p)


# --- step tables: fakes.STEP_BENCH refuses tp=4 and sizes memory as 4000/(tp pp) + 1000|500 ------
STEPS_4 = {"steps": {"zero": [0, 1], "memory_per_rank": "3K"}, "ranks": [4], "binaries": ["step"]}


def test_step_plans_pruned_per_category(fake_bin):
    pruned, batches = [], []
    pts = expand.expand(STEPS_4, fakes.PRESETS, fake_bin, NAMES, pruned=pruned, batches=batches)
    # 6 meshes of 4 ranks (tp, pp in 1, 2, 4) x ZeRO 0/1 = 12 candidates at global batch 4
    assert batches == [{"where": "sweep file", "ranks": 4, "global_batch": [4],
                        "global_batch_rule": "global batch 4 (auto: the smallest multiple of b x dp = 1 x {1, 2, 4})"}]
    assert steps.prune_counts(pruned) == "3 degenerate, 1 refused, 2 memory"
    by = {p["id"]: (p["category"], p["reason"]) for p in pruned}
    assert by["step-r4-tp4cp1ep1dp1pp1-z0-m4-otcedp"] == ("refused", "tp=4 exceeds the 2 heads")
    assert by["step-r4-tp1cp1ep1dp4pp1-z0-m1-otcedp"][0] == "memory"
    assert by["step-r4-tp1cp1ep1dp4pp1-z0-m1-otcedp"][1].startswith(
        "memory: 4.88 KiB per rank (pp stage 0: params 4.88 KiB, grads 0 B")
    assert by["step-r4-tp2cp1ep1dp1pp2-z1-1f1b-m4-otcedp"][0] == "degenerate"
    assert sorted(p["id"] for p in pts) == sorted(
        f"step-r4-mpi-shm-{x}" for x in ("tp1cp1ep1dp2pp2-z0-1f1b-m2-otcedp", "tp1cp1ep1dp2pp2-z1-1f1b-m2-otcedp",
                                         "tp1cp1ep1dp1pp4-z0-1f1b-m4-otcedp", "tp2cp1ep1dp2pp1-z0-m2-otcedp",
                                         "tp2cp1ep1dp2pp1-z1-m2-otcedp", "tp2cp1ep1dp1pp2-z0-1f1b-m4-otcedp"))
    p = next(p for p in pts if p["id"].endswith("tp2cp1ep1dp1pp2-z0-1f1b-m4-otcedp"))
    assert p["plan_args"] == ["--zero", "0", "--micro-batches", "4", "--schedule", "1f1b", "--vpp", "1"]
    assert (p["mesh"]["text"], p["global_batch"], p["rounds"], p["kind"]) == ("tp=2,pp=2,dp=1", 4, 3, "other")
    assert "steps" not in p["cfg"]


def test_global_batch_prunes(fake_bin):
    pruned = []
    doc = {"steps": {"zero": [0], "global_batch": 2}, "ranks": [4], "binaries": ["step"]}
    pts = expand.expand(doc, fakes.PRESETS, fake_bin, NAMES, pruned=pruned)
    assert steps.prune_counts(pruned) == "3 global batch, 1 refused"
    reasons = sorted(p["reason"] for p in pruned if p["category"] == "global batch")
    assert reasons[0] == "global batch 2 gives m = 2 / (1 x 1) = 2 micro-batches for pp = 4 stages: m < pp, " \
                         "the pipeline never fills"
    assert "global batch 2 is not a multiple of b x dp = 1 x 4" in reasons
    assert [p["global_batch"] for p in pts] == [2, 2]


def test_every_plan_pruned_still_returns(fake_bin):
    pruned = []
    doc = {"steps": {"tp": [4], "pp": [1], "zero": [0]}, "ranks": [4], "binaries": ["step"]}
    assert expand.expand(doc, fakes.PRESETS, fake_bin, NAMES, pruned=pruned) == []
    assert [p["category"] for p in pruned] == ["refused"]


def test_bad_steps_table(fake_bin):
    with pytest.raises(SweepError, match=r"sweep file: \[steps\]: unknown key\(s\) \['tpp'\]"):
        expand.expand({"steps": {"tpp": 2}}, fakes.PRESETS, fake_bin, NAMES)
    with pytest.raises(SweepError, match="sweep file: step_bench is not built: /nonexistent/step_bench missing"):
        expand.expand({"steps": {}}, fakes.PRESETS, "/nonexistent", NAMES, check_binaries=False)


def test_write_pruned(tmp_path, fake_bin):
    pruned, batches = [], []
    pts = expand.expand(STEPS_4, fakes.PRESETS, fake_bin, NAMES, pruned=pruned, batches=batches)
    steps.write_pruned(str(tmp_path), pts, pruned, batches)
    lines = (tmp_path / "pruned.txt").read_text().splitlines()
    assert len(lines) == 6
    assert "step-r4-tp4cp1ep1dp1pp1-z0-m4-otcedp\trefused\ttp=4 exceeds the 2 heads" in lines
    import json
    doc = json.loads((tmp_path / "plans.json").read_text())
    assert doc["pruned_counts"] == {"global batch": 0, "degenerate": 3, "refused": 1, "memory": 2}
    assert len(doc["valid"]) == 6


def test_zero_degenerate_only_when_dense_and_expert_groups_are_one_rank():
    # ZeRO shards the dense parameters over dp x cp and, with ep > 1, the experts over edp
    # (world / (etp ep pp)): tp=4 x ep=2 at dp = 1 still shards the experts over edp = 2.
    model = {"micro_batch": 1, "experts": 4}  # global batch 2: m = 2 / dp
    cands = steps.candidates({"tp": [2, 4], "pp": [1, 2], "ep": [1, 2], "zero": [1]}, 4, model,
                             NAMES["order_dims"])
    degenerate = sorted(steps.plan_id(c) for c in cands if c.get("category") == "degenerate")
    assert degenerate == ["tp2cp1ep1etp1dp1pp2-z1-1f1b-m2-otcedp", "tp2cp1ep2etp1dp1pp2-z1-1f1b-m2-otcedp",
                          "tp4cp1ep1etp1dp1pp1-z1-m2-otcedp"]
    by = {steps.plan_id(c): c for c in cands}
    assert "pruned" not in by["tp4cp1ep2etp1dp1pp1-z1-m2-otcedp"]  # edp = 2
    assert "pruned" not in by["tp2cp1ep2etp1dp2pp1-z1-m1-otcedp"]  # ZeRO with tp and ep over dp 2
    assert by["tp2cp1ep2etp1dp1pp2-z1-1f1b-m2-otcedp"]["pruned"].endswith(
        "dp x cp = 1 rank and its experts over edp = 1 rank: the same memory and work as ZeRO-0")
    assert steps.zero_is_degenerate({"tp": 2, "cp": 1, "ep": 1, "dp": 1, "pp": 2, "etp": 1, "edp": 2})
    assert not steps.zero_is_degenerate({"tp": 1, "cp": 2, "ep": 1, "dp": 1, "pp": 2, "etp": 1, "edp": 2})


def test_zero_with_expert_tensor_parallel_shards_the_experts_over_edp():
    # etp > 1 places the experts on the expert grid even at ep = 1: tp4 with etp 2 at dp = 1
    # shards them over edp = world / (etp ep pp) = 2, so ZeRO is not degenerate; a dense model
    # (no MoE blocks) has no experts to place, whatever etp says.
    deg = {"tp": 4, "cp": 1, "ep": 1, "dp": 1, "pp": 1, "etp": 2, "edp": 2}
    assert not steps.zero_is_degenerate(deg, moe=True)
    assert steps.zero_is_degenerate(deg, moe=False)
    assert steps.zero_is_degenerate(dict(deg, edp=1), moe=True)


def test_plan_label_tells_zero3_keep_from_regather():
    from meshbench import plans
    deg = {"pp": 2, "dp": 2}
    assert plans.plan_label(deg, "", 1, 3, "1f1b", 2, False, True) == "dp2 x pp2 1f1b zero3 keep m=2"
    assert plans.plan_label(deg, "", 1, 3, "1f1b", 2, False, False) == "dp2 x pp2 1f1b zero3 m=2"
    assert plans.plan_label(deg, "", 1, 1, "1f1b", 2, False, True) == "dp2 x pp2 1f1b zero1 m=2"


def test_dp_keeps_only_those_data_parallel_degrees():
    # [steps] dp: the meshes whose data-parallel rest is listed (examples/modelled-405b.toml keeps dp = 1)
    model = {"micro_batch": 1}
    cands = steps.candidates({"tp": [1, 2], "pp": [1, 2], "zero": [0], "dp": [1], "global_batch": 4}, 2, model,
                             NAMES["order_dims"])
    assert sorted((c["degrees"]["tp"], c["degrees"]["pp"], c["degrees"]["dp"]) for c in cands) == [(1, 2, 1), (2, 1, 1)]
    with pytest.raises(steps.StepsError):
        steps.candidates({"dp": [3]}, 2, model, NAMES["order_dims"])
