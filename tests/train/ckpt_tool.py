#!/usr/bin/env python3
"""Makes damaged bagualu checkpoints for the checkpoint tests (Python 3 standard library only).

A damaged-but-consistent checkpoint (a tensor missing, a wrong shape or dtype) must carry
checksums that match, or the loader would stop at the checksum and the test would not reach
the check it is meant to exercise; so this tool rewrites the safetensors file and then
recomputes the XXH64 sums in trainer.json, and trainer.json's own sum (the last key,
"trainer_json_xxh64", computed with its 16 hex digits written as '0').

  ckpt_tool.py selftest DIR                  recomputes every file's XXH64 and compares them
                                             with trainer.json (proves this XXH64 is right)
  ckpt_tool.py drop DIR FILE TENSOR          remove a tensor
  ckpt_tool.py reshape DIR FILE TENSOR A,B   give a tensor another shape (same element count)
  ckpt_tool.py dtype DIR FILE TENSOR DTYPE   relabel a tensor's dtype (same byte size: I32, U32)
  ckpt_tool.py add DIR FILE TENSOR           add an extra F32 tensor of shape [1]
  ckpt_tool.py flip PATH OFFSET              flip the lowest bit of one byte (OFFSET < 0: from the end)
  ckpt_tool.py flip-header PATH              flip a bit in the first tensor name of the JSON header
  ckpt_tool.py truncate PATH BYTES           drop the last BYTES bytes
  ckpt_tool.py unindex DIR model|optimizer NAME
                                             remove a tensor from model.safetensors.index.json,
                                             or its pieces (NAME "step": the AdamW step) from
                                             optimizer.index.json, and reseal the checksums
  ckpt_tool.py setjson DIR KEY VALUE         set a top-level number of trainer.json (VALUE as
                                             JSON text) and reseal its checksum
FILE is a safetensors file of the step directory: model-00001-of-00001.safetensors (format 2,
one file per rank) or model.safetensors (format 1).
"""
import json
import re
import struct
import sys

M = (1 << 64) - 1
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
SELF_KEY = '"trainer_json_xxh64"'


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M, 31) * P1) & M


def xxh64(data, seed=0):
    """XXH64 as in xxhash.h (the reference algorithm, spelled out)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed & M, (seed - P1) & M]
        stripes = n // 32
        lanes = struct.unpack_from("<%dQ" % (stripes * 4), data)
        v1, v2, v3, v4 = v
        for j in range(0, stripes * 4, 4):
            v1 = _round(v1, lanes[j])
            v2 = _round(v2, lanes[j + 1])
            v3 = _round(v3, lanes[j + 2])
            v4 = _round(v4, lanes[j + 3])
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & M
        for x in (v1, v2, v3, v4):
            h = ((h ^ _round(0, x)) * P1 + P4) & M
        i = stripes * 32
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * P1 + P4) & M
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & M
        h = (_rotl(h, 23) * P2 + P3) & M
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M
        h = (_rotl(h, 11) * P1) & M
        i += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    h ^= h >> 32
    return h


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack_from("<Q", raw, 0)[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    # name -> (dtype, shape, bytes), in storage order
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    out = [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in tensors]
    return meta, out


def write_st(path, meta, tensors):
    header, off, blobs = {}, 0, []
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def fix_sums(ckpt):
    """Records every file's XXH64 in trainer.json, then trainer.json's own."""
    path = ckpt + "/trainer.json"
    text = open(path, "rb").read().decode()
    for name in json.loads(text)["checksums_xxh64"]:
        key = '"%s":' % name
        at = text.index(key, text.index('"checksums_xxh64"'))
        q = text.index('"', at + len(key)) + 1
        text = text[:q] + "%016x" % xxh64(open(ckpt + "/" + name, "rb").read()) + text[q + 16:]
    at = text.rindex(SELF_KEY)
    q = text.index('"', at + len(SELF_KEY)) + 1
    text = text[:q] + "0" * 16 + text[q + 16:]
    text = text[:q] + "%016x" % xxh64(text.encode()) + text[q + 16:]
    open(path, "wb").write(text.encode())


def recorded_sum(ckpt, name):
    return json.load(open(ckpt + "/trainer.json"))["checksums_xxh64"][name]


def main(argv):
    cmd = argv[1]
    if cmd == "selftest":
        ckpt = argv[2]
        for name in json.load(open(ckpt + "/trainer.json"))["checksums_xxh64"]:
            got = "%016x" % xxh64(open(ckpt + "/" + name, "rb").read())
            if got != recorded_sum(ckpt, name):
                print("xxh64 of %s: %s, trainer.json has %s" % (name, got, recorded_sum(ckpt, name)))
                return 1
        text = open(ckpt + "/trainer.json", "rb").read().decode()
        at = text.rindex(SELF_KEY)
        q = text.index('"', at + len(SELF_KEY)) + 1
        want = text[q:q + 16]
        if "%016x" % xxh64((text[:q] + "0" * 16 + text[q + 16:]).encode()) != want:
            print("trainer.json self checksum does not match")
            return 1
        return 0
    if cmd in ("drop", "reshape", "dtype", "add"):
        ckpt, fname, tname = argv[2], argv[3], argv[4]
        path = ckpt + "/" + fname
        meta, tensors = read_st(path)
        names = [t[0] for t in tensors]
        if cmd != "add" and tname not in names:
            print("no tensor %s in %s" % (tname, path))
            return 1
        if cmd == "drop":
            tensors = [t for t in tensors if t[0] != tname]
        elif cmd == "reshape":
            shape = [int(x) for x in argv[5].split(",")]
            tensors = [(n, d, shape if n == tname else s, b) for n, d, s, b in tensors]
        elif cmd == "dtype":
            tensors = [(n, argv[5] if n == tname else d, s, b) for n, d, s, b in tensors]
        else:
            tensors.append((tname, "F32", [1], struct.pack("<f", 1.0)))
        write_st(path, meta, tensors)
        fix_sums(ckpt)
        return 0
    if cmd == "unindex":
        ckpt, kind, name = argv[2], argv[3], argv[4]
        path = ckpt + ("/model.safetensors.index.json" if kind == "model" else "/optimizer.index.json")
        j = json.load(open(path))
        if kind == "model":
            del j["weight_map"][name]
        elif name == "step":
            del j["step"]
        else:
            j["pieces"] = [p for p in j["pieces"] if p["tensor"] != name]
        open(path, "w").write(json.dumps(j, indent=1) + "\n")
        fix_sums(ckpt)
        return 0
    if cmd == "flip":
        path, off = argv[2], int(argv[3])
        raw = bytearray(open(path, "rb").read())
        raw[off] ^= 1
        open(path, "wb").write(bytes(raw))
        return 0
    if cmd == "flip-header":
        path = argv[2]
        raw = bytearray(open(path, "rb").read())
        n = struct.unpack_from("<Q", raw, 0)[0]
        header = json.loads(raw[8:8 + n])
        first = next(k for k in header if k != "__metadata__")
        at = raw.index(b'"' + first.encode() + b'"', 8) + 1
        raw[at] ^= 1
        open(path, "wb").write(bytes(raw))
        return 0
    if cmd == "setjson":
        ckpt, key, value = argv[2], argv[3], argv[4]
        path = ckpt + "/trainer.json"
        text = open(path).read()
        text, n = re.subn(r'(\n\t"%s":\s*)[^,\n]+' % re.escape(key), lambda m: m.group(1) + value, text, count=1)
        if n != 1:
            print("no top-level key %s in %s" % (key, path))
            return 1
        open(path, "w").write(text)
        fix_sums(ckpt)
        return 0
    if cmd == "truncate":
        path, cut = argv[2], int(argv[3])
        raw = open(path, "rb").read()
        open(path, "wb").write(raw[:len(raw) - cut])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
