"""step_bench --predict CLUSTER.toml (docs/predict.md "A cluster this machine is not"): the
cluster description's checks (exit 2 naming the field), the roofline compute and the ring
collectives on a generated cluster with known peaks, and which groups cross nodes."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEP = os.path.join(ROOT, "build", "bin", "step_bench")
PRESETS = [os.path.join(ROOT, "examples", "clusters", f) for f in ("dgx-a100.toml", "dgx-h100.toml")]

PEAK = 100e12   # FLOP/s
LINK = 100e9    # bytes/s inside a node
NIC = 10e9      # bytes/s per GPU across nodes


def cluster_text(gpus=8, inter=True, hbm_tb=1e6, **over):
    """A cluster whose GEMMs and attention run at PEAK, elementwise ops at a near-infinite HBM
    bandwidth, links with no latency."""
    text = f"""name = "test"
[gpu]
name = "G"
peak_bf16_tflops = {PEAK / 1e12}
peak_fp32_tflops = 10
hbm_gib = {over.get('hbm_gib', 80)}
hbm_tb_per_s = {hbm_tb}
[node]
gpus = {gpus}
[intra]
bandwidth_gb_per_s = {LINK / 1e9}
latency_us = 0
"""
    if inter:
        text += f"""[inter]
nic_gb_per_s = {NIC / 1e9}
latency_us = 0
rails = {gpus}
"""
    text += """[collectives]
algorithm = "ring"
hierarchical = true
[efficiency]
source = "test: the peaks themselves"
gemm = 1.0
attention = 1.0
memory = 1.0
"""
    return text


def run(cluster, *args, world=1):
    p = subprocess.run([STEP, "--plan-only", "--world", str(world), "--predict", str(cluster), *args],
                       capture_output=True, text=True)
    return p, (json.loads(p.stdout) if p.stdout.strip() else None)


def test_roofline_compute_and_ring_all_reduce(tmp_path):
    # tp=2 in one node: the step's compute is its GEMM and attention FLOPs over the peak (the
    # elementwise ops are free here), and each tensor-parallel all-reduce of S fp32 bytes moves
    # S/2 bf16 bytes: 2 (n-1)/n S/2 / LINK = S / 2 / LINK for n = 2.
    c = tmp_path / "c.toml"
    c.write_text(cluster_text())
    p, j = run(c, "--model", "tiny", "--mesh", "tp=2", "--op-list", world=2)
    assert p.returncode == 0, p.stderr
    pred = j["predicted"]
    flops = sum(o["flops"] * 1 for o in j["op_list"] if o["op"] in ("matmul", "attention"))
    r = pred["per_rank"][0]
    assert r["compute_s"] == pytest.approx(flops / PEAK, rel=1e-4)
    want_tp = sum(c["calls"] * c["bytes"] / 2 / LINK for c in j["comm_list"] if c["dim"] == "tp")
    assert pred["exposed_s"]["tp"] == pytest.approx(want_tp, rel=1e-9)
    assert pred["crosses_nodes"] == {"tp": False}
    assert pred["mfu"] == pred["hfu"] and 0 < pred["mfu"] < 1
    assert pred["feasible"] is True and len(pred["memory_per_stage"]) == 1
    assert "test: the peaks themselves" in pred["efficiency_source"]


def test_groups_across_nodes_take_the_nic(tmp_path):
    # 4 GPUs per node, tp=4 x dp=2 over 8 ranks: tp stays in a node, dp's pairs span two; the
    # same plan with 8 GPUs per node keeps dp inside one node and its exposed time is smaller
    # (the data-parallel reduction is charged; it partly hides behind the last backward).
    small, big = tmp_path / "four.toml", tmp_path / "eight.toml"
    small.write_text(cluster_text(gpus=4))
    big.write_text(cluster_text(gpus=8))
    args = ("--model", "tiny", "--mesh", "tp=4,dp=2", "--micro-batches", "1")
    (p4, a), (p8, b) = run(small, *args, world=8), run(big, *args, world=8)
    assert p4.returncode == 0 and p8.returncode == 0, p4.stderr + p8.stderr
    assert a["predicted"]["crosses_nodes"] == {"tp": False, "dp": True}
    assert b["predicted"]["crosses_nodes"] == {"tp": False, "dp": False}
    assert a["predicted"]["exposed_s"]["tp"] == pytest.approx(b["predicted"]["exposed_s"]["tp"], rel=1e-12)
    assert a["predicted"]["step_time_s"] >= b["predicted"]["step_time_s"]


def test_a_plan_that_does_not_fit_is_infeasible_with_its_memory(tmp_path):
    c = tmp_path / "c.toml"
    c.write_text(cluster_text(hbm_gib=0.001))
    p, j = run(c, "--model", "tiny", world=1)
    assert p.returncode == 0, p.stderr
    assert j["predicted"]["feasible"] is False and j["predicted"]["memory_per_stage"][0]["total"] > 0.001 * 2**30


@pytest.mark.parametrize("edit,needle", [
    (lambda t: t.replace("peak_bf16_tflops", "peak_bf16"), "[gpu] peak_bf16_tflops is missing"),
    (lambda t: t.replace("gemm = 1.0", "gemm = 1.5"), "[efficiency] gemm is a fraction of peak"),
    (lambda t: t.replace("gemm = 1.0", 'gemm = "fast"'), "[efficiency] gemm is not a number"),
    (lambda t: t.replace('algorithm = "ring"', 'algorithm = "mesh"'), "[collectives] algorithm must be ring or tree"),
    (lambda t: t.replace("nic_gb_per_s = 10.0", "nic_gb_per_s = 1000.0"), "exceeds [intra] bandwidth_gb_per_s"),
    (lambda t: "name = [", "not a cluster description (TOML"),
])
def test_bad_cluster_files_are_exit_2_naming_the_field(tmp_path, edit, needle):
    c = tmp_path / "c.toml"
    c.write_text(edit(cluster_text()))
    p, j = run(c, "--model", "tiny", world=1)
    assert p.returncode == 2 and needle in p.stderr, p.stderr
    assert needle in j["predicted"]["error"]


def test_contradictions_with_the_plan_are_exit_2(tmp_path):
    c = tmp_path / "c.toml"
    c.write_text(cluster_text(gpus=4))
    p, _ = run(c, "--model", "tiny", "--mesh", "dp=6", world=6)
    assert p.returncode == 2 and "[node] gpus = 4 does not divide the world (6 ranks)" in p.stderr
    c.write_text(cluster_text(gpus=4, inter=False))
    p, _ = run(c, "--model", "tiny", "--mesh", "tp=4,dp=2", world=8)
    assert p.returncode == 2 and "dp group of 2 ranks spans 2 nodes" in p.stderr and "no [inter] network" in p.stderr
    p, _ = run(c, "--model", "tiny", "--mesh", "tp=4", world=4)  # one node: no network needed
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("preset", PRESETS)
def test_the_shipped_presets_predict_a_plan(preset):
    p, j = run(preset, "--model", "medium", "--mesh", "tp=8,dp=4", world=32)
    assert p.returncode == 0, p.stderr
    pred = j["predicted"]
    assert pred["step_time_s"] > 0 and 0 < pred["mfu"] < 1
    assert pred["crosses_nodes"] == {"tp": False, "dp": True}


def test_long_context_plans_predict_and_plan_their_memory():
    # Llama 3 405B at sequence 131072 on 16384 GPUs (TP 8, CP 16, PP 16, DP 8; issue 50): the
    # whole micro-batch's logits (131072 x 128256 = 16.8e9) would exceed 2^31, but a rank holds
    # 1/(cp tp) of them, so the plan is valid, and predicted with every stage's memory. At tp=4
    # without context parallel a rank's logits pass 2^31: a run is refused naming them, a
    # prediction is not.
    lps = ",".join(["3"] + ["4"] * 30 + ["3"])
    base = [STEP, "--plan-only", "--world", "16384", "--model", "llama3-405b", "--seq", "131072", "--max-seq", "131072",
            "--micro-batch", "1", "--sp", "--zero", "2", "--schedule", "interleaved", "--vpp", "2",
            "--micro-batches", "16", "--layers-per-stage", lps]
    cp16 = ["--mesh", "tp=8,cp=16,pp=16,dp=8"]
    p = subprocess.run(base + cp16 + ["--predict", PRESETS[1]], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["valid"] and j["predicted"]["step_time_s"] > 0 and 0 < j["predicted"]["mfu"] < 1, j
    assert 0 < j["memory"]["total"] and "80.0 GiB: fits" in p.stderr, p.stderr
    p = subprocess.run(base + cp16, capture_output=True, text=True)
    assert p.returncode == 0 and json.loads(p.stdout)["valid"], p.stdout
    cp1 = ["--mesh", "tp=4,pp=16,dp=256"]
    p = subprocess.run(base + cp1, capture_output=True, text=True)
    err = json.loads(p.stdout)["error"]
    assert p.returncode == 2 and err.startswith("--micro-batch/--seq/--vocab (the logits") and \
        "a tensor of 4202692608 elements on each rank at tp=4 cp=1 exceeds 2^31-1" in err, err
    p = subprocess.run(base + cp1 + ["--predict", PRESETS[1]], capture_output=True, text=True)
    assert p.returncode == 0 and json.loads(p.stdout)["valid"], p.stdout


def test_published_check_prints_every_run(tmp_path):
    # scripts/published-check over a runs file: one row per run with the error against the
    # published step time or throughput (here a generated cluster and two small plans: the check
    # is the table's, not the figures'); a malformed runs file is exit 2 naming the line.
    c = tmp_path / "c.toml"
    c.write_text(cluster_text())
    runs = tmp_path / "runs.txt"
    # (the tolerances: wide enough for any figure, so the exit code is the tolerance's alone)
    runs.write_text(f"# a comment\nA | 1.0 s | test | {c} | --world 2 --model tiny --mesh tp=2 | 1e9% | a cause\n"
                    f"B | 2.0 TFLOP/s | test | {c} | --world 4 --model tiny --mesh tp=2,dp=2 | 1e9%\n")
    out = tmp_path / "rows.json"
    script = os.path.join(ROOT, "scripts", "published-check")
    p = subprocess.run([script, "--runs", str(runs), "--json", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    a, b = json.loads(out.read_text())["runs"]
    assert (a["label"], b["label"]) == ("A", "B")
    assert a["error"] == pytest.approx(a["predicted_s"] / 1.0 - 1)
    assert b["error"] == pytest.approx(2.0 / b["predicted_tflops"] - 1)  # in step-time terms: published / predicted
    assert a["within"] and a["tolerance"] == pytest.approx(1e7) and a["cause"] == "a cause" and b["cause"] == ""
    assert "| A | test |" in p.stdout and "| 1 s |" in p.stdout and "| 2 TFLOP/s |" in p.stdout
    assert "| a cause |" in p.stdout and "2 within their tolerance" in p.stdout
    # a run outside its tolerance (0%: any error) is exit 1, marked and named; the default is 10%
    runs.write_text(f"A | 1.0 s | test | {c} | --world 2 --model tiny --mesh tp=2 | 0%\n"
                    f"B | 2.0 TFLOP/s | test | {c} | --world 4 --model tiny --mesh tp=2,dp=2\n")
    p = subprocess.run([script, "--runs", str(runs), "--json", str(out)], capture_output=True, text=True)
    a, b = json.loads(out.read_text())["runs"]
    assert p.returncode == 1 and not a["within"] and b["tolerance"] == pytest.approx(0.10), p.stdout
    assert "| 0% **outside** |" in p.stdout and "outside it A (" in p.stdout, p.stdout
    for text, needle in (("A | fast s | test | c.toml | --world 2\n", "runs.txt:1: published 'fast s' is not a number"),
                         ("A | 1.0 min | test | c.toml | --world 2\n", "the unit must be s or TFLOP/s"),
                         ("A | 1.0 s | test | c.toml | --world 2 | ten\n", "runs.txt:1: tolerance 'ten': want a percentage"),
                         ("A | 1.0 s | test | --world 2\n", "runs.txt:1: want 'label | published | source | cluster")):
        runs.write_text(text)
        p = subprocess.run([script, "--runs", str(runs)], capture_output=True, text=True)
        assert p.returncode == 2 and needle in p.stderr, p.stderr


def test_recomputation_adds_hardware_flops_not_model_flops(tmp_path):
    # One rank, tiny: full recomputation runs each block's forward again before its backward,
    # selective its attention core; with free elementwise ops the compute grows by those FLOPs
    # over the peak, the model's FLOPs stay (MFU falls), the hardware's grow (HFU > MFU).
    c = tmp_path / "c.toml"
    c.write_text(cluster_text())
    base = ("--model", "tiny", "--op-list", "--attention", "naive")  # selective recomputes the materialised attention
    runs = {m: run(c, *base, "--recompute", m)[1] for m in ("none", "selective", "full")}
    comp = {m: j["predicted"]["per_rank"][0]["compute_s"] for m, j in runs.items()}
    ops = runs["none"]["op_list"]
    fwd = sum(o["flops"] for o in ops if o["phase"] == "F" and o["op"] in ("matmul", "attention"))
    head = sum(o["flops"] for o in ops if o["phase"] == "F" and o["op"] == "matmul" and o["n"] == 512)  # V = 512
    attn = sum(o["flops"] for o in ops if o["phase"] == "F" and o["op"] == "attention")
    assert comp["full"] - comp["none"] == pytest.approx((fwd - head) / PEAK, rel=1e-3)  # the blocks, not the head
    assert comp["selective"] - comp["none"] == pytest.approx(attn / PEAK, rel=1e-3)
    p = {m: j["predicted"] for m, j in runs.items()}
    assert p["none"]["hfu"] == p["none"]["mfu"]
    assert p["full"]["mfu"] < p["none"]["mfu"] and p["full"]["hfu"] > p["full"]["mfu"]
    assert runs["full"]["recompute"] == "full"
    assert any("--recompute full" in n and "as the engine runs it" in n for n in p["full"]["notes"])


def test_recompute_layers_needs_full_recomputation():
    # the engine runs --recompute full (tests/mpi/step_recompute_full.sh); choosing its blocks
    # without it is refused, naming both options
    p = subprocess.run([STEP, "--model", "tiny", "--steps", "1", "--recompute-layers", "2"], capture_output=True, text=True)
    assert p.returncode == 2 and "--recompute-layers 2: chooses the blocks --recompute full recomputes" in p.stderr


def test_published_shapes_are_predicted_past_the_engines_attention_limit():
    # llama3-405b at seq 8192 in this engine's materialised attention: each rank holds
    # b x heads/tp x seq^2 probabilities, 2^31 at tp=4 (refused: the engine indexes with 32-bit
    # ints) and 2^30 at tp=8 (planned); flash (the default) plans tp=4, and a prediction
    # (--plan-only --predict) accepts it either way (the step model holds no T x T matrix).
    lps = ",".join(["7"] + ["8"] * 14 + ["7"])
    def plan(tp, *extra):
        return subprocess.run([STEP, "--plan-only", "--world", "16384", "--model", "llama3-405b", "--mesh",
                               f"tp={tp},pp=16", "--sp", "--micro-batches", "16", "--layers-per-stage", lps, *extra],
                              capture_output=True, text=True)
    p = plan(4, "--attention", "naive")
    err = json.loads(p.stdout)["error"]
    assert p.returncode == 2 and "the attention matrix" in err and "a tensor of 2147483648 elements on each rank " \
        "at tp=4 cp=1 exceeds 2^31-1" in err, err
    p = plan(8, "--attention", "naive")
    assert p.returncode == 0 and json.loads(p.stdout)["valid"], p.stdout
    p = plan(4)
    assert p.returncode == 0 and json.loads(p.stdout)["valid"] and json.loads(p.stdout)["attention"] == "flash"
    p = plan(4, "--attention", "naive", "--predict", PRESETS[1])
    assert p.returncode == 0 and json.loads(p.stdout)["valid"], p.stdout
    args = ("--world", "16384", "--model", "llama3-405b", "--mesh", "tp=8,pp=16", "--sp", "--micro-batches", "16",
            "--layers-per-stage", lps)
    p, j = run(PRESETS[1], *args[2:], world=16384)
    assert p.returncode == 0, p.stderr
    m = j["model"]
    assert (m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn"], m["seq"], m["vocab"]) == \
        (126, 16384, 128, 8, 79872, 8192, 128256)
    pred = j["predicted"]
    assert j["global_batch"] * j["model"]["seq"] == 16 * 128 * 8192 and 0 < pred["mfu"] < 1
    assert pred["crosses_nodes"] == {"tp": False, "dp": True, "pp": True}


def test_memory_on_a_gpu_is_mixed_precision_without_the_attention_matrix(tmp_path):
    # tiny (2 layers, s 64, b 4, h 64, V 512) on one GPU: bf16 weights, fp32 gradients, fp32
    # master and moments (2 : 4 : 12 bytes per parameter); activations 34 s b h per layer
    # (Korthikanti's 10 + 24/t at t = 1, no attention matrix) and the fp32 logits 4 s b V.
    # ZeRO-1 over dp = 2 halves the optimizer's; full recomputation keeps 2 s b h per layer.
    c = tmp_path / "c.toml"
    c.write_text(cluster_text())
    one = run(c, "--model", "tiny")[1]["predicted"]["memory_per_stage"][0]
    assert one["grads"] == pytest.approx(2 * one["params"]) and one["optimizer"] == pytest.approx(6 * one["params"])
    sbh = 64 * 4 * 64
    assert one["activations"] == pytest.approx(2 * 34 * sbh + 4 * 64 * 4 * 512)
    z1 = run(c, "--model", "tiny", "--mesh", "dp=2", "--zero", "1", world=2)[1]["predicted"]["memory_per_stage"][0]
    assert z1["optimizer"] == pytest.approx(one["optimizer"] / 2) and z1["grads"] == pytest.approx(one["grads"])
    full = run(c, "--model", "tiny", "--recompute", "full")[1]["predicted"]["memory_per_stage"][0]
    assert full["activations"] == pytest.approx(2 * 2 * sbh + 4 * 64 * 4 * 512)


def test_stage_split_is_even_with_shorter_end_stages():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from meshbench import steps
    assert steps.stage_split(126, 16) == [7] + [8] * 14 + [7]
    assert steps.stage_split(126, 32) == [3] + [4] * 30 + [3]
    assert steps.stage_split(8, 4) is None and steps.stage_split(2, 4) is None
    assert sum(steps.stage_split(10, 4)) == 10 and steps.stage_split(10, 4) == [2, 3, 3, 2]


def sweep_cmd(cluster, *extra):
    return [os.path.join(ROOT, "scripts", "sweep"), "--steps", "--world", "8", "--model", "tiny", "--predict",
            str(cluster), "--tp", "1,2", "--pp", "1,2", "--zero", "0,1", "--dry-run", "--bin",
            os.path.join(ROOT, "build", "bin"), *extra]


def test_a_plan_search_on_a_cluster_ranks_with_why_and_prunes_by_gpu_memory(tmp_path):
    # The step sweep with a cluster description: every plan predicted for the cluster, ranked
    # with its MFU, bubble, exposed time per dimension and memory headroom; recomputation is a
    # dimension of the search; plans over the GPU's HBM are pruned as memory, in GPU bytes.
    c = tmp_path / "c.toml"
    c.write_text(cluster_text(gpus=4))
    p = subprocess.run(sweep_cmd(c, "--recompute", "none,full", "--out", str(tmp_path / "o")),
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr + p.stdout
    assert "| MFU | bubble | exposed per dimension (ms) | memory headroom |" in p.stdout
    assert "-rfull-" in p.stdout and "--recompute full" in p.stdout
    c.write_text(cluster_text(gpus=4, hbm_gib=0.0001))
    p = subprocess.run(sweep_cmd(c, "--out", str(tmp_path / "o2")), capture_output=True, text=True)
    assert "valid plans ranked" not in p.stdout and "memory)" in p.stdout  # every plan pruned: "(N memory)"
    assert "(GPU bytes: mixed precision, flash attention)" in p.stdout


def test_the_chosen_plans_are_written_as_a_sweep_file_that_runs_exactly_them(tmp_path):
    # --write-sweep: the top and spread plans of a ranking, one [[sweep]] table each; the file's
    # own dry run lists the same plans (the same point ids), without a prediction.
    import re
    c = tmp_path / "c.toml"
    c.write_text(cluster_text(gpus=4))
    chosen = tmp_path / "chosen.toml"
    p = subprocess.run(sweep_cmd(c, "--top", "2", "--spread", "1", "--write-sweep", str(chosen), "--out",
                                 str(tmp_path / "o")), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ids = re.findall(r"^\| \d+ \| \d+ \| (\S+) \|", p.stdout, re.M)  # the chosen plans' table, no launch lines
    assert len(ids) == 3 and chosen.read_text().splitlines().count("[[sweep]]") == 3
    assert not re.search(r"^\[\d+/\d+\] ", p.stdout, re.M)
    q = subprocess.run([os.path.join(ROOT, "scripts", "sweep"), str(chosen), "--dry-run", "--bin",
                        os.path.join(ROOT, "build", "bin"), "--out", str(tmp_path / "o2")], capture_output=True, text=True)
    assert q.returncode == 0, q.stderr
    assert re.findall(r"^\[\d+/\d+\] (\S+)", q.stdout, re.M) == ids and "--predict" not in q.stdout
    p = subprocess.run([os.path.join(ROOT, "scripts", "sweep"), "--steps", "--world", "8", "--model", "tiny",
                        "--dry-run", "--bin", os.path.join(ROOT, "build", "bin"), "--write-sweep", str(chosen)],
                       capture_output=True, text=True)  # no --predict: nothing chosen
    assert p.returncode == 2 and "--write-sweep: no chosen plans" in p.stderr


def test_gemm_efficiency_by_size(tmp_path):
    # [efficiency] gemm_by_gflop: a GEMM takes the fraction of the largest threshold at or
    # below its GFLOP. tiny's GEMMs are all under 1 GFLOP: at 0.5 for [0, 1) the compute doubles
    # against the flat gemm = 1.0; a table whose only step starts at 1 GFLOP gives them its
    # smallest fraction. Bad tables are exit 2 naming the key.
    flat, sized = tmp_path / "flat.toml", tmp_path / "sized.toml"
    flat.write_text(cluster_text())
    sized.write_text(cluster_text() + "gemm_by_gflop = [[0, 0.5], [1, 1.0]]\n")
    args = ("--model", "tiny", "--op-list")
    a, b = run(flat, *args)[1], run(sized, *args)[1]
    gemm = sum(o["flops"] for o in a["op_list"] if o["op"] == "matmul")
    ca, cb = a["predicted"]["per_rank"][0]["compute_s"], b["predicted"]["per_rank"][0]["compute_s"]
    assert cb - ca == pytest.approx(gemm / PEAK, rel=1e-4)  # every GEMM at half the peak: twice its time
    sized.write_text(cluster_text() + "gemm_by_gflop = [[1, 0.5]]\n")
    assert run(sized, *args)[1]["predicted"]["per_rank"][0]["compute_s"] == pytest.approx(cb, rel=1e-12)
    for bad in ("[[0, 1.5]]", "[[0]]", "3", '[["a", 0.5]]'):
        sized.write_text(cluster_text() + f"gemm_by_gflop = {bad}\n")
        p, _ = run(sized, "--model", "tiny")
        assert p.returncode == 2 and "[efficiency] gemm_by_gflop must be a list" in p.stderr, p.stderr


def test_a_gemm_is_bound_by_the_larger_of_its_flops_and_its_bytes(tmp_path):
    # The roofline: with HBM at 1 GB/s tiny's GEMMs are memory-bound, each at least its bf16
    # operands and output (2 (mk + kn + mn) bytes per GEMM) over the bandwidth.
    c = tmp_path / "c.toml"
    c.write_text(cluster_text(hbm_tb=1e-3))
    j = run(c, "--model", "tiny", "--op-list")[1]
    gemm_bytes = sum(o["flops"] / (2.0 * o["m"] * o["n"] * o["k"]) * 2.0 * (o["m"] * o["k"] + o["k"] * o["n"] +
                                                                         o["m"] * o["n"])
                     for o in j["op_list"] if o["op"] == "matmul")
    gemm_flops = sum(o["flops"] for o in j["op_list"] if o["op"] == "matmul")
    compute = j["predicted"]["per_rank"][0]["compute_s"]
    assert gemm_bytes / 1e9 > gemm_flops / PEAK and compute >= gemm_bytes / 1e9
