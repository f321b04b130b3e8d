#!/usr/bin/env python3
"""An independent safetensors reader and writer, written from the format description only
(standard library, no numpy), that test_safetensors.c runs to cross-check the C code.

  test_safetensors_ref.py read FILE    validates FILE strictly and prints its contents as JSON:
                                       {"metadata": {...}, "tensors": [{"name", "dtype",
                                       "shape", "values"}...]} in data order; float values
                                       decoded with struct ('e' for F16), BF16 by widening.
  test_safetensors_ref.py write FILE   writes a fixed file (see WRITE_TENSORS) for C to read.
Exit status 1 with a message on any format violation.
"""
import json
import math
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
         "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
FORMATS = {"BOOL": "?", "U8": "B", "I8": "b", "I16": "h", "U16": "H", "F16": "e",
           "I32": "i", "U32": "I", "F32": "f", "I64": "q", "U64": "Q", "F64": "d"}


def fail(msg):
    print("reference reader: " + msg, file=sys.stderr)
    sys.exit(1)


def decode(dtype, raw):
    if dtype == "BF16":
        halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    n = len(raw) // SIZES[dtype]
    return list(struct.unpack("<%d%s" % (n, FORMATS[dtype]), raw))


def read(path):
    blob = open(path, "rb").read()
    if len(blob) < 8:
        fail("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail("header length past end of file")
    header_bytes = blob[8:8 + n]
    # What the reference writer produces: 8-byte aligned data, space padding.
    if (8 + n) % 8 != 0:
        fail("data section not 8-byte aligned (header length %d)" % n)
    text = header_bytes.decode("utf-8")
    if text.rstrip(" ") != text.rstrip(" \t\r\n"):
        fail("header padded with something other than spaces")
    pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        fail("duplicate keys")
    header = dict(pairs)
    meta = dict(header.pop("__metadata__", []))
    data = blob[8 + n:]
    entries = []
    for name, info in header.items():
        info = dict(info)
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in SIZES:
            fail("unknown dtype " + dtype)
        count = 1
        for d in shape:
            if not isinstance(d, int) or d < 0:
                fail("bad shape")
            count *= d
        if end - begin != count * SIZES[dtype]:
            fail("tensor %s: offsets disagree with shape" % name)
        entries.append((begin, end, name, dtype, shape))
    entries.sort()
    pos = 0
    out = []
    for begin, end, name, dtype, shape in entries:
        if begin != pos:
            fail("tensor %s: not packed (begins %d, expected %d)" % (name, begin, pos))
        pos = end
        # JSON has no infinities or NaN: those go out as the strings "inf", "-inf", "nan".
        values = [v if not isinstance(v, float) or math.isfinite(v) else str(v)
                  for v in decode(dtype, data[begin:end])]
        out.append({"name": name, "dtype": dtype, "shape": shape, "values": values})
    if pos != len(data):
        fail("data section has %d bytes, tensors cover %d" % (len(data), pos))
    print(json.dumps({"metadata": meta, "tensors": out}))


# name, dtype, shape, values — packed in this order; __metadata__ written last and the JSON
# pretty-printed, so the C reader sees a header layout unlike its own writer's.
WRITE_TENSORS = [
    ("model.w", "F32", [2, 2], [1.0, -2.5, 3.0e38, 1.0e-45]),
    ("half", "F16", [3], [1.0, 65504.0, -6.103515625e-05]),
    ("brain", "BF16", [2], [0x3F80, 0xC040]),  # raw bits: 1.0, -3.0
    ("step", "I64", [], [123456789012]),
    ("bytes", "U8", [5], [0, 1, 2, 254, 255]),
    ("empty", "F32", [0, 4], []),
]


def write(path):
    header, data = {}, b""
    for name, dtype, shape, values in WRITE_TENSORS:
        fmt = "H" if dtype == "BF16" else FORMATS[dtype]
        raw = struct.pack("<%d%s" % (len(values), fmt), *values)
        header[name] = {"data_offsets": [len(data), len(data) + len(raw)], "shape": shape,
                        "dtype": dtype}
        data += raw
    header["__metadata__"] = {"source": "python", "unicode": "\u00fcnic\u00f8de \u2713"}
    text = json.dumps(header, indent=1, ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "write"):
        fail("usage: test_safetensors_ref.py read|write FILE")
    (read if sys.argv[1] == "read" else write)(sys.argv[2])
