#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/ (committed; rerun after a
format change). Small valid files of every variant the readers accept, a few near-misses, and the
bundled model configs. The manifest and kernel-key seeds come from a real cache: pass a cache root that
`moejit prewarm` filled (MOEJIT_CACHE_DIR=... moejit prewarm --config qwen3-30b-a3b --arch sm_90a
--max-tokens 8) as the first argument to refresh them.

    python3 fuzz/make_seeds.py [CACHE_ROOT]
"""
import glob
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
rng = random.Random(36)


def out(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: {name: (dtype, shape, bytes)}; laid out back to back in name order, header space-padded."""
    header, offset, blob = {}, 0, b""
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blob += data
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + blob


def rand_bytes(n):
    return bytes(rng.randrange(256) for _ in range(n))


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def layer(fmt, act, E, H, I, K, bias=False, limit=None, order="gate_up", begin=0):
    block = 16 if fmt == "nvfp4" else 32
    gated = act != "relu2"
    fc1 = "w13" if gated else "w1"
    rows = 2 * I if gated else I
    t = {
        fc1: ("U8", [E, rows, H // 2], rand_bytes(E * rows * H // 2)),
        fc1 + "_scale": ("U8", [E, rows, H // block], bytes([0x38 if fmt == "nvfp4" else 0x7F] * (E * rows * H // block))),
        "w2": ("U8", [E, H, I // 2], rand_bytes(E * H * I // 2)),
        "w2_scale": ("U8", [E, H, I // block], bytes([0x38 if fmt == "nvfp4" else 0x7F] * (E * H * I // block))),
    }
    if fmt == "nvfp4":
        t[fc1 + "_global_scale"] = ("F32", [E], f32([0.5] * E))
        t["w2_global_scale"] = ("F32", [E], f32([0.25] * E))
    if bias:
        t[fc1 + "_bias"] = ("F32", [E, rows], f32([0.01] * (E * rows)))
        t["w2_bias"] = ("F32", [E, H], f32([-0.01] * (E * H)))
    meta = {"format": fmt, "activation": act, "gate_up_order": order, "experts": str(E), "hidden": str(H),
            "intermediate": str(I), "top_k": str(K), "expert_begin": str(begin)}
    if act == "swigluoai":
        meta.update({"swiglu_alpha": "1.702", "swiglu_beta": "1"})
    if limit is not None:
        meta["swiglu_limit"] = str(limit)
    return safetensors(t, meta)


def inputs(M, H, K, E, begin=0):
    ids = [rng.randrange(begin - 1, begin + E + 1) for _ in range(M * K)]
    return safetensors({
        "x": ("BF16", [M, H], rand_bytes(2 * M * H)),
        "topk_ids": ("I32", [M, K], struct.pack("<%di" % len(ids), *ids)),
        "topk_weights": ("F32", [M, K], f32([1.0 / K] * (M * K))),
    })


layers = {
    "mxfp4_silu": layer("mxfp4", "silu", 2, 32, 32, 2),
    "nvfp4_silu_limit_upgate": layer("nvfp4", "silu", 2, 32, 16, 1, limit=3.0, order="up_gate"),
    "nvfp4_relu2_bias": layer("nvfp4", "relu2", 1, 16, 32, 1, bias=True),
    "mxfp4_swigluoai_ep": layer("mxfp4", "swigluoai", 2, 32, 32, 2, bias=True, limit=7.0, order="interleaved", begin=4),
    "mxfp4_gelu": layer("mxfp4", "gelu_tanh", 1, 64, 32, 1),
}
for name, data in layers.items():
    out("layer_file", name + ".safetensors", data)
    out("safetensors", "layer_" + name + ".safetensors", data)
for name, (M, H, K, E, b) in {"m1": (1, 32, 2, 2, 0), "m3_ep": (3, 32, 2, 2, 4), "m0": (0, 64, 1, 1, 0)}.items():
    data = inputs(M, H, K, E, b)
    out("input_file", name + ".safetensors", data)
    out("safetensors", "input_" + name + ".safetensors", data)
out("safetensors", "empty_header.safetensors", safetensors({}))
out("safetensors", "metadata_only.safetensors", safetensors({}, {"note": "x"}))
out("safetensors", "every_dtype.safetensors", safetensors({
    "u8": ("U8", [3], b"\x01\x02\x03"), "i16": ("I16", [1], b"\x01\x00"), "bf16": ("BF16", [2], b"\x80\x3f\x00\x40"),
    "f64": ("F64", [], struct.pack("<d", 1.5)), "empty": ("I64", [0, 4], b"")}))

for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.json"))):
    out("model_config", os.path.basename(path), open(path).read())
out("model_config", "ep_tp.json", json.dumps({"name": "t", "format": "nvfp4", "activation": "silu", "experts": 64,
                                                "hidden": 1024, "intermediate": 512, "top_k": 4, "tp": 2, "ep": 4,
                                                "ep_rank": 3, "swiglu_limit": 5}))
out("model_config", "relu2_bias.json", json.dumps({"name": "r", "format": "mxfp4", "activation": "relu2",
                                                     "experts": 8, "hidden": 256, "intermediate": 128, "top_k": 2,
                                                     "bias": True}))

if len(sys.argv) > 1:
    keys = set()
    for i, path in enumerate(sorted(glob.glob(os.path.join(sys.argv[1], "v*", "sm_*", "*", "manifest.json")))):
        text = open(path).read()
        keys.add(json.loads(text)["key"])
        if i < 4:
            out("manifest", "manifest_%d.json" % i, text)
    for i, key in enumerate(sorted(keys)):
        out("kernel_key", "key_%02d.txt" % i, key)
