#!/usr/bin/python3
"""A PyTorch reference of bagualu's model, written from the formulas.

Nothing here reads bagualu's results to compute its own: the weights come from a
bagualu checkpoint (model.safetensors + trainer.json's "model_config"), the batch from
parity_dump's dump file, and everything else (attention, RoPE, norms, FFNs, routing,
balance losses, cross-entropy, gradients by autograd, AdamW by torch.optim.AdamW) is
computed here, in float64 so that the reference's own rounding (~1e-16) is negligible
beside bagualu's fp32 rounding (~1e-7) and the comparison measures bagualu alone.

The model (bagualu's src/model/model.c, src/moe/):
  x   = embed_tokens[ids] (+ embed_positions[t] with learned positions)
  per layer:  x += o_proj(attention(norm1(x)))  then  x += ffn(norm2(x))
  norm: LayerNorm (x-mean)/sqrt(var+eps)*w+b, or RMSNorm x/sqrt(mean(x^2)+eps)*w
  attention: causal softmax(q k^T / sqrt(hs)) v per head; RoPE (Hugging Face rotate_half
    convention: dims i and i+hs/2 paired, angle t*theta^(-2i/hs)) on q and k
  dense ffn: down(act(...)): GELU (tanh approximation) of up_proj, or SwiGLU
    silu(gate_proj x) * (up_proj x)
  MoE ffn: router logits = x gate^T, probs = softmax, top-k by logits (ties to the lower
    index), weights = selected probs (renormalized to sum 1 when norm_topk_prob);
    out = sum_j w_j expert_{e_j}(x) + sum_s shared_s(x); experts are w2(act(w1 x)[*w3 x])
  logits = norm_f(x) lm_head^T (lm_head = embed_tokens when tied)
  loss = mean cross-entropy;  per MoE layer aux = E sum_i f_i P_i with f_i = count_i/(N k),
  P_i = mean_t probs[t,i]; z = mean_t logsumexp(logits_t)^2
  objective = loss + sum over MoE layers (aux_coef aux + z_coef z)   (what backward differentiates)
  bagualu reports aux_loss and z_loss as the mean over MoE layers.

Modes (each prints one line per check, "ok ..." or "FAIL ..." with indented details
under it; several modes run in one process when separated by "+"; exit 1 if any fails):
  parity  CASE_DIR...          loss, logits, routing, every gradient (at the initial and
                               at the step-1 parameters), AdamW steps
  mutants CASE_DIR             the same comparison against deliberately wrong references:
                               each must FAIL, showing the tolerance catches real mistakes
  export  HF_DIR CASE_DIR [DTYPE F32_HF_DIR]
                               reads an exported Hugging Face directory by its HF names
                               (Mixtral, DeepSeek-MoE or GPT-2), reproduces bagualu's logits; DTYPE (F32,
                               BF16, F16) is the stored dtype to expect, and a BF16/F16 export
                               is also checked value by value against the F32 export
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

DT = torch.float64
# Relative error of a tensor: max|bagualu - reference| / max|reference|. Per element
# relative error is meaningless where a gradient happens to cancel to ~0; fp32 rounding in
# a sum scales with the size of the terms, which the tensor's largest entry measures. For
# these small models bagualu's fp32 error is ~1e-6 of that scale; 1e-4 leaves a wide
# margin, and `mutants` shows that plausible formula mistakes land far above it.
TOL = 1e-4

# ---- safetensors (format: src/io/safetensors.h) ----------------------------------

_NP_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
              "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "BOOL": "?"}


def read_safetensors(path):
    """name -> torch tensor, plus the metadata dict and name -> stored dtype."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors, dtypes = {}, {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        dt = info["dtype"]
        if dt == "BF16":  # bf16 is the top half of an fp32
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_NP_DTYPES[dt])
        tensors[name] = torch.from_numpy(np.array(arr).reshape(info["shape"]))
        dtypes[name] = dt
    return tensors, meta, dtypes


def load_checkpoint(ckpt_dir):
    with open(os.path.join(ckpt_dir, "trainer.json")) as f:
        trainer = json.load(f)
    return trainer["model_config"], read_sharded(ckpt_dir, "model")


def read_sharded(ckpt_dir, kind):
    """Every tensor of a checkpoint's model or optimizer files (format 2: one file per
    rank, named by its index; format 1: one file). The optimizer's step as "step"."""
    index = os.path.join(ckpt_dir, "model.safetensors.index.json" if kind == "model" else "optimizer.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(ckpt_dir, kind + ".safetensors"))[0]
    with open(index) as f:
        idx = json.load(f)
    files = sorted(set(idx["weight_map"].values())) if kind == "model" else sorted({p["file"] for p in idx["pieces"]})
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(os.path.join(ckpt_dir, name))[0])
    if kind == "optimizer":
        tensors["step"] = torch.tensor(idx["step"])
    return tensors


# ---- building blocks ----------------------------------------------------------------

def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):  # the exact GELU: a plausible mistake (mutant)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def silu(x):
    return x * torch.sigmoid(x)


def rope_tables(T, hs, theta):
    inv_freq = theta ** (-torch.arange(0, hs, 2, dtype=DT) / hs)  # theta^(-2i/hs)
    ang = torch.arange(T, dtype=DT)[:, None] * inv_freq[None, :]  # (T, hs/2)
    ang = torch.cat([ang, ang], dim=-1)                            # (T, hs)
    return torch.cos(ang), torch.sin(ang)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):  # x (B,NH,T,hs)
    return x * cos + rotate_half(x) * sin


def apply_rope_interleaved(x, cos, sin):  # GPT-J pairing (2i, 2i+1): a plausible mistake
    hs = x.shape[-1]
    c, s = cos[:, : hs // 2], sin[:, : hs // 2]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)


def causal_attention(q, k, v):  # (B,NH,T,hs) each
    T, hs = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(hs)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def split_heads(x, NH):  # (B,T,C) -> (B,NH,T,hs)
    B, T, C = x.shape
    return x.view(B, T, NH, C // NH).transpose(1, 2)


def merge_heads(x):
    B, NH, T, hs = x.shape
    return x.transpose(1, 2).reshape(B, T, NH * hs)


# ---- bagualu's model ----------------------------------------------------------------

class Reference:
    """bagualu's model over float64 leaf tensors named as in bagualu's parameter table."""

    def __init__(self, cfg, tensors, mutant=None):
        self.cfg = dict(cfg)
        self.mutant = mutant
        self.p = {n: t.to(DT).clone().requires_grad_(True) for n, t in tensors.items()}

    def layer_is_moe(self, l):
        c = self.cfg
        return c["num_local_experts"] > 0 and (l + 1) % c["moe_layer_freq"] == 0

    def norm(self, x, prefix):
        c = self.cfg
        if c["norm"] == "rmsnorm":
            return rmsnorm(x, self.p[prefix + ".weight"], c["norm_eps"])
        return layernorm(x, self.p[prefix + ".weight"], self.p[prefix + ".bias"], c["norm_eps"])

    def act_ffn(self, x, w_gate, w_up, w_down, b_gate=None, b_up=None, b_down=None):
        """down(act(...)); w_up is None for GELU; biases (mlp_bias) None when absent."""
        lin = lambda x, w, b: x @ w.T if b is None else x @ w.T + b
        if self.cfg["hidden_act"] == "swiglu":
            a = silu(lin(x, w_gate, b_gate)) * lin(x, w_up, b_up)
        else:
            a = (gelu_erf if self.mutant == "gelu_erf" else gelu_tanh)(lin(x, w_gate, b_gate))
        return lin(a, w_down, b_down)

    def proj(self, x, name):
        """x @ W.T (+ b where the model has the bias: attention_bias, mlp_bias)."""
        y = x @ self.p[name + ".weight"].T
        return y + self.p[name + ".bias"] if name + ".bias" in self.p else y

    def expert(self, x, prefix):
        p, swiglu = self.p, self.cfg["hidden_act"] == "swiglu"
        return self.act_ffn(x, p[prefix + ".w1.weight"],
                            p[prefix + ".w3.weight"] if swiglu else None, p[prefix + ".w2.weight"])

    def moe(self, x, l):
        """x (N,C) -> out (N,C), routing facts, aux, z (from the formulas)."""
        c, p = self.cfg, self.p
        pre = f"model.layers.{l}.block_sparse_moe"
        E, k, N = c["num_local_experts"], c["num_experts_per_tok"], x.shape[0]
        logits = x @ p[pre + ".gate.weight"].T                 # (N,E)
        probs = torch.softmax(logits, dim=-1)
        lse = torch.logsumexp(logits, dim=-1)
        # top-k by logits, descending; a stable sort keeps the lower index first on a tie
        sorted_vals, order = torch.sort(logits.detach(), dim=-1, descending=True, stable=True)
        idx = order[:, :k]                                      # (N,k)
        margin = (sorted_vals[:, k - 1] - sorted_vals[:, k]).min().item() if k < E else math.inf
        w = probs.gather(1, idx)
        if c["norm_topk_prob"] and self.mutant != "no_renorm":
            w = w / w.sum(-1, keepdim=True)
        counts = torch.bincount(idx.flatten(), minlength=E)
        f = counts.to(DT) / (N * k)
        P = probs.mean(0)
        aux = E * (f * P).sum()
        z = (lse ** 2).mean()
        out = torch.zeros_like(x)
        for s in range(c["num_shared_experts"]):
            out = out + self.expert(x, f"{pre}.shared_experts.{s}")
        for e in range(E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = self.expert(x[tok], f"{pre}.experts.{e}") * w[tok, slot][:, None]
            out = out.index_add(0, tok, y)
        return out, idx, counts, margin, aux, z

    def forward(self, inputs, targets):
        c, p = self.cfg, self.p
        B, T = inputs.shape
        C, NH, L, V = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"], c["vocab_size"]
        hs, KVH = C // NH, c.get("num_key_value_heads", NH)
        x = p["model.embed_tokens.weight"][inputs]
        if c["position_embedding"] == "learned":
            x = x + p["model.embed_positions.weight"][:T]
        else:
            cos, sin = rope_tables(T, hs, c["rope_theta"])
            rope = apply_rope_interleaved if self.mutant == "rope_interleaved" else apply_rope
        routing, auxes, zs = {}, [], []
        objective_router = 0.0
        for l in range(L):
            pre = f"model.layers.{l}"
            h = self.norm(x, pre + ".input_layernorm")
            q = split_heads(self.proj(h, pre + ".self_attn.q_proj"), NH)
            k = split_heads(self.proj(h, pre + ".self_attn.k_proj"), KVH)
            v = split_heads(self.proj(h, pre + ".self_attn.v_proj"), KVH)
            # grouped-query attention, as transformers' repeat_kv: query head h reads
            # key/value head h // (NH / KVH)
            k, v = k.repeat_interleave(NH // KVH, 1), v.repeat_interleave(NH // KVH, 1)
            if c["position_embedding"] == "rope":
                q, k = rope(q, cos, sin), rope(k, cos, sin)
            x = x + self.proj(merge_heads(causal_attention(q, k, v)), pre + ".self_attn.o_proj")
            h = self.norm(x, pre + ".post_attention_layernorm")
            if self.layer_is_moe(l):
                out, idx, counts, margin, aux, z = self.moe(h.reshape(B * T, C), l)
                out = out.view(B, T, C)
                routing[l] = (idx, counts, margin, aux.item(), z.item())
                auxes.append(aux)
                zs.append(z)
                aux_term = 0.0 if self.mutant == "no_aux_grad" else c["router_aux_loss_coef"] * aux
                z_term = 0.0 if self.mutant == "no_z_grad" else c["router_z_loss_coef"] * z
                objective_router = objective_router + aux_term + z_term
            elif c["hidden_act"] == "swiglu":
                out = self.act_ffn(h, p[pre + ".mlp.gate_proj.weight"], p[pre + ".mlp.up_proj.weight"],
                                   p[pre + ".mlp.down_proj.weight"], p.get(pre + ".mlp.gate_proj.bias"),
                                   p.get(pre + ".mlp.up_proj.bias"), p.get(pre + ".mlp.down_proj.bias"))
            else:
                out = self.act_ffn(h, p[pre + ".mlp.up_proj.weight"], None, p[pre + ".mlp.down_proj.weight"],
                                   p.get(pre + ".mlp.up_proj.bias"), None, p.get(pre + ".mlp.down_proj.bias"))
            x = x + out
        h = self.norm(x, "model.norm")
        head = p["model.embed_tokens.weight"] if c["tie_word_embeddings"] else p["lm_head.weight"]
        logits = h @ head.T
        loss = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.reshape(-1))
        objective = loss + objective_router
        n = len(auxes)
        return {
            "logits": logits, "loss": loss, "objective": objective, "routing": routing,
            "aux_loss": (sum(a.item() for a in auxes) / n) if n else 0.0,
            "z_loss": (sum(a.item() for a in zs) / n) if n else 0.0,
        }


# ---- comparisons --------------------------------------------------------------------

def as_f64(x):  # a Python float would become a float32 tensor under torch.as_tensor
    return x.to(DT) if torch.is_tensor(x) else torch.tensor(x, dtype=DT)


def rel_err(got, want):
    got, want = as_f64(got), as_f64(want)
    num = (got - want).abs().max().item() if want.numel() else 0.0
    den = want.abs().max().item() if want.numel() else 0.0
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


class Checker:
    def __init__(self, case, verbose=True):
        self.case, self.verbose = case, verbose
        self.passed = self.failed = 0
        self.worst = {}  # kind -> (err, what)

    def close(self, kind, what, got, want, tol=TOL):
        err = rel_err(got, want)
        ok = err <= tol
        if kind not in self.worst or err > self.worst[kind][0]:
            self.worst[kind] = (err, what)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            if self.verbose:
                print(f"  - {self.case}: {what}: relative error {err:.3e} > {tol:g}")
        return ok

    def true(self, what, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            if self.verbose:
                print(f"  - {self.case}: {what} {detail}")
        return cond

    def summary(self):
        parts = [f"{k} {e:.2e}" for k, (e, _) in self.worst.items()]
        return f"{self.case}: max relative error: " + ", ".join(parts)


def decays(name, t):
    """AdamW weight decay applies to matrices, not to norms or embeddings."""
    return t.dim() == 2 and not name.startswith("model.embed_")


def adamw_reference(params, grads_list, lrs, scales, meta):
    """torch.optim.AdamW over float64 copies of `params`, fed the given gradients."""
    beta1, beta2, eps, wd = (float(meta[k]) for k in ("beta1", "beta2", "eps", "weight_decay"))
    leaves = {n: t.to(DT).clone().requires_grad_(True) for n, t in params.items()}
    groups = [
        {"params": [leaves[n] for n in leaves if decays(n, leaves[n])], "weight_decay": wd},
        {"params": [leaves[n] for n in leaves if not decays(n, leaves[n])], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=lrs[0], betas=(beta1, beta2), eps=eps)
    after = []
    for grads, lr, scale in zip(grads_list, lrs, scales):
        for g in opt.param_groups:
            g["lr"] = lr
        for n, t in leaves.items():
            t.grad = grads[n].to(DT) * scale
        opt.step()
        after.append({n: t.detach().clone() for n, t in leaves.items()})
    state = {n: opt.state[t] for n, t in leaves.items()}
    return after, state


def check_case(case_dir, mutant=None, verbose=True):
    case = os.path.basename(os.path.normpath(case_dir)) + (f" [{mutant}]" if mutant else "")
    ck = Checker(case, verbose)
    cfg, params0 = load_checkpoint(os.path.join(case_dir, "ckpt", "step_00000000"))
    dump, meta, _ = read_safetensors(os.path.join(case_dir, "dump.safetensors"))
    inputs, targets = dump["inputs"].long(), dump["targets"].long()

    ref = Reference(cfg, params0, mutant)
    r = ref.forward(inputs, targets)
    r["objective"].backward()

    for key in ("loss", "objective", "aux_loss", "z_loss"):
        want = r[key].item() if torch.is_tensor(r[key]) else r[key]
        ck.close(key, key, dump[key].item(), want)
    ck.close("logits", "logits", dump["logits"], r["logits"].detach())
    for l, (idx, counts, margin, aux, z) in r["routing"].items():
        got = dump[f"layers.{l}.topk_idx"].long()
        same = torch.equal(got, idx)
        detail = ""
        if not same:
            bad = (got != idx).any(-1).nonzero().flatten()
            detail = (f"differs at {bad.numel()} tokens (first {bad[0].item()}); the smallest top-k "
                      f"logit margin is {margin:.3e}, a flip there is rounding, not a bug")
        ck.true(f"layer {l} routing", same, detail)
        ck.true(f"layer {l} counts", torch.equal(dump[f"layers.{l}.counts"].long(), counts))
        ck.close("layer aux/z", f"layer {l} aux_loss", dump[f"layers.{l}.aux_loss"].item(), aux)
        ck.close("layer aux/z", f"layer {l} z_loss", dump[f"layers.{l}.z_loss"].item(), z)
    # Without RoPE the key bias adds q.b_k to every score of a query's row, which softmax
    # ignores: its gradient is zero but for rounding on both sides, so it is checked as
    # that (tiny against the query bias's), and AdamW's update, which turns noise into
    # +-lr, is not compared for it.
    def zero_grad_exact(name):
        return cfg["position_embedding"] != "rope" and name.endswith("self_attn.k_proj.bias")
    def check_zero(kind, name, got, ref_grad):
        scale = ref_grad(name.replace("k_proj.bias", "q_proj.bias")).abs().max().item()
        ck.true(f"{kind} {name} (zero in exact arithmetic)",
                as_f64(got).abs().max().item() <= 1e-4 * scale, f"max {as_f64(got).abs().max().item():.3e} vs q bias {scale:.3e}")
    for name, t in ref.p.items():
        if zero_grad_exact(name):
            check_zero("grad", name, dump["grad." + name], lambda n: ref.p[n].grad)
            continue
        ck.close("grads", f"grad {name}", dump["grad." + name], t.grad if t.grad is not None else torch.zeros_like(t))
    if set(ref.p) != {n[5:] for n in dump if n.startswith("grad.")}:
        ck.true("parameter names", False, "checkpoint and dump disagree")
    # Gradients again at bagualu's step-1 parameters, where every weight has moved by ~lr
    # from its initial value (norm weights and biases included).
    ref1 = Reference(cfg, {n: dump["step1." + n] for n in params0}, mutant)
    ref1.forward(inputs, targets)["objective"].backward()
    for name, t in ref1.p.items():
        if zero_grad_exact(name):
            check_zero("grad at step 1", name, dump["grad2." + name], lambda n: ref1.p[n].grad)
            continue
        ck.close("grads at step 1", f"grad at step 1 {name}", dump["grad2." + name],
                 t.grad if t.grad is not None else torch.zeros_like(t))

    # AdamW, fed bagualu's own gradients: this checks the optimizer alone. (Fed the
    # reference's gradients, step 1's update lr*g/(|g|+eps) would turn a 1e-7 difference in
    # a near-zero gradient into a different sign, whatever the optimizer.)
    lr1, lr2 = (float(v) for v in meta["lr"].split())
    g1 = {n: dump["grad." + n] for n in params0}
    g2 = {n: dump["grad2." + n] for n in params0}
    after, state = adamw_reference(params0, [g1, g2], [lr1, lr2], [1.0, float(meta["grad_scale2"])], meta)
    ck2_dir = os.path.join(case_dir, "ckpt", "step_00000002")
    _, params2 = load_checkpoint(ck2_dir)
    opt2 = read_sharded(ck2_dir, "optimizer")
    ck.true("optimizer step", int(opt2["step"].item()) == 2)
    for n in params0:
        p0 = params0[n].to(DT)
        ck.close("adamw params", f"AdamW step 1 {n}", dump["step1." + n], after[0][n])
        # the update itself, which is ~lr while the parameter is ~0.1: compared on its own
        if not zero_grad_exact(n):
            ck.close("adamw updates", f"AdamW step 1 update {n}", dump["step1." + n].to(DT) - p0, after[0][n] - p0)
        ck.close("adamw params", f"AdamW step 2 {n}", params2[n], after[1][n])
        if not zero_grad_exact(n):
            ck.close("adamw updates", f"AdamW step 2 update {n}",
                     params2[n].to(DT) - dump["step1." + n].to(DT), after[1][n] - after[0][n])
        ck.close("adamw state", f"AdamW exp_avg {n}", opt2[n + ".exp_avg"], state[n]["exp_avg"])
        ck.close("adamw state", f"AdamW exp_avg_sq {n}", opt2[n + ".exp_avg_sq"], state[n]["exp_avg_sq"])
    return ck


# ---- Hugging Face layouts -----------------------------------------------------------

def expect_names(ck, tensors, names):
    got, want = set(tensors), set(names)
    ck.true("tensor names", got == want,
            f"missing {sorted(want - got)[:4]}, unexpected {sorted(got - want)[:4]}")


def mixtral_forward(cfg, t, ids, ck):
    """MixtralForCausalLM's forward, from its HF config keys and tensor names."""
    C, NH, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    KVH, E, k = cfg["num_key_value_heads"], cfg["num_local_experts"], cfg["num_experts_per_tok"]
    hd = cfg.get("head_dim") or C // NH
    eps, tied = cfg["rms_norm_eps"], cfg.get("tie_word_embeddings", False)
    names = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if tied else ["lm_head.weight"])
    for l in range(L):
        pre = f"model.layers.{l}"
        names += [f"{pre}.input_layernorm.weight", f"{pre}.post_attention_layernorm.weight",
                  f"{pre}.block_sparse_moe.gate.weight"]
        names += [f"{pre}.self_attn.{n}_proj.weight" for n in "qkvo"]
        names += [f"{pre}.block_sparse_moe.experts.{e}.{w}.weight" for e in range(E) for w in ("w1", "w2", "w3")]
    expect_names(ck, t, names)
    t = {n: v.to(DT) for n, v in t.items()}
    B, T = ids.shape
    cos, sin = rope_tables(T, hd, cfg["rope_theta"])
    h = t["model.embed_tokens.weight"][ids]
    for l in range(L):
        pre = f"model.layers.{l}"
        h = hf_attention_block(t, pre, h, cos, sin, NH, KVH, eps)
        r = h
        x = rmsnorm(h, t[pre + ".post_attention_layernorm.weight"], eps).reshape(B * T, C)
        moe = pre + ".block_sparse_moe"
        routing = torch.softmax(x @ t[moe + ".gate.weight"].T, dim=-1)
        w, idx = torch.topk(routing, k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            xe = x[tok]
            ex = f"{moe}.experts.{e}"
            y = (silu(xe @ t[ex + ".w1.weight"].T) * (xe @ t[ex + ".w3.weight"].T)) @ t[ex + ".w2.weight"].T
            out = out.index_add(0, tok, y * w[tok, slot][:, None])
        h = r + out.view(B, T, C)
    h = rmsnorm(h, t["model.norm.weight"], eps)
    head = t["model.embed_tokens.weight"] if tied else t["lm_head.weight"]
    return h @ head.T


def hf_attention_block(t, pre, h, cos, sin, NH, KVH, eps):
    """Llama-style attention block of Hugging Face's Mixtral and DeepSeek layouts: RMSNorm,
    q/k/v (KVH key/value heads, repeated for grouped queries), RoPE, causal attention,
    o_proj, residual."""
    B, T, C = h.shape
    hd = C // NH
    x = rmsnorm(h, t[pre + ".input_layernorm.weight"], eps)
    q = (x @ t[pre + ".self_attn.q_proj.weight"].T).view(B, T, NH, hd).transpose(1, 2)
    kk = (x @ t[pre + ".self_attn.k_proj.weight"].T).view(B, T, KVH, hd).transpose(1, 2)
    v = (x @ t[pre + ".self_attn.v_proj.weight"].T).view(B, T, KVH, hd).transpose(1, 2)
    kk, v = kk.repeat_interleave(NH // KVH, 1), v.repeat_interleave(NH // KVH, 1)
    q, kk = apply_rope(q, cos, sin), apply_rope(kk, cos, sin)
    return h + merge_heads(causal_attention(q, kk, v)) @ t[pre + ".self_attn.o_proj.weight"].T


def deepseek_forward(cfg, t, ids, ck):
    """DeepSeek-MoE v1's DeepseekForCausalLM forward (modeling_deepseek.py), from its HF
    config keys and tensor names: MoEGate's softmax top-k, renormalized only when
    top_k > 1 and norm_topk_prob; the shared experts one MLP of n_shared_experts times
    moe_intermediate_size; layer l MoE iff l >= first_k_dense_replace and
    l % moe_layer_freq == 0, else a dense MLP of intermediate_size."""
    C, NH, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    KVH, E, k = cfg["num_key_value_heads"], cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    S, hd = cfg.get("n_shared_experts"), C // NH
    eps, tied = cfg["rms_norm_eps"], cfg.get("tie_word_embeddings", False)
    ck.true("scoring_func", cfg.get("scoring_func", "softmax") == "softmax")
    is_moe = [l >= cfg.get("first_k_dense_replace", 0) and l % cfg.get("moe_layer_freq", 1) == 0 for l in range(L)]
    names = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if tied else ["lm_head.weight"])
    for l in range(L):
        pre = f"model.layers.{l}"
        names += [f"{pre}.input_layernorm.weight", f"{pre}.post_attention_layernorm.weight"]
        names += [f"{pre}.self_attn.{n}_proj.weight" for n in "qkvo"]
        if not is_moe[l]:
            names += [f"{pre}.mlp.{w}_proj.weight" for w in ("gate", "up", "down")]
            continue
        names += [f"{pre}.mlp.gate.weight"]
        names += [f"{pre}.mlp.experts.{e}.{w}_proj.weight" for e in range(E) for w in ("gate", "up", "down")]
        if S is not None:
            names += [f"{pre}.mlp.shared_experts.{w}_proj.weight" for w in ("gate", "up", "down")]
    expect_names(ck, t, names)
    t = {n: v.to(DT) for n, v in t.items()}

    def mlp(x, pre):
        return (silu(x @ t[pre + ".gate_proj.weight"].T) * (x @ t[pre + ".up_proj.weight"].T)) @ t[pre + ".down_proj.weight"].T

    B, T = ids.shape
    cos, sin = rope_tables(T, hd, cfg["rope_theta"])
    h = t["model.embed_tokens.weight"][ids]
    for l in range(L):
        pre = f"model.layers.{l}"
        h = hf_attention_block(t, pre, h, cos, sin, NH, KVH, eps)
        r = h
        x = rmsnorm(h, t[pre + ".post_attention_layernorm.weight"], eps).reshape(B * T, C)
        if not is_moe[l]:
            h = r + mlp(x, pre + ".mlp").view(B, T, C)
            continue
        scores = torch.softmax(x @ t[pre + ".mlp.gate.weight"].T, dim=-1)
        w, idx = torch.topk(scores, k, dim=-1, sorted=False)
        if k > 1 and cfg.get("norm_topk_prob", False):
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        out = torch.zeros_like(x)
        for e in range(E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() > 0:
                out = out.index_add(0, tok, mlp(x[tok], f"{pre}.mlp.experts.{e}") * w[tok, slot][:, None])
        if S is not None:
            out = out + mlp(x, pre + ".mlp.shared_experts")
        h = r + out.view(B, T, C)
    h = rmsnorm(h, t["model.norm.weight"], eps)
    head = t["model.embed_tokens.weight"] if tied else t["lm_head.weight"]
    return h @ head.T


def gpt2_forward(cfg, t, ids, ck):
    """GPT2LMHeadModel's forward (Conv1D weights are (in, out)), from HF names."""
    C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    eps, tied = cfg["layer_norm_epsilon"], cfg.get("tie_word_embeddings", True)
    ck.true("activation_function", cfg["activation_function"] == "gelu_new")
    names = ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
             "transformer.ln_f.bias"] + ([] if tied else ["lm_head.weight"])
    for l in range(L):
        pre = f"transformer.h.{l}"
        names += [f"{pre}.{m}.{w}" for m in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                             "mlp.c_proj") for w in ("weight", "bias")]
    expect_names(ck, t, names)
    t = {n: v.to(DT) for n, v in t.items()}
    B, T = ids.shape
    h = t["transformer.wte.weight"][ids] + t["transformer.wpe.weight"][torch.arange(T)]
    for l in range(L):
        pre = f"transformer.h.{l}"
        a = layernorm(h, t[pre + ".ln_1.weight"], t[pre + ".ln_1.bias"], eps)
        qkv = a @ t[pre + ".attn.c_attn.weight"] + t[pre + ".attn.c_attn.bias"]
        q, k, v = (split_heads(z, NH) for z in qkv.split(C, dim=2))
        y = merge_heads(causal_attention(q, k, v))
        h = h + y @ t[pre + ".attn.c_proj.weight"] + t[pre + ".attn.c_proj.bias"]
        m = layernorm(h, t[pre + ".ln_2.weight"], t[pre + ".ln_2.bias"], eps)
        m = gelu_tanh(m @ t[pre + ".mlp.c_fc.weight"] + t[pre + ".mlp.c_fc.bias"])
        h = h + m @ t[pre + ".mlp.c_proj.weight"] + t[pre + ".mlp.c_proj.bias"]
    h = layernorm(h, t["transformer.ln_f.weight"], t["transformer.ln_f.bias"], eps)
    head = t["transformer.wte.weight"] if tied else t["lm_head.weight"]
    return h @ head.T


# Logits tolerance by stored dtype: f32 is bagualu's own precision (TOL); bf16 and f16
# round every weight by up to 2^-8 and 2^-11 relative (half an ulp), which moves the
# logits by about that much (measured: 4e-3 and 5e-4); the bounds leave a margin of ~8.
EXPORT_TOL = {"F32": TOL, "BF16": 3e-2, "F16": 4e-3}


def check_export(hf_dir, case_dir, want_dtype, f32_dir=None):
    case = f"export {os.path.basename(os.path.normpath(case_dir))} -> {os.path.basename(os.path.normpath(hf_dir))}"
    ck = Checker(case)
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    t, meta, dtypes = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    dump, _, _ = read_safetensors(os.path.join(case_dir, "dump.safetensors"))
    ck.true("metadata format pt", meta.get("format") == "pt")
    ck.true("stored dtype", set(dtypes.values()) == {want_dtype}, f"{set(dtypes.values())} != {want_dtype}")
    torch_dtype = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[want_dtype]
    ck.true("config torch_dtype", cfg.get("torch_dtype") == torch_dtype)
    ids = dump["inputs"].long()
    if cfg["model_type"] == "mixtral":
        ck.true("architectures", cfg["architectures"] == ["MixtralForCausalLM"])
        logits = mixtral_forward(cfg, t, ids, ck)
    elif cfg["model_type"] == "deepseek":
        ck.true("architectures", cfg["architectures"] == ["DeepseekForCausalLM"])
        logits = deepseek_forward(cfg, t, ids, ck)
    elif cfg["model_type"] == "gpt2":
        ck.true("architectures", cfg["architectures"] == ["GPT2LMHeadModel"])
        logits = gpt2_forward(cfg, t, ids, ck)
    else:
        ck.true("model_type", False, cfg["model_type"])
        return ck
    if ck.failed == 0:
        ck.close("logits", "logits", dump["logits"], logits, EXPORT_TOL[want_dtype])
    if want_dtype != "F32":
        # The conversion itself: every stored value is fp32 rounded to nearest even, which
        # torch's own conversion does; compared bit for bit against an f32 export.
        f32, _, _ = read_safetensors(os.path.join(f32_dir, "model.safetensors"))
        tdt = {"BF16": torch.bfloat16, "F16": torch.float16}[want_dtype]
        exact = all(torch.equal(f32[n].to(tdt).to(torch.float32), t[n].to(torch.float32)) for n in f32)
        ck.true("round to nearest even", exact and set(f32) == set(t))
    return ck


# ---- main ---------------------------------------------------------------------------

MUTANTS = ["gelu_erf", "rope_interleaved", "no_renorm", "no_aux_grad", "no_z_grad"]


def applies(mutant, cfg):
    moe = cfg["num_local_experts"] > 0
    return {"gelu_erf": cfg["hidden_act"] == "gelu", "rope_interleaved": cfg["position_embedding"] == "rope",
            "no_renorm": moe and cfg["norm_topk_prob"] and cfg["num_experts_per_tok"] > 1,
            "no_aux_grad": moe and cfg["router_aux_loss_coef"] > 0,
            "no_z_grad": moe and cfg["router_z_loss_coef"] > 0}[mutant]


def run(argv):
    """One mode; returns the number of failed checks."""
    failed = 0
    if argv[0] == "parity":
        for case_dir in argv[1:]:
            ck = check_case(case_dir)
            print(("ok   " if ck.failed == 0 else "FAIL ") + ck.summary() + f" ({ck.passed} checks passed, {ck.failed} failed)")
            failed += ck.failed > 0
    elif argv[0] == "mutants":
        for case_dir in argv[1:]:
            cfg, _ = load_checkpoint(os.path.join(case_dir, "ckpt", "step_00000000"))
            for mutant in MUTANTS:
                if not applies(mutant, cfg):
                    continue
                ck = check_case(case_dir, mutant, verbose=False)
                worst = max(ck.worst.values())
                caught = ck.failed > 0
                print(("ok   " if caught else "FAIL ") + f"mutant {mutant} on {os.path.basename(case_dir)}: "
                      f"{'caught' if caught else 'NOT caught'}, largest relative error {worst[0]:.2e} ({worst[1]})")
                failed += not caught
    else:
        hf_dir, case_dir = argv[1], argv[2]
        dtype, f32_dir = (argv[3], argv[4]) if len(argv) > 4 else ("F32", None)
        ck = check_export(hf_dir, case_dir, dtype, f32_dir)
        print(("ok   " if ck.failed == 0 else "FAIL ") + ck.summary() + f" ({ck.passed} checks passed, {ck.failed} failed)")
        failed += ck.failed > 0
    return failed


def main(argv):
    """MODE ARGS [+ MODE ARGS ...]: several modes in one process (importing torch is
    the slowest part of a run)."""
    torch.set_num_threads(2)
    groups, cur = [], []
    for a in argv:
        if a == "+":
            groups.append(cur)
            cur = []
        else:
            cur.append(a)
    groups.append(cur)
    if any(len(g) < 2 or g[0] not in ("parity", "mutants", "export") for g in groups):
        print(__doc__)
        return 2
    failed = 0
    for g in groups:
        try:
            failed += run(g)
        except Exception as e:  # a missing file or a malformed export: one failed check
            print(f"FAIL {' '.join(g)}: {type(e).__name__}: {e}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
