#!/usr/bin/env python3
"""Compares two checkpoints (or two safetensors files) tensor by tensor, bit for bit.

usage: st_compare.py A B
A and B are checkpoint step directories (every *.safetensors in them is read) or single
.safetensors files. Tensors are matched by name across a directory's files, so a checkpoint
of format 1 (one model and one optimizer file) compares with one of format 2 (a file per
rank): optimizer pieces ("<name>.exp_avg.<offset>") are joined into whole tensors (compared
by bytes) and format 2's AdamW step (optimizer.index.json) is the I64 "step". dtype, shape
and raw bytes must be equal. Prints one line per difference and a summary; exit 0 when everything is equal, 1 when
anything differs, 2 on unreadable input. Standard library only (no numpy, no torch).
"""
import json
import os
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} past the end of the file")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        tensors[name] = (t["dtype"], tuple(t["shape"]), data[b:e])
    return tensors


def collect(path):
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        out, pieces = {}, {}
        for f in files:
            for name, t in read_safetensors(os.path.join(path, f)).items():
                base, _, off = name.rpartition(".")
                if off.isdigit() and base.endswith((".exp_avg", ".exp_avg_sq")):
                    pieces.setdefault(base, []).append((int(off), t))
                else:
                    out[name] = t
        for base, parts in pieces.items():
            parts.sort(key=lambda p: p[0])
            if base in out:
                parts.insert(0, (0, out.pop(base)))
            data = b"".join(t[2] for _, t in parts)
            out[base] = (parts[0][1][0], (len(data) // 4,), data)
        index = os.path.join(path, "optimizer.index.json")
        if os.path.exists(index):
            with open(index) as f:
                out["step"] = ("I64", (), struct.pack("<q", json.load(f)["step"]))
        return out
    return {name: t for name, t in read_safetensors(path).items()}


def first_difference(a, b, dtype):
    size = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8, "I32": 4, "I64": 8, "U8": 1}.get(dtype, 1)
    for i in range(0, min(len(a), len(b)), size):
        if a[i:i + size] != b[i:i + size]:
            return i // size
    return min(len(a), len(b)) // size


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        a, b = collect(sys.argv[1]), collect(sys.argv[2])
    except (OSError, ValueError, KeyError) as e:
        print(f"st_compare: {e}", file=sys.stderr)
        return 2
    if not a:
        print(f"st_compare: no tensors in {sys.argv[1]}", file=sys.stderr)
        return 2
    bad = 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"  {name}: only in {'B' if name not in a else 'A'}")
            bad += 1
            continue
        (da, sa, xa), (db, sb, xb) = a[name], b[name]
        joined = len(sa) == 1 or len(sb) == 1  # a joined optimizer piece is 1-D
        if da != db or (sa != sb and not (joined and len(xa) == len(xb))):
            print(f"  {name}: {da}{list(sa)} vs {db}{list(sb)}")
            bad += 1
        elif xa != xb:
            print(f"  {name}: bytes differ from element {first_difference(xa, xb, da)}")
            bad += 1
    print(f"{len(a)} tensors compared, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
