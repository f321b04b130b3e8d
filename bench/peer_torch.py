#!/usr/bin/python3
"""The peer of bench_step: bagualu's benchmark models in idiomatic, efficient PyTorch.

Same shapes, initialization (normal(0, initializer_range); residual-stream projections
o_proj and w2 scaled by 1/sqrt(2L) as bagualu does), loss terms, optimizer and batch as bench_step, written
the way a PyTorch user would write them:
  - attention: fused qkv Linear, q @ k^T with a causal mask, softmax, @ v (PyTorch 1.13 has
    no scaled_dot_product_attention); RoPE in the Hugging Face rotate_half convention
  - MoE: router Linear in fp32 (autocast off), softmax, topk (renormalized), tokens grouped
    by expert with a stable sort + index_select, one nn.Module FFN per expert over its
    contiguous rows, gate weights applied, index_add_ to combine; Switch aux loss
    E·Σ f_i·P_i and z-loss mean(logsumexp²) with the config's coefficients
  - step: zero_grad(set_to_none) → forward (optionally under torch.autocast('cpu', bf16))
    → backward → clip_grad_norm_(1.0) → torch.optim.AdamW (foreach, fused if the
    installed torch has it) with lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1
    on matrices (not on norms or embeddings, as bagualu)

It prints human-readable lines and one machine-readable line starting with PEER_JSON.
FLOPs use bagualu's formula (src/model/params.c model_active_matmul_params and
src/model/model.c model_flops_per_token): 6·active matmul params·tokens + 12·L·C·T·tokens.

  /usr/bin/python3 bench/peer_torch.py --model m1|m2|m3|gpt2 --dtype fp32|bf16 [--threads N]
      [--steps N] [--warmup N] [--max-seconds S] [--config path.json] [--batch B] [--seq T] [--profile N]
--threads 0 (the default) leaves torch's own thread count alone (its default configuration).
--max-seconds bounds a very slow configuration: no warm-up step starts that would end past
half of it, no timed step one that would end past all of it, judged by the last step's time
(at least one timed step runs, unless even that would break the budget: then the first
warm-up step is reported, flagged warmup_only); the JSON says how many steps ran.
"""
import argparse
import contextlib
import ctypes
import json
import math
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = {"m1": (os.path.join(HERE, "..", "configs", "m1.json"), 256),
           "m2": (os.path.join(HERE, "..", "configs", "m2.json"), 512),
           "m3": (os.path.join(HERE, "..", "configs", "m3.json"), 512),  # 64 fine-grained experts, top-6, 2 shared
           "gpt2": (os.path.join(HERE, "..", "configs", "gpt2_124m.json"), 1024)}  # dense; pass --batch/--seq


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


BASE_RSS_MB = None


def load_config(path):
    with open(path) as f:
        c = json.load(f)
    c.setdefault("norm_eps", 1e-5)
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("moe_layer_freq", 1)
    c.setdefault("num_shared_experts", 0)
    c.setdefault("norm_topk_prob", True)
    c.setdefault("router_aux_loss_coef", 0.0)
    c.setdefault("router_z_loss_coef", 0.0)
    c.setdefault("initializer_range", 0.02)
    return c


def layer_is_moe(c, l):
    return c["num_local_experts"] > 0 and (l + 1) % c["moe_layer_freq"] == 0


def active_matmul_params(c):
    """bagualu's model_active_matmul_params (src/model/params.c), formula for formula."""
    C = float(c["hidden_size"])
    U = 3 if c["hidden_act"] == "swiglu" else 2
    total = 0.0
    for l in range(c["num_hidden_layers"]):
        total += 4 * C * C
        if layer_is_moe(c, l):
            total += c["num_local_experts"] * C
            total += (c["num_experts_per_tok"] + c["num_shared_experts"]) * U * C * c["moe_intermediate_size"]
        else:
            total += U * C * c["intermediate_size"]
    total += float(c["vocab_size"]) * C
    return total


def flops_per_token(c, T):
    return 6.0 * active_matmul_params(c) + 12.0 * c["num_hidden_layers"] * c["hidden_size"] * T


def mapped_libraries():
    """Shared objects of interest mapped into this process (which BLAS, allocator, OpenMP)."""
    keys = ("blas", "lapack", "openblas", "tcmalloc", "jemalloc", "gomp", "iomp", "dnnl", "mkl")
    seen = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 6:
                continue
            path = parts[5]
            name = os.path.basename(path).lower()
            if any(k in name for k in keys) and path not in seen:
                seen.append(path)
    return seen


def openblas_info(libs):
    """Core type, thread count and build of an OpenBLAS mapped into the process, if any."""
    for path in libs:
        name = os.path.basename(path)
        if "openblas" in name or ("libblas.so" in name and "openblas" in path):
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
                lib.openblas_get_corename.restype = ctypes.c_char_p
                lib.openblas_get_config.restype = ctypes.c_char_p
                return {"corename": lib.openblas_get_corename().decode(),
                        "threads": lib.openblas_get_num_threads(),
                        "config": lib.openblas_get_config().decode(), "path": path}
            except (OSError, AttributeError):
                continue
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(CONFIGS), default="m1")
    ap.add_argument("--config", help="model config JSON (default: configs/<model>.json)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave torch's default)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=0, help="sequence length (default: the model's context)")
    ap.add_argument("--max-seconds", type=float, default=0, help="time budget for slow configurations (0: none)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after timing, profile one more step and print its N costliest ops")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.threads < 0:
        ap.error("--steps and --batch must be >= 1, --warmup and --threads >= 0")

    global BASE_RSS_MB
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    BASE_RSS_MB = rss_mb()

    cfg_path, default_T = CONFIGS[a.model]
    c = load_config(a.config or cfg_path)
    B, T = a.batch, a.seq or default_T
    if T > c["max_position_embeddings"]:
        ap.error("--seq longer than the model's context")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    C, NH, L, V = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"], c["vocab_size"]
    hs = C // NH
    swiglu = c["hidden_act"] == "swiglu"
    rms = c["norm"] == "rmsnorm"
    rope = c["position_embedding"] == "rope"

    class RMSNorm(nn.Module):
        def __init__(self, n, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)) * self.weight

    def make_norm():
        return RMSNorm(C, c["norm_eps"]) if rms else nn.LayerNorm(C, eps=c["norm_eps"])

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, 3 * C, bias=False)
            self.o_proj = nn.Linear(C, C, bias=False)

        def forward(self, x, mask, cos, sin):
            Bx, Tx, _ = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(Bx, Tx, NH, hs).transpose(1, 2)
            k = k.view(Bx, Tx, NH, hs).transpose(1, 2)
            v = v.view(Bx, Tx, NH, hs).transpose(1, 2)
            if cos is not None:
                q = q * cos + rotate_half(q) * sin
                k = k * cos + rotate_half(k) * sin
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(Bx, Tx, C)
            return self.o_proj(y)

    class FFN(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.w1 = nn.Linear(C, hidden, bias=False)
            self.w3 = nn.Linear(C, hidden, bias=False) if swiglu else None
            self.w2 = nn.Linear(hidden, C, bias=False)

        def forward(self, x):
            if swiglu:
                return self.w2(F.silu(self.w1(x)) * self.w3(x))
            return self.w2(F.gelu(self.w1(x), approximate="tanh"))

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.E, self.k = c["num_local_experts"], c["num_experts_per_tok"]
            self.gate = nn.Linear(C, self.E, bias=False)
            self.experts = nn.ModuleList(FFN(c["moe_intermediate_size"]) for _ in range(self.E))
            self.shared = nn.ModuleList(FFN(c["moe_intermediate_size"]) for _ in range(c["num_shared_experts"]))

        def forward(self, x):  # x (N, C) -> (N, C), aux, z
            N = x.shape[0]
            with torch.autocast("cpu", enabled=False):  # router in fp32
                logits = self.gate(x.float())
                probs = logits.softmax(dim=-1)
                topw, topi = probs.topk(self.k, dim=-1)
                if c["norm_topk_prob"]:
                    topw = topw / topw.sum(dim=-1, keepdim=True)
                flat = topi.reshape(-1)
                order = torch.sort(flat, stable=True).indices   # (N·k) slots grouped by expert
                counts = torch.bincount(flat, minlength=self.E)
                aux = self.E * ((counts.float() / (N * self.k)) * probs.mean(0)).sum()
                z = torch.logsumexp(logits, dim=-1).pow(2).mean()
            tok = torch.div(order, self.k, rounding_mode="floor")
            xs = x.index_select(0, tok)
            outs = [self.experts[e](chunk)
                    for e, chunk in enumerate(xs.split(counts.tolist())) if chunk.shape[0]]
            ys = torch.cat(outs)
            ys = ys * topw.reshape(-1).index_select(0, order).unsqueeze(1).to(ys.dtype)
            out = torch.zeros(N, C, dtype=ys.dtype).index_add_(0, tok, ys)
            for s in self.shared:
                out = out + s(x)
            return out, aux, z

    class Block(nn.Module):
        def __init__(self, l):
            super().__init__()
            self.norm1, self.norm2 = make_norm(), make_norm()
            self.attn = Attention()
            self.moe = layer_is_moe(c, l)
            self.ffn = MoE() if self.moe else FFN(c["intermediate_size"])

        def forward(self, x, mask, cos, sin):
            x = x + self.attn(self.norm1(x), mask, cos, sin)
            h = self.norm2(x)
            if self.moe:
                Bx, Tx, _ = h.shape
                out, aux, z = self.ffn(h.reshape(Bx * Tx, C))
                return x + out.view(Bx, Tx, C), aux, z
            return x + self.ffn(h), None, None

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, C)
            self.pos = None if rope else nn.Embedding(c["max_position_embeddings"], C)
            self.layers = nn.ModuleList(Block(l) for l in range(L))
            self.norm_f = make_norm()
            self.lm_head = None if c["tie_word_embeddings"] else nn.Linear(C, V, bias=False)
            std = c["initializer_range"]
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, std)
            for m in self.modules():  # projections into the residual stream, as bagualu (GPT-2)
                if isinstance(m, (Attention, FFN)):
                    out = m.o_proj if isinstance(m, Attention) else m.w2
                    nn.init.normal_(out.weight, 0.0, std / math.sqrt(2 * L))
            self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)
            if rope:
                inv = c["rope_theta"] ** (-torch.arange(0, hs, 2, dtype=torch.float32) / hs)
                ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
                ang = torch.cat((ang, ang), dim=-1)
                self.register_buffer("cos", ang.cos(), persistent=False)
                self.register_buffer("sin", ang.sin(), persistent=False)
            else:
                self.cos = self.sin = None

        def forward(self, idx, targets):
            Bx, Tx = idx.shape
            x = self.embed(idx)
            if self.pos is not None:
                x = x + self.pos.weight[:Tx]
            router_loss = 0.0
            for blk in self.layers:
                x, aux, z = blk(x, self.mask, self.cos, self.sin)
                if aux is not None:
                    router_loss = router_loss + c["router_aux_loss_coef"] * aux
                    if c["router_z_loss_coef"]:
                        router_loss = router_loss + c["router_z_loss_coef"] * z
            x = self.norm_f(x)
            head = self.embed.weight if self.lm_head is None else self.lm_head.weight
            logits = F.linear(x, head)
            loss = F.cross_entropy(logits.float().view(-1, V), targets.view(-1))
            return loss + router_loss, loss

    model = Model()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        embedding = name.startswith("embed.") or name.startswith("pos.")
        (decay if p.dim() >= 2 and not embedding else no_decay).append(p)
    import inspect
    opt_params = inspect.signature(torch.optim.AdamW.__init__).parameters
    opt_kw = {}
    if "fused" in opt_params:
        opt_kw["fused"] = True
    elif "foreach" in opt_params:
        opt_kw["foreach"] = True
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **opt_kw)
    except (RuntimeError, ValueError):  # fused may be CUDA-only in this build
        opt_kw = {"foreach": True} if "foreach" in opt_params else {}
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **opt_kw)
    params = [p for p in model.parameters()]

    g = torch.Generator().manual_seed(a.seed)
    inputs = torch.randint(V, (B, T), generator=g)
    targets = torch.randint(V, (B, T), generator=g)
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.dtype == "bf16" else contextlib.nullcontext

    def step():
        c0 = time.process_time()  # every thread's CPU time: with one thread, the step's work on a shared machine
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with amp():
            total, loss = model(inputs, targets)
        t1 = time.perf_counter()
        total.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        t3 = time.perf_counter()
        cpu.append(time.process_time() - c0)
        return t3 - t0, t1 - t0, t2 - t1, t3 - t2, loss.item()

    def over(frac, last):  # would one more step of `last` seconds end past frac of the budget?
        return a.max_seconds and time.perf_counter() - start + last > a.max_seconds * frac

    cpu = []
    start = time.perf_counter()
    warm, times, parts, losses, warmup_only, last = 0, [], [0.0, 0.0, 0.0], [], False, 0.0
    while warm < a.warmup and not over(0.5, last):
        sample = step()
        warm, last = warm + 1, sample[0]
    if warm and over(1.0, last):
        # One timed step would break the budget (e.g. a reference BLAS): report the warm-up
        # step instead, flagged; its one-time costs are small beside a step this slow.
        warmup_only = True
        times, parts, losses = [sample[0]], list(sample[1:4]), [sample[4]]
    while not warmup_only and len(times) < a.steps and not (times and over(1.0, times[-1])):
        dt, f, b, o, loss = step()
        times.append(dt)
        parts = [parts[0] + f, parts[1] + b, parts[2] + o]
        losses.append(loss)
    n = len(times)
    cpu_med = statistics.median(cpu[-n:])
    if a.profile:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.profile))
    med = statistics.median(times)
    tokens = B * T
    flops = flops_per_token(c, T) * tokens
    libs = mapped_libraries()
    ob = openblas_info(libs)
    nparams = sum(p.numel() for p in params)
    r = {
        "peer": "torch", "torch": torch.__version__, "model": a.model, "dtype": a.dtype,
        "threads": torch.get_num_threads(), "batch": B, "seq": T, "params_m": nparams / 1e6,
        "warmup": warm, "steps": n, "warmup_only": warmup_only, "ms_step": med * 1e3,
        "ms_cpu": cpu_med * 1e3, "ms_min": min(times) * 1e3, "ms_max": max(times) * 1e3, "ms_forward": parts[0] / n * 1e3,
        "ms_backward": parts[1] / n * 1e3, "ms_optimizer": parts[2] / n * 1e3, "tokens_per_s": tokens / med,
        "gflop_step": flops / 1e9, "gflops": flops / med / 1e9, "loss_first": losses[0],
        "peak_rss_mb": peak_rss_mb(), "base_rss_mb": BASE_RSS_MB, "optimizer": "AdamW" + "".join(
            "+" + k for k in opt_kw), "libs": libs, "openblas": ob,
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "env_openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
    }
    print(f"peer torch {torch.__version__}: model {a.model} ({nparams / 1e6:.1f}M params), {a.dtype}, "
          f"batch {B} x {T}, {torch.get_num_threads()} threads, {flops / 1e9:.1f} GFLOP per step")
    note = ", the warm-up step itself: over budget" if warmup_only else ""
    print(f"train step: median {med * 1e3:.1f} ms (min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}, "
          f"n={n}, warm-up {warm}{note}) | forward {r['ms_forward']:.1f} ms, backward {r['ms_backward']:.1f} ms, "
          f"clip+optimizer {r['ms_optimizer']:.1f} ms (means)")
    print(f"cpu time: median {cpu_med * 1e3:.1f} ms per step (all threads)")
    print(f"throughput: {tokens / med:.0f} tokens/s | {flops / med / 1e9:.1f} GFLOP/s | "
          f"peak RSS {r['peak_rss_mb']:.0f} MiB (after import {BASE_RSS_MB:.0f} MiB)")
    print("BLAS: " + (f"OpenBLAS {ob['corename']} ({ob['threads']} threads) {ob['path']}" if ob else
                      ", ".join(l for l in libs if "blas" in l.lower()) or "none mapped"))
    print("PEER_JSON " + json.dumps(r))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
