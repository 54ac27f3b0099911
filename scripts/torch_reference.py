#!/usr/bin/python3
"""PyTorch oracle for the step engine (issue 4).

Reads one step that `step_bench --export DIR` wrote (config.json with the layout table, and
raw float32/int32 arrays), builds the same GPT in PyTorch from the same weights, runs one
forward/backward and one torch.optim.AdamW step on the same tokens, and compares the loss,
the logits, every parameter gradient and the updated weights by normalised error
||engine - torch|| / ||torch|| (per tensor). Exit 0 when all are within --tol (1e-5), 1
otherwise, 2 for a bad directory. Run it with Debian's /usr/bin/python3 (python3-torch).

This is deliberately written from torch primitives (F.linear, F.layer_norm, softmax,
F.cross_entropy, AdamW), not from the engine's formulas, so it is an independent check.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

torch = F = None  # PyTorch, loaded by main() once the flags are parsed: --help answers without it


def load_torch():
    global torch, F
    import torch as torch_module
    import torch.nn.functional as functional
    torch, F = torch_module, functional


def load(d):
    try:
        cfg = json.load(open(os.path.join(d, "config.json")))
    except OSError as e:
        print(f"torch_reference: {e}", file=sys.stderr)
        sys.exit(2)
    arr = lambda name, dt: np.fromfile(os.path.join(d, name), dtype=dt)
    return cfg, {
        "tokens": arr("tokens.i32", np.int32),
        "targets": arr("targets.i32", np.int32),
        "params_before": arr("params_before.f32", np.float32),
        "logits": arr("logits.f32", np.float32),
        "grads": arr("grads.f32", np.float32),
        "params_after": arr("params_after.f32", np.float32),
    }


def view(flat, e):
    o, n = e["offset"], e["numel"]
    return torch.from_numpy(flat[o:o + n].reshape(e["shape"]).copy())


def gpt_forward(p, c, tokens, targets):
    B, T, C = c["micro_batch"], c["seq"], c["hidden"]
    NH, KVH, V = c["heads"], c["kv_heads"], c["vocab"]
    hs = C // NH
    x = p["wte"][tokens] + p["wpe"][:T].unsqueeze(0)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    aux_total = torch.zeros(())
    for l in range(c["layers"]):
        g = lambda n: p[f"h.{l}.{n}"]
        h = F.layer_norm(x, (C,), g("ln1.weight"), g("ln1.bias"), eps=1e-5)
        qkv = F.linear(h, g("attn.qkv.weight"), g("attn.qkv.bias"))
        q = qkv[..., : NH * hs].reshape(B, T, NH, hs).transpose(1, 2)
        k = qkv[..., NH * hs:(NH + KVH) * hs].reshape(B, T, KVH, hs).transpose(1, 2)
        v = qkv[..., (NH + KVH) * hs:].reshape(B, T, KVH, hs).transpose(1, 2)
        k = k.repeat_interleave(NH // KVH, dim=1)  # query head h reads kv head h // group
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, g("attn.proj.weight"), g("attn.proj.bias"))
        h = F.layer_norm(x, (C,), g("ln2.weight"), g("ln2.bias"), eps=1e-5)
        if c.get("experts", 0) > 0 and l % c["moe_every"] == 0:
            y, aux = moe_mlp(h.reshape(B * T, C), g, c)
            x = x + y.reshape(B, T, C)
            aux_total = aux_total + aux
            continue
        h = F.gelu(F.linear(h, g("mlp.fc.weight"), g("mlp.fc.bias")), approximate="tanh")
        x = x + F.linear(h, g("mlp.proj.weight"), g("mlp.proj.bias"))
    x = F.layer_norm(x, (C,), p["lnf.weight"], p["lnf.bias"], eps=1e-5)
    head = p["wte"] if c["tied"] else p["lm_head.weight"]
    logits = F.linear(x, head, p["lm_head.bias"])
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)) + aux_total
    return logits, loss


def moe_mlp(x, g, c):
    """Mixture of experts on rows x (N, C) (issue 13): softmax router, torch.topk, gates
    renormalised over the k, each expert keeps its first ceil(F N k / E) assignments in token
    order (F = 0: all), out = sum of gate * expert(x) over kept assignments. Returns out and
    the Switch aux loss coef * E * sum_e f_e P_e (f from the routed counts before drops)."""
    N, E, k = x.shape[0], c["experts"], c["top_k"]
    probs = F.linear(x, g("moe.router.weight")).softmax(dim=-1)
    top, idx = torch.topk(probs, k, dim=-1)
    gates = top / top.sum(dim=-1, keepdim=True)
    cf = c["capacity_factor"]
    cap = math.ceil(cf * N * k / E) if cf > 0 else N * k
    seen, keep = [0] * E, []
    for e in idx.reshape(-1).tolist():  # n-major, as the engine's token order
        keep.append(seen[e] < cap)
        seen[e] += 1
    keep = torch.tensor(keep).reshape(N, k)
    out = torch.zeros_like(x)
    for e in range(E):
        chosen = (idx == e) & keep
        rows = chosen.any(dim=-1).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        w = (gates * chosen).sum(dim=-1)[rows].unsqueeze(1)
        p = f"moe.expert.{e}."
        h = F.gelu(F.linear(x[rows], g(p + "fc.weight"), g(p + "fc.bias")), approximate="tanh")
        out = out.index_add(0, rows, w * F.linear(h, g(p + "proj.weight"), g(p + "proj.bias")))
    counts = torch.bincount(idx.reshape(-1), minlength=E).to(x.dtype)
    aux = c["aux_loss_coef"] * E * ((counts / (N * k)) * probs.mean(dim=0)).sum()
    return out, aux


def rel(a, b):
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    den = torch.linalg.norm(b).item()
    num = torch.linalg.norm(a - b).item()
    return num / den if den > 0 else num


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="directory written by step_bench --export")
    ap.add_argument("--tol", type=float, default=1e-5, help="normalised error bound (float32)")
    ap.add_argument("--verbose", action="store_true", help="print every tensor")
    a = ap.parse_args()
    load_torch()  # seconds: after the flags, so that --help and a bad flag answer at once
    torch.set_num_threads(1)
    cfg, d = load(a.dir)
    c, adam, layout = cfg["config"], cfg["adamw"], cfg["layout"]
    B, T, V = c["micro_batch"], c["seq"], c["vocab"]
    tokens = torch.from_numpy(d["tokens"].astype(np.int64)).reshape(B, T)
    targets = torch.from_numpy(d["targets"].astype(np.int64)).reshape(B, T)
    params = {e["name"]: view(d["params_before"], e).requires_grad_(True) for e in layout}

    logits, loss = gpt_forward(params, c, tokens, targets)
    loss.backward()
    rows = [("loss", rel([cfg["loss"]], [loss.item()])),
            ("logits", rel(d["logits"], logits.detach().reshape(-1)))]
    for e in layout:
        rows.append((f"grad {e['name']}", rel(view(d["grads"], e), params[e["name"]].grad)))

    # AdamW twice. (a) From the engine's own gradients: checks the update rule alone, every
    # element. (b) From torch's gradients: the whole step end to end, except elements whose
    # gradient is so small against eps (1e-8) that Adam's g / (|g| + eps) amplifies the float32
    # difference of the two gradients past 1e-6 of lr. The key bias is the typical case: its
    # exact gradient is 0 (softmax ignores a per-row constant), both sides hold ~1e-11 of
    # rounding noise, and Adam turns noise into updates. Their gradients are compared, per
    # tensor, above; the count left out of (b) is printed.
    def adamw(tensors, grads):
        ps = {n: t.detach().clone().requires_grad_(True) for n, t in tensors.items()}
        for n, g in grads.items():
            ps[n].grad = g.clone()
        decay = [ps[e["name"]] for e in layout if e["weight_decay"]]
        no_decay = [ps[e["name"]] for e in layout if not e["weight_decay"]]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": adam["weight_decay"]},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=adam["lr"], betas=(adam["beta1"], adam["beta2"]), eps=adam["eps"])
        opt.step()
        return {n: t.detach() for n, t in ps.items()}

    before = {e["name"]: view(d["params_before"], e) for e in layout}
    upd_a = adamw(before, {e["name"]: view(d["grads"], e) for e in layout})
    upd_b = adamw(before, {e["name"]: params[e["name"]].grad for e in layout})
    masked = 0
    for e in layout:
        n = e["name"]
        mine = view(d["params_after"], e)
        rows.append((f"update(engine grads) {n}", rel(mine, upd_a[n])))
        g, ge = params[n].grad, view(d["grads"], e)
        # first-step Adam moves by lr * g / (|g| + eps): a gradient difference dg changes it
        # by lr * eps * dg / (|g| (|g| + eps)) relative to lr; keep elements where that is tiny
        amp = adam["eps"] * (ge - g).abs() / (g.abs() * (g.abs() + adam["eps"]))
        keep = (amp <= 1e-6) | ((g == 0) & (ge == 0))
        masked += int((~keep).sum().item())
        rows.append((f"update(torch grads) {n}", rel(mine[keep], upd_b[n][keep]) if keep.any() else 0.0))
    print(f"  update(torch grads): {masked} elements with |grad| ~ eps (Adam-amplified rounding) not compared")

    bad = [(n, r) for n, r in rows if not (r <= a.tol)]
    worst = max(rows, key=lambda nr: nr[1] if math.isfinite(nr[1]) else float("inf"))
    for n, r in rows:
        if a.verbose or n in ("loss", "logits") or (n, r) in bad:
            print(f"  {n:<40} rel {r:.3e} {'ok' if r <= a.tol else 'FAIL'}")
    print(f"torch_reference: {len(rows)} tensors, worst {worst[0]} rel {worst[1]:.3e}, tol {a.tol:g}: "
          f"{'PASS' if not bad else f'FAIL ({len(bad)} above tolerance)'}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
