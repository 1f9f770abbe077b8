#!/usr/bin/python3
"""Writes tests/data/safetensors_corpus/: small malformed (bad_*) and valid (ok_*) .safetensors
files, plus expected.json: for each bad file a substring its dpft InputError must contain, for
each valid file its tensors (dtype, shape, values). Python stdlib only; independent of dpft.
Usage: /usr/bin/python3 tests/data/make_safetensors_corpus.py   (rewrites the directory)"""
import json
import os
import shutil
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors_corpus")


def st(header, data=b"", pad=True, raw_header=None):
    """8-byte little-endian header length + header JSON (space-padded to 8) + data."""
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


ONE = {"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
bad = {}   # name -> (bytes, expected error substring)
ok = {}    # name -> (bytes, {tensor: {dtype, shape, values}}, metadata)

# --- framing
bad["empty_file"] = (b"", "shorter than the 8-byte header length")
bad["truncated_length"] = (b"\x10\x00\x00", "shorter than the 8-byte header length")
bad["header_past_eof"] = (struct.pack("<Q", 1000) + b'{"a":1}', "runs past the end of the file")
bad["huge_header_length"] = (struct.pack("<Q", 2**63 + 5) + b"{}      ", "exceeds the 100000000 byte limit")
bad["header_length_over_limit"] = (struct.pack("<Q", 100_000_001) + b"{}", "exceeds the 100000000 byte limit")
bad["truncated_header"] = (st(ONE, f32(1, 2))[:20], "runs past the end of the file")
# --- JSON
bad["not_json"] = (st(None, raw_header=b"this is not json"), "header is not valid JSON")
bad["json_array"] = (st([1, 2, 3]), "header must be a JSON object, got array")
bad["json_string"] = (st("hello"), "header must be a JSON object, got string")
bad["trailing_garbage"] = (st(None, raw_header=b'{"__metadata__":{}} x'), "header is not valid JSON")
bad["nul_padding"] = (st(None, raw_header=b"{}\x00\x00\x00\x00\x00\x00", pad=False), "header is not valid JSON")
bad["invalid_utf8_name"] = (st(None, raw_header=b'{"t\xff":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}'),
                            "header is not valid JSON")
bad["empty_header"] = (struct.pack("<Q", 0), "header is not valid JSON")
bad["deep_nesting"] = (st(None, raw_header=b"[" * 5000 + b"]" * 5000), "nested deeper")
bad["long_array"] = (st({"t": {"dtype": "U8", "shape": [1] * 100, "data_offsets": [0, 1]}}, b"\x00"),
                     "more than 64 elements")
# --- duplicates (a plain JSON parse would silently keep one)
bad["duplicate_names"] = (st(None, raw_header=b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                              b'"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}') + b"\x01\x02",
                          "duplicate entry 't'")
bad["duplicate_field"] = (st(None, raw_header=b'{"t":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}') + b"\x01",
                          "entry 't': duplicate key 'dtype'")
bad["duplicate_metadata"] = (st(None, raw_header=b'{"__metadata__":{"a":"1"},"__metadata__":{"a":"2"}}'),
                             "duplicate entry '__metadata__'")
# --- metadata
bad["metadata_number_value"] = (st({"__metadata__": {"format": 1}}), "__metadata__ must map strings to strings; 'format' is number")
bad["metadata_not_object"] = (st({"__metadata__": ["pt"]}), "__metadata__ must be an object of strings, got array")
# --- entries
bad["entry_not_object"] = (st({"t": [1, 2]}), "tensor 't': entry must be an object")
bad["missing_offsets"] = (st({"t": {"dtype": "F32", "shape": [2]}}, f32(1, 2)), "tensor 't': missing field 'data_offsets'")
bad["missing_dtype"] = (st({"t": {"shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)), "tensor 't': missing field 'dtype'")
bad["unknown_field"] = (st({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "offsets": [0, 8]}}, f32(1, 2)),
                        "tensor 't': unknown field 'offsets'")
bad["unknown_dtype"] = (st({"t": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x02"),
                        "tensor 't': unknown dtype 'F8_E4M3'")
bad["lowercase_dtype"] = (st({"t": {"dtype": "float32", "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)),
                          "unknown dtype 'float32'")
bad["dtype_not_string"] = (st({"t": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)),
                           "dtype must be a string")
bad["negative_dim"] = (st({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, f32(1, 2)),
                       "shape[0] = -2 is negative")
bad["float_dim"] = (st({"t": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, f32(1, 2)),
                    "shape[0] must be a non-negative integer")
bad["shape_not_array"] = (st({"t": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}}, f32(1, 2)),
                          "shape must be an array")
bad["dim_too_large"] = (st({"t": {"dtype": "U8", "shape": [2**63], "data_offsets": [0, 8]}}, bytes(8)),
                        "shape[0] = 9223372036854775808 is too large")
bad["dim_beyond_uint64"] = (st({"t": {"dtype": "U8", "shape": [2**70], "data_offsets": [0, 8]}}, bytes(8)),
                            "shape[0] must be a non-negative integer")
bad["overflowing_shape"] = (st({"t": {"dtype": "U8", "shape": [2**32, 2**32, 2**32], "data_offsets": [0, 8]}}, bytes(8)),
                            "overflows the element count")
bad["overflowing_shape_wraps_to_zero"] = (st({"t": {"dtype": "U8", "shape": [2**32, 2**32], "data_offsets": [0, 0]}}),
                                          "overflows the element count")
bad["overflowing_bytes"] = (st({"t": {"dtype": "F64", "shape": [2**62], "data_offsets": [0, 8]}}, bytes(8)),
                            "overflows the byte count")
bad["zero_dim_with_huge_dims"] = (st({"t": {"dtype": "U8", "shape": [0, 2**40, 2**40], "data_offsets": [0, 0]}}),
                                  "overflows the element count")
# --- offsets
bad["offsets_past_end"] = (st({"t": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32(1, 2)),
                           "data_offsets [4, 12] run past the data section (8 bytes)")
bad["offsets_huge"] = (st({"t": {"dtype": "U8", "shape": [1], "data_offsets": [2**64 - 1, 2**64 - 1]}}, b"\x00"),
                       "run past the data section")
bad["offsets_reversed"] = (st({"t": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, f32(1, 2)),
                           "data_offsets [8, 0]: begin > end")
bad["offsets_three"] = (st({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}}, f32(1, 2)),
                        "data_offsets must be [begin, end]")
bad["offsets_negative"] = (st({"t": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}}, f32(1, 2)),
                           "data_offsets must be non-negative integers")
bad["offsets_not_array"] = (st({"t": {"dtype": "F32", "shape": [2], "data_offsets": "0-8"}}, f32(1, 2)),
                            "data_offsets must be [begin, end]")
bad["size_mismatch"] = (st({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32(1, 2)),
                        "data_offsets [0, 8] hold 8 bytes but F32 shape [3] needs 12")
bad["overlapping_ranges"] = (st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                 "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32(1, 2, 3)),
                             "tensors 'a' [0, 8] and 'b' [4, 12] overlap")
bad["same_range_twice"] = (st({"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]},
                               "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32(1)),
                           "overlap")
bad["bool_byte_not_0_or_1"] = (st({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}, b"\x01\x00\x02"),
                               "BOOL element 2 has byte value 2")

# --- valid files (with the values an independent reader sees)
ok["zero_length_tensors"] = (
    st({"empty": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
        "empty2d": {"dtype": "I64", "shape": [3, 0], "data_offsets": [4, 4]},
        "scalar": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}, f32(2.5)),
    {"empty": ("F32", [0], []), "empty2d": ("I64", [3, 0], []), "scalar": ("F32", [], [2.5])}, {})
ok["no_tensors"] = (st({}), {}, {})
ok["metadata_only"] = (st({"__metadata__": {"format": "pt", "note": "caf\u00e9 \u2713"}}), {},
                       {"format": "pt", "note": "caf\u00e9 \u2713"})
# Header length 13 (no padding): the F32/I64 data starts unaligned in the file.
hdr = json.dumps({"a": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
                  "b": {"dtype": "F32", "shape": [1], "data_offsets": [16, 20]}}, separators=(",", ":")).encode() + b" "
assert (8 + len(hdr)) % 8 != 0
ok["unaligned_data"] = (st(None, struct.pack("<qq", -3, 2**40) + f32(-0.125), pad=False, raw_header=hdr),
                        {"a": ("I64", [2], [-3, 2**40]), "b": ("F32", [1], [-0.125])}, {})
ok["gap_between_tensors"] = (
    st({"x": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
        "y": {"dtype": "I16", "shape": [1], "data_offsets": [4, 6]}}, b"\x07\x08\xee\xee" + struct.pack("<h", -300)),
    {"x": ("U8", [2], [7, 8]), "y": ("I16", [1], [-300])}, {})
ok["bool_and_int8"] = (
    st({"m": {"dtype": "BOOL", "shape": [2, 2], "data_offsets": [0, 4]},
        "q": {"dtype": "I8", "shape": [3], "data_offsets": [4, 7]}}, b"\x01\x00\x00\x01" + struct.pack("<3b", -128, 0, 127)),
    {"m": ("BOOL", [2, 2], [1, 0, 0, 1]), "q": ("I8", [3], [-128, 0, 127])}, {})

if __name__ == "__main__":
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    expected = {}
    for name, (data, msg) in sorted(bad.items()):
        fn = "bad_%s.safetensors" % name
        open(os.path.join(OUT, fn), "wb").write(data)
        expected[fn] = {"error": msg}
    for name, (data, tensors, meta) in sorted(ok.items()):
        fn = "ok_%s.safetensors" % name
        open(os.path.join(OUT, fn), "wb").write(data)
        expected[fn] = {"tensors": {k: {"dtype": d, "shape": s, "values": v} for k, (d, s, v) in tensors.items()},
                        "metadata": meta}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    print("wrote %d files to %s" % (len(expected), OUT))
