#!/usr/bin/env python3
"""GEMM efficiency curves and the attention core's rate of one NVIDIA GPU, measured
with plain PyTorch, in the format of the planner's cluster files (docs/PLANNER.md:
`gemm.<dtype>` as {skinny, medium, square} lists of [flops of one call, rate];
`attention_rate.<dtype>`; `attention_efficiency`).

What is timed, as docs/PLANNER.md defines the calibration:
  * a GEMM "call" is a linear layer's training triple, Y = X W^T (forward, (M, K, N)),
    dX = dY W (backward data, (M, N, K)) and dW = dY^T X (backward weights, (N, M, K)),
    each 2MKN FLOPs; the rate is 3 * 2MKN over the triple's time, against the FLOPs of
    one call (2MKN);
  * operands are cold: the three calls of a triple take three different operand sets,
    and the sets rotate, so a set is reused only after more than 4x the L2's bytes have
    been read through it (between two uses of a weight a step streams the rest of the
    model);
  * the triples are captured in a CUDA graph (launch gaps out: a 1e9-FLOP call lasts
    about 2 us, less than the Python dispatch) and each sample is one replay of about
    8 ms timed with CUDA events; the rate is of the median of 7 samples after one warm-up;
  * bf16: torch.mm; fp8: torch._scaled_mm, e4m3 operands, per-tensor scales, bf16 out,
    use_fast_accum False (the curve: cuBLAS's split accumulation, closer to DeepSeek-V3's
    promoted accumulation) and True (reported alongside). _scaled_mm wants its first
    operand row-major and its second column-major, so every fp8 operand is held in both
    orientations (what FP8 training's cast-transpose kernels produce);
  * classes by arithmetic intensity AI = MKN / (2(MK + KN + MN)): < 20 skinny,
    < 60 medium, else square (src/plan/cluster.c); a spread of each class as
    `bagualu plan --calibrate` times it (skinny M = 16, medium M = 64, square s^3 and
    (s/2, s, s)) from ~1e9 to ~1e12 FLOPs, plus the paper models' own shapes
    (bench/plan_papers.sh's layouts, the rows per expert as src/plan/plan_time.c counts
    them); of near-equal sizes in a class (within 5%) the model's own shape is kept;
  * attention: F.scaled_dot_product_attention, causal, bf16, forward + backward, with the
    flash backend (and cuDNN's, reported alongside), at the models' heads per rank, head
    dims and sequence 4096, FLOPs counted as the planner counts them (7 T^2 H D: forward
    2, backward 5, causal halves); attention_efficiency = that rate over the GEMM curve's
    at the (T, head_dim, T) tile, as src/plan/plan_time.c prices it.

Usage: python3 bench/gpu_gemm_curve.py [--out DIR]   (writes DIR/gemm_curve.json)
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

DEV = "cuda"
TARGET_S = 0.008  # seconds per timed sample (one graph replay)
REPS = 7


def ai_of(M, K, N):
    return M * K * N / (2.0 * (M * K + K * N + M * N))


def class_of(M, K, N):
    a = ai_of(M, K, N)
    return "skinny" if a < 20 else "medium" if a < 60 else "square"


def l2_bytes():
    p = torch.cuda.get_device_properties(0)
    return getattr(p, "L2_cache_size", 50 << 20) or (50 << 20)


def n_sets_for(set_bytes):
    # reuse distance n - 1 calls of ~2/3 of a set each >= 4 x L2
    n = 1 + math.ceil(6.0 * l2_bytes() / max(set_bytes, 1))
    return max(3, min(n, 256))


def elapsed(fn, it):
    """Seconds per call of fn(i), i = 0..it-1, between two CUDA events."""
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    for i in range(it):
        fn(i)
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / 1e3 / it


def timed_graph(run_k, k, reps=REPS):
    """Capture run_k(k) (k triples) in a CUDA graph; median seconds per triple."""
    run_k(k)  # eager warm-up: cuBLAS handles, heuristics, workspaces
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run_k(k)
    g.replay()
    torch.cuda.synchronize()
    ts = [elapsed(lambda i: g.replay(), 1) / k for _ in range(reps)]
    del g
    return statistics.median(ts), min(ts), max(ts)


def bench_gemm(M, K, N, kind, fast_accum=False):
    """Seconds per triple (median), n_sets. kind: 'bf16' or 'fp8'."""
    elem = 2 if kind == "bf16" else 1
    copies = 1 if kind == "bf16" else 2
    set_bytes = elem * copies * (M * K + K * N + M * N)
    n = n_sets_for(set_bytes)
    sets = []
    if kind == "bf16":
        for _ in range(n):
            X = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
            W = torch.randn(N, K, device=DEV, dtype=torch.bfloat16) * 0.02
            dY = torch.randn(M, N, device=DEV, dtype=torch.bfloat16) * 0.01
            sets.append((X, W, dY))
        Y = torch.empty(M, N, device=DEV, dtype=torch.bfloat16)
        dX = torch.empty(M, K, device=DEV, dtype=torch.bfloat16)
        dW = torch.empty(N, K, device=DEV, dtype=torch.bfloat16)

        def fwd(s):
            torch.mm(s[0], s[1].t(), out=Y)

        def bwd_d(s):
            torch.mm(s[2], s[1], out=dX)

        def bwd_w(s):
            torch.mm(s[2].t(), s[0], out=dW)
    else:
        f8 = torch.float8_e4m3fn
        one = torch.ones((), device=DEV, dtype=torch.float32)

        def cast(t):
            return t.to(f8), t.t().contiguous().to(f8)

        for _ in range(n):
            X, Xt = cast(torch.randn(M, K, device=DEV, dtype=torch.bfloat16))
            W, Wt = cast(torch.randn(N, K, device=DEV, dtype=torch.bfloat16))
            dY, dYt = cast(torch.randn(M, N, device=DEV, dtype=torch.bfloat16))
            sets.append((X, Xt, W, Wt, dY, dYt))
            torch.cuda.synchronize()

        def mm8(a, b):
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast_accum)

        def fwd(s):  # (M,K) row-major @ (K,N) column-major
            mm8(s[0], s[2].t())

        def bwd_d(s):  # dY (M,N) row-major @ W (N,K) column-major = Wt^T
            mm8(s[4], s[3].t())

        def bwd_w(s):  # dY^T (N,M) row-major @ X (M,K) column-major = Xt^T
            mm8(s[5], s[1].t())

    def run_k(k):
        for t in range(k):
            fwd(sets[(3 * t) % n])
            bwd_d(sets[(3 * t + 1) % n])
            bwd_w(sets[(3 * t + 2) % n])

    # a-priori triple time (the larger of arithmetic at ~600 TFLOP/s and bytes at 3 TB/s)
    est = max(3 * 2.0 * M * K * N / 6e14, 3 * elem * 2.0 * (M * K + K * N + M * N) / 3e12)
    j = max(1, math.ceil(TARGET_S / (n * est)))
    k = n * j  # 3k calls: a multiple of n, so replays continue the rotation
    k = min(k, max(n, 3000))
    try:
        med, lo, hi = timed_graph(run_k, k)
    finally:
        del sets
        torch.cuda.empty_cache()
    return med, lo, hi, n


def bench_attention(H, Dqk, Dv, T, backend):
    from torch.nn.attention import sdpa_kernel, SDPBackend
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    set_bytes = 2 * T * H * (2 * Dqk + 2 * Dv)
    n = max(2, min(16, 1 + math.ceil(4.0 * l2_bytes() / set_bytes)))
    sets = []
    for _ in range(n):
        q = torch.randn(1, H, T, Dqk, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, H, T, Dqk, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, H, T, Dv, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(1, H, T, Dv, device=DEV, dtype=torch.bfloat16)
        sets.append((q, k, v, do))

    def step(s, bwd=True):
        o = F.scaled_dot_product_attention(s[0], s[1], s[2], is_causal=True)
        if bwd:
            torch.autograd.grad(o, (s[0], s[1], s[2]), s[3])

    res = {}
    with sdpa_kernel([be]):
        for mode in ("fwd", "fwd+bwd"):
            bwd = mode == "fwd+bwd"
            for i in range(2):
                step(sets[i % n], bwd)
            torch.cuda.synchronize()
            one = lambda i: step(sets[i % n], bwd)  # noqa: E731
            est = elapsed(one, n)
            it = max(n, n * math.ceil(0.02 / (n * est)))
            res[mode] = statistics.median([elapsed(one, it) for _ in range(REPS)])
    del sets
    torch.cuda.empty_cache()
    return res


def curve_rate(curves, cls, flops):
    """src/plan/cluster.c's plan_gemm_rate on a measured {class: [[f, r], ...]}."""
    order = ["skinny", "medium", "square"]
    c = order.index(cls)
    g = None
    for dist in range(3):
        for s in (-1, 1):
            kk = c + s * dist
            if g is None and 0 <= kk < 3 and curves.get(order[kk]):
                g = curves[order[kk]]
    if not g:
        return float("nan")
    if flops <= g[0][0]:
        return g[0][1]
    if flops >= g[-1][0]:
        return g[-1][1]
    i = 1
    while g[i][0] < flops:
        i += 1
    u = (math.log(flops) - math.log(g[i - 1][0])) / (math.log(g[i][0]) - math.log(g[i - 1][0]))
    return g[i - 1][1] + u * (g[i][1] - g[i - 1][1])


def sig(x, d):
    return float(f"{x:.{d - 1}e}")


def build_curve(points):
    """points: [(flops, rate, own)] of one class -> [[flops, rate], ...], at most 16."""
    pts = sorted(points)
    merged = []
    for f, r, own in pts:
        if merged and f <= merged[-1][0] * 1.05:
            pf, pr, pown, cnt = merged[-1]
            if own and not pown:
                merged[-1] = [f, r, own, 1]
            elif own == pown:  # both the model's or both the spread's: the mean
                merged[-1] = [math.sqrt(pf * f), (pr * cnt + r) / (cnt + 1), own, cnt + 1]
            continue
        merged.append([f, r, own, 1])
    while len(merged) > 16:
        best, bi = None, None
        for i in range(1, len(merged) - 1):
            if merged[i][2]:
                continue
            gap = min(math.log(merged[i][0] / merged[i - 1][0]), math.log(merged[i + 1][0] / merged[i][0]))
            if best is None or gap < best:
                best, bi = gap, i
        if bi is None:
            merged = merged[:16]
            break
        del merged[bi]
    out = []
    for f, r, _, _ in merged:
        f = sig(f, 4)
        if out and f <= out[-1][0]:
            continue
        out.append([f, sig(r, 3)])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    t_start = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    p = torch.cuda.get_device_properties(0)
    env = {
        "device": torch.cuda.get_device_name(0),
        "sms": p.multi_processor_count,
        "l2_bytes": l2_bytes(),
        "memory_bytes": p.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cublas_note": "torch.mm (bf16) and torch._scaled_mm (fp8 e4m3, per-tensor scales) through cuBLAS/cuBLASLt",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    print(json.dumps(env), flush=True)

    # name, M, K, N, own (a paper model's shape), tile (the attention tile: reported only)
    shapes = []
    for kk, nn in ((8192, 4096), (8192, 16384), (16384, 32768), (32768, 65536)):
        shapes.append(("skinny spread", 16, kk, nn, False, False))
    for kk, nn in ((4096, 2048), (8192, 4096), (16384, 8192), (32768, 16384), (32768, 32768)):
        shapes.append(("medium spread", 64, kk, nn, False, False))
    for s in (1024, 2048, 4096, 8192):
        shapes.append(("square spread", s, s, s, False, False))
    for s in (1024, 2048, 4096):
        shapes.append(("square spread", s // 2, s, s, False, False))
    # Mixtral-8x22B, TP 2, 4096 tokens per micro-batch: qkv (N, C, 3C/tp), o_proj (N, C/tp, C);
    # experts: rows = imbalance 1.032 x (N/tp) k EP / E = 4227 -> 4224 (multiple of 16), 1 per rank
    C, I, V = 6144, 16384, 32768
    shapes += [("mixtral qkv", 4096, C, 3 * C // 2, True, False),
               ("mixtral o_proj", 4096, C // 2, C, True, False),
               ("mixtral expert in", 4224, C, 2 * I, True, False),
               ("mixtral expert out", 4224, I, C, True, False),
               ("mixtral lm head", 4096, C, V // 2, True, False)]
    # DeepSeek-V3, TP 1, EP 64, 4096 tokens per rank: 256 experts / 64 = 4 per rank, rows per
    # expert = imbalance 1.016 x 4096 x 8 x 64 / 256 = 8323 -> 8320; shared expert width 2048
    C, Im, V = 7168, 2048, 129280
    shapes += [("deepseek qkv", 4096, C, 3 * C, True, False),
               ("deepseek o_proj", 4096, C, C, True, False),
               ("deepseek expert in", 8320, C, 2 * Im, True, False),
               ("deepseek expert out", 8320, Im, C, True, False),
               ("deepseek shared in", 4096, C, 2 * Im, True, False),
               ("deepseek shared out", 4096, Im, C, True, False),
               ("deepseek lm head", 4096, C, V, True, False)]
    # the attention tiles the planner prices attention at: (T, C/H, T)
    shapes += [("tile mixtral (T,128,T)", 4096, 128, 4096, False, True),
               ("tile deepseek (T,56,T)", 4096, 56, 4096, False, True),
               ("tile (T,64,T)", 4096, 64, 4096, False, True)]

    have_fp8 = hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    if not have_fp8:
        print("fp8: torch._scaled_mm or float8_e4m3fn missing in this torch: no fp8 curve", flush=True)
    rows = []
    for name, M, K, N, own, tile in shapes:
        r = {"name": name, "M": M, "K": K, "N": N, "flops": 2.0 * M * K * N, "ai": ai_of(M, K, N),
             "class": class_of(M, K, N), "own": own, "tile": tile}
        for kind, fast in (("bf16", False), ("fp8", False), ("fp8_fast", True)):
            if kind != "bf16" and (not have_fp8 or M % 16 or K % 16 or N % 16):
                continue
            try:
                med, lo, hi, n = bench_gemm(M, K, N, "bf16" if kind == "bf16" else "fp8", fast)
                r[kind] = 3 * r["flops"] / med
                r[kind + "_spread"] = [3 * r["flops"] / hi, 3 * r["flops"] / lo]
                r["sets"] = n
            except Exception as e:  # report and go on
                r[kind + "_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                print(f"  {name} {kind}: {r[kind + '_error']}", flush=True)
                torch.cuda.empty_cache()
        rows.append(r)
        print(f"{name:24s} {M:6d} {K:6d} {N:6d} AI {r['ai']:7.1f} {r['class']:6s} {r['flops']:9.3g} FLOP  "
              f"bf16 {r.get('bf16', float('nan')) / 1e12:6.1f}  fp8 {r.get('fp8', float('nan')) / 1e12:6.1f}  "
              f"fp8 fast {r.get('fp8_fast', float('nan')) / 1e12:6.1f} TFLOP/s  sets {r.get('sets', 0)}  "
              f"[{time.time() - t_start:5.1f} s]", flush=True)

    curves = {}
    for kind in ("bf16", "fp8"):
        cur = {}
        for cls in ("skinny", "medium", "square"):
            pts = [(r["flops"], r[kind], r["own"]) for r in rows
                   if r["class"] == cls and not r["tile"] and kind in r]
            if pts:
                cur[cls] = build_curve(pts)
        if cur:
            curves[kind] = cur

    # attention: (label, heads per rank, head dim q/k, head dim v, the planner's tile (T, C/H, T),
    # the paper run's dtype)
    T = 4096
    att_cases = [("mixtral TP2 (24 heads x 128)", 24, 128, 128, "bf16"),
                 ("mixtral TP1 (48 heads x 128)", 48, 128, 128, "bf16"),
                 ("deepseek as planned (128 heads x 56)", 128, 56, 56, "fp8"),
                 ("deepseek MLA (128 heads, qk 192, v 128)", 128, 192, 128, "fp8")]
    att = []
    for label, H, Dqk, Dv, run_dtype in att_cases:
        flops = T * T * H * (4.0 * Dqk + 3.0 * Dv)  # = 7 T^2 H D when Dqk = Dv
        for backend in ("flash", "cudnn"):
            a = {"case": label, "backend": backend, "H": H, "Dqk": Dqk, "Dv": Dv, "T": T, "flops": flops}
            try:
                res = bench_attention(H, Dqk, Dv, T, backend)
                a["fwd_s"], a["fwd_bwd_s"] = res["fwd"], res["fwd+bwd"]
                a["rate"] = flops / res["fwd+bwd"]
                a["fwd_rate"] = T * T * H * (Dqk + Dv) / res["fwd"]
                hd = Dqk
                a["tile"] = [T, hd, T]
                for kind in ("bf16", "fp8"):
                    if kind in curves:
                        g = curve_rate(curves[kind], class_of(T, hd, T), 2.0 * T * hd * T)
                        a["gemm_curve_" + kind] = g
                        a["efficiency_vs_" + kind] = a["rate"] / g
            except Exception as e:
                a["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                torch.cuda.empty_cache()
            att.append(a)
            if "error" in a:
                print(f"attention {label} {backend}: {a['error']}", flush=True)
            else:
                print(f"attention {label:42s} {backend:5s} fwd {a['fwd_s'] * 1e3:7.3f} ms  fwd+bwd "
                      f"{a['fwd_bwd_s'] * 1e3:7.3f} ms  {a['rate'] / 1e12:6.1f} TFLOP/s (fwd alone "
                      f"{a['fwd_rate'] / 1e12:6.1f}); GEMM curve at ({T},{Dqk},{T}): bf16 "
                      f"{a.get('gemm_curve_bf16', float('nan')) / 1e12:6.1f}, fp8 "
                      f"{a.get('gemm_curve_fp8', float('nan')) / 1e12:6.1f}; efficiency vs bf16 "
                      f"{a.get('efficiency_vs_bf16', float('nan')):.3f}, vs fp8 "
                      f"{a.get('efficiency_vs_fp8', float('nan')):.3f}  [{time.time() - t_start:5.1f} s]",
                      flush=True)

    out = {"env": env, "method": __doc__.split("Usage:")[0].strip(), "shapes": rows, "gemm": curves,
           "attention": att, "seconds": time.time() - t_start}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gemm_curve.json"), "w") as f:
        json.dump(out, f, indent=1)

    print("\n== table: TFLOP/s of the fwd + bwd-data + bwd-weights triple, cold operands ==")
    print(f"{'shape':24s} {'M':>6s} {'K':>6s} {'N':>6s} {'AI':>7s} {'class':6s} {'FLOPs/call':>10s} "
          f"{'bf16':>7s} {'fp8':>7s} {'fp8fast':>7s}")
    for r in sorted(rows, key=lambda r: (r["class"], r["flops"])):
        print(f"{r['name']:24s} {r['M']:6d} {r['K']:6d} {r['N']:6d} {r['ai']:7.1f} {r['class']:6s} "
              f"{r['flops']:10.3g} {r.get('bf16', float('nan')) / 1e12:7.1f} "
              f"{r.get('fp8', float('nan')) / 1e12:7.1f} {r.get('fp8_fast', float('nan')) / 1e12:7.1f}")
    print("\n== curves (cluster-file format) ==")
    print(json.dumps({"gemm": curves}))
    print(f"done in {time.time() - t_start:.1f} s")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
