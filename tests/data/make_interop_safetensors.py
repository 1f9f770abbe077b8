#!/usr/bin/python3
"""Independent safetensors writer/reader (Python stdlib: struct + json) for dpft's interop tests.

  make_interop_safetensors.py            writes tests/data/interop_python.safetensors and
                                         interop_python.json (the values, floats also as raw bits)
  make_interop_safetensors.py --read F   prints F's tensors as JSON {name: {dtype, shape, bits}}
                                         (bits: each element's raw little-endian bytes as an
                                         unsigned integer), __metadata__ under "__metadata__"

The written file deliberately differs from dpft's own writer: entries in the header in an
order that is neither sorted nor by dtype, 2-space indented JSON, and no 8-byte padding."""
import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
UNSIGNED = {8: "<Q", 4: "<I", 2: "<H", 1: "<B"}


def bf16_bits(x):
    """BF16 = the upper 16 bits of the float32 (values below are exactly representable)."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    assert b & 0xFFFF == 0, x
    return b >> 16


def decode(dtype, b):
    """The element value, decoded here independently (nan/inf as strings for JSON)."""
    if dtype == "F16":
        v = struct.unpack("<e", struct.pack("<H", b))[0]
    elif dtype == "BF16":
        v = struct.unpack("<f", struct.pack("<I", b << 16))[0]
    elif dtype == "F32":
        v = struct.unpack("<f", struct.pack("<I", b))[0]
    elif dtype == "F64":
        v = struct.unpack("<d", struct.pack("<Q", b))[0]
    else:
        fmt = {"I64": "<q", "I32": "<i", "I16": "<h", "I8": "<b"}.get(dtype)
        return struct.unpack(fmt, struct.pack(UNSIGNED[SIZES[dtype]], b))[0] if fmt else b
    return v if math.isfinite(v) else str(v)


def build():
    # name -> (dtype, shape, raw little-endian bytes)
    t = {}

    def add(name, dtype, shape, fmt, vals):
        t[name] = (dtype, shape, struct.pack("<" + fmt * len(vals), *vals))

    add("f64", "F64", [2, 2], "d", [1.0, -2.5, 1e-300, 12345.678901234567])
    add("f32", "F32", [3], "f", [0.1, -3.0, 65504.0])
    # F16 given as bits: 1.0, -2.0, 65504 (max), smallest subnormal, +inf, a NaN with payload
    f16 = [0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x7E01]
    t["f16"] = ("F16", [2, 3], struct.pack("<6H", *f16))
    bf = [bf16_bits(v) for v in (1.0, -0.5, 2.0 ** 127, 2.0 ** -133)] + [0x7F80, 0xFFC1]  # +inf, -NaN
    t["bf16"] = ("BF16", [6], struct.pack("<6H", *bf))
    add("i64", "I64", [2], "q", [-(2 ** 63), 2 ** 63 - 1])
    add("i32", "I32", [1, 2], "i", [-(2 ** 31), 7])
    add("i16", "I16", [2], "h", [-32768, 32767])
    add("i8", "I8", [2], "b", [-128, 127])
    add("u8", "U8", [2], "B", [0, 255])
    add("bool", "BOOL", [3], "B", [1, 0, 1])
    add("scalar", "F32", [], "f", [-7.25])
    t["empty"] = ("I32", [0, 4], b"")
    return t


def write():
    t = build()
    order = ["u8", "f16", "scalar", "i64", "bool", "f64", "empty", "i8", "bf16", "i32", "f32", "i16"]
    assert sorted(order) == sorted(t)
    header, data = {"__metadata__": {"writer": "make_interop_safetensors.py", "format": "pt"}}, b""
    for name in order:
        dtype, shape, raw = t[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, indent=2).encode()
    with open(os.path.join(HERE, "interop_python.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    expected = {}
    for name, (dtype, shape, raw) in t.items():
        n = SIZES[dtype]
        bits = [struct.unpack(UNSIGNED[n], raw[i:i + n])[0] for i in range(0, len(raw), n)]
        expected[name] = {"dtype": dtype, "shape": shape, "bits": bits, "values": [decode(dtype, x) for x in bits]}
    expected["__metadata__"] = header["__metadata__"]
    with open(os.path.join(HERE, "interop_python.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


def read(path):
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {"__metadata__": header.pop("__metadata__", {})}
    for name, e in header.items():
        size = SIZES[e["dtype"]]
        lo, hi = e["data_offsets"]
        assert hi - lo == size * math.prod(e["shape"]), name
        raw = data[lo:hi]
        out[name] = {"dtype": e["dtype"], "shape": e["shape"],
                     "bits": [struct.unpack(UNSIGNED[size], raw[i:i + size])[0] for i in range(0, len(raw), size)]}
    out["__header_length__"] = n
    json.dump(out, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--read":
        read(sys.argv[2])
    else:
        write()
