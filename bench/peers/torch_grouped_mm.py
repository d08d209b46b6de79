#!/usr/bin/env python3
"""Side-by-side peer for `moejit bench`: the same MoE layer in bf16 through torch._grouped_mm.

Routing (sort by expert, offsets), FC1, activation, FC2 and the weighted top-k sum all run inside one
CUDA graph; each replay starts with a cold L2 (a 2x-L2 buffer is read, or rewritten with --flush write,
outside the timed events; `moejit bench` flushes the same way).
Prints the same columns as `moejit bench`: µs, distinct experts, weight bytes read, achieved TB/s and
the fraction of the device-copy bandwidth measured in the same run.

usage: python3 bench/peers/torch_grouped_mm.py --config gpt-oss-120b [--tokens 1,2,4] [--replays 50] [--flush read|write]
"""
import argparse
import json
import os
import statistics

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def load_config(name):
    path = name if os.path.exists(name) else os.path.join(HERE, "..", "..", "configs", name + ".json")
    with open(path) as f:
        return json.load(f)


def copy_bandwidth(nbytes=1 << 30, reps=20):
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return 2 * nbytes / statistics.median(times)


def activation(cfg, h, inter):
    act = cfg["activation"]
    if act == "relu2":
        return torch.relu(h).square()
    g, u = h[:, :inter], h[:, inter:]
    lim = cfg.get("swiglu_limit")
    if act == "silu":
        if lim is not None:
            g, u = g.clamp(max=lim), u.clamp(-lim, lim)
        return torch.nn.functional.silu(g) * u
    if act == "swigluoai":
        alpha, beta = cfg.get("swiglu_alpha", 1.702), cfg.get("swiglu_beta", 1.0)
        if lim is not None:
            g, u = g.clamp(max=lim), u.clamp(-lim, lim)
        return g * torch.sigmoid(alpha * g) * (u + beta)
    return torch.nn.functional.gelu(g, approximate="tanh") * u


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="gpt-oss-120b")
    ap.add_argument("--tokens", default="1,2,4,8,16,32,64")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--flush", choices=["read", "write"], default="read",
                    help="empty the L2 before each replay by reading (default) or writing 2x its size")
    args = ap.parse_args()
    cfg = load_config(args.config)
    E, H, I, K = cfg["experts"], cfg["hidden"], cfg["intermediate"], cfg["top_k"]
    rows1 = I if cfg["activation"] == "relu2" else 2 * I
    torch.manual_seed(0)
    dev = "cuda"
    w13 = (torch.randn(E, H, rows1, device=dev) / H**0.5).to(torch.bfloat16)
    w2 = (torch.randn(E, I, H, device=dev) / I**0.5).to(torch.bfloat16)
    b13 = torch.randn(E, rows1, device=dev) * 0.1 if cfg.get("bias") else None
    b2 = torch.randn(E, H, device=dev) * 0.1 if cfg.get("bias") else None
    expert_bytes = (rows1 * H + H * I) * 2
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.zeros(2 * l2 + (1 << 20), dtype=torch.uint8, device=dev)
    bw = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name(0)}  config {cfg.get('name', args.config)}  bf16 torch._grouped_mm")
    print(f"# device copy bandwidth {bw / 1e12:.2f} TB/s (read+write)")
    print(f"{'M':>5} {'us':>9} {'experts':>8} {'weight MB':>10} {'TB/s':>7} {'of copy':>8}")
    for m in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(m, H, device=dev).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(E, device=dev)[:K] for _ in range(m)]).to(torch.int32)
        tw = torch.rand(m, K, device=dev)
        tw = tw / tw.sum(1, keepdim=True)

        def layer():
            flat = ids.flatten().long()
            order = torch.argsort(flat, stable=True)
            tok = order // K
            # bincount would synchronize with the host during capture; scatter_add does not.
            counts = torch.zeros(E, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
            offs = torch.cumsum(counts, 0).to(torch.int32)
            xs = x[tok]
            h = torch._grouped_mm(xs, w13, offs=offs)
            if b13 is not None:
                h = h + b13[flat[order]].to(h.dtype)
            a = activation(cfg, h.float(), I).to(torch.bfloat16)
            y = torch._grouped_mm(a, w2, offs=offs).float()
            if b2 is not None:
                y = y + b2[flat[order]]
            y = y * tw.flatten()[order, None]
            out = torch.zeros(m, H, device=dev, dtype=torch.float32).index_add_(0, tok, y)
            return out.to(torch.bfloat16)

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                layer()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            layer()
        times = []
        for _ in range(args.replays):
            if args.flush == "read":
                flush.max()  # reads every byte, leaves clean lines in L2
            else:
                flush.zero_()
            st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            st.record()
            g.replay()
            en.record()
            en.synchronize()
            times.append(st.elapsed_time(en) * 1e-3)
        t = statistics.median(times)
        distinct = len(set(ids.flatten().tolist()))
        wbytes = distinct * expert_bytes
        print(f"{m:>5} {t * 1e6:>9.1f} {distinct:>8} {wbytes / 1e6:>10.1f} {wbytes / t / 1e12:>7.2f} "
              f"{wbytes / t / bw:>8.1%}")


if __name__ == "__main__":
    main()
