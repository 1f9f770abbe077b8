#!/usr/bin/python3
"""Fixtures for dpft's PyTorch zip reader, made with the Python stdlib only (no torch):

1. roberta_lora_mnli_tensors.json: what the real torch.save checkpoint
   ../shared/data/lora_adapter_roberta_mnli/roberta_base_lora_mnli.bin really contains, read
   with zipfile + Python's own pickle machine (find_class returns inert stubs; nothing from
   the file is imported or called): per tensor its name, dtype, shape, stride, storage offset,
   storage key, device, first values and float64 sum.
2. torch_zip_corpus/: small torch.save-format archives written here (pickle protocol 2 through
   stand-in `torch` modules, records stored uncompressed under archive/), valid (ok_*) and
   malformed (bad_*), with expected.json: tensors (dtype, shape, values) or an error substring.

Usage: /usr/bin/python3 tests/data/make_torch_zip_fixtures.py   (skips 1. if shared data is absent)
"""
import collections
import io
import json
import math
import os
import pickle
import shutil
import struct
import sys
import types
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROBERTA = os.path.join(HERE, "..", "..", "..", "shared", "data", "lora_adapter_roberta_mnli",
                       "roberta_base_lora_mnli.bin")
STORAGES = {"DoubleStorage": ("F64", "<d", 8), "FloatStorage": ("F32", "<f", 4), "HalfStorage": ("F16", "<e", 2),
            "BFloat16Storage": ("BF16", None, 2), "LongStorage": ("I64", "<q", 8), "IntStorage": ("I32", "<i", 4),
            "ShortStorage": ("I16", "<h", 2), "CharStorage": ("I8", "<b", 1), "ByteStorage": ("U8", "<B", 1),
            "BoolStorage": ("BOOL", "<B", 1)}


# ------------------------------------------------------------------------------------------
# Reading (independent of dpft): Python's pickle VM with inert stand-ins.
class StorageRef:
    def __init__(self, type_name, key, location, numel):
        self.type_name, self.key, self.location, self.numel = type_name, key, location, numel


class TensorRef:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)


class StorageType:
    def __init__(self, name):
        self.name = name


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in STORAGES:
            return StorageType(name)
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, *rest: TensorRef(storage, offset, size, stride)
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return lambda tensor, *rest: tensor
        raise pickle.UnpicklingError("refusing global %s.%s" % (module, name))

    def persistent_load(self, pid):
        kind, stype, key, location, numel = pid
        assert kind == "storage"
        return StorageRef(stype.name, key, location, numel)


def decode(type_name, raw):
    dtype, fmt, size = STORAGES[type_name]
    out = []
    for i in range(0, len(raw), size):
        if dtype == "BF16":
            out.append(struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0])
        else:
            out.append(struct.unpack(fmt, raw[i:i + size])[0])
    return out


def elements(t, storage_values):
    """The tensor's elements in row-major order, walking (offset, size, stride) by hand."""
    out = []
    n = math.prod(t.size)
    for flat in range(n):
        idx, rem = t.offset, flat
        for dim in reversed(range(len(t.size))):
            idx += (rem % t.size[dim]) * t.stride[dim]
            rem //= t.size[dim]
        out.append(storage_values[idx])
    return out


def read_checkpoint(path):
    z = zipfile.ZipFile(path)
    pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
    assert len(pkl) == 1
    prefix = pkl[0][: -len("data.pkl")]
    root = SafeUnpickler(io.BytesIO(z.read(pkl[0]))).load()
    out = []
    for name, t in root.items():
        if not isinstance(t, TensorRef):
            continue
        vals = elements(t, decode(t.storage.type_name, z.read(prefix + "data/" + t.storage.key)))
        out.append({"name": name, "dtype": STORAGES[t.storage.type_name][0], "shape": list(t.size),
                    "stride": list(t.stride), "storage_offset": t.offset, "storage_key": t.storage.key,
                    "device": t.storage.location, "numel": len(vals), "first": vals[:4],
                    "sum": math.fsum(vals)})
    return out


# ------------------------------------------------------------------------------------------
# Writing torch.save-format archives: stand-in modules so pickle emits torch's globals.
def install_fake_torch():
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    torch._utils = utils

    def fn(mod, name):
        f = lambda *a: None  # noqa: E731 (never called: only pickled by reference)
        f.__module__, f.__qualname__, f.__name__ = mod.__name__, name, name
        setattr(mod, name, f)
        return f

    for n in ("_rebuild_tensor_v2", "_rebuild_parameter"):
        fn(utils, n)
    for n in list(STORAGES) + ["ComplexFloatStorage"]:
        setattr(torch, n, type(n, (), {"__module__": "torch"}))
    posix = sys.modules["posix"] if "posix" in sys.modules else None
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    return torch, utils, posix


TORCH, UTILS, POSIX = install_fake_torch()


class Storage:
    def __init__(self, key, type_name, raw, numel=None, location="cpu"):
        self.key, self.type_name, self.raw, self.location = key, type_name, raw, location
        self.numel = numel if numel is not None else len(raw) // STORAGES.get(type_name, ("", "", 8))[2]


class T:
    """Pickles as torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())."""

    def __init__(self, storage, offset, size, stride, parameter=False):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())
        self.parameter = parameter

    def __reduce__(self):
        if self.parameter:
            inner = T(*self.args[:4])
            return (UTILS._rebuild_parameter, (inner, True, collections.OrderedDict()))
        return (UTILS._rebuild_tensor_v2, self.args)


class Call:
    """Pickles as GLOBAL module.name + REDUCE(args) (for the hostile-global case)."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", getattr(TORCH, obj.type_name), obj.key, obj.location, obj.numel)
        return None


def contiguous(shape):
    stride, s = [], 1
    for d in reversed(shape):
        stride.insert(0, s)
        s *= d
    return stride


def pickle_bytes(obj):
    buf = io.BytesIO()
    TorchPickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def zip_bytes(records, zip64=False):
    """Stored (uncompressed) zip by hand: local headers, central directory, end record. With
    zip64, sizes/offsets in the central directory and end record are 0xFFFFFFFF / 0xFFFF and the
    real values sit in zip64 extra fields and a zip64 end record (as large torch.save files)."""
    out, central = b"", b""
    for name, data in records:
        nb = name.encode()
        crc = zlib.crc32(data)
        off = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(data), len(data), len(nb), 0) + nb + data
        if zip64:
            extra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
            sizes = (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
        else:
            extra, sizes = b"", (len(data), len(data), off)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, sizes[0], sizes[1],
                               len(nb), len(extra), 0, 0, 0, 0, sizes[2]) + nb + extra
    cd_off = len(out)
    out += central
    if zip64:
        z64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(records), len(records), len(central), cd_off)
        out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(records), len(records), len(central), cd_off, 0)
    return out


def archive(root, storages, prefix="archive/", zip64=False, extra_records=()):
    recs = [(prefix + "data.pkl", pickle_bytes(root))]
    recs += [(prefix + "data/" + s.key, s.raw) for s in storages]
    recs += [(prefix + "version", b"3\n")] + list(extra_records)
    return zip_bytes(recs, zip64)


def pack(fmt, vals):
    return struct.pack("<%d%s" % (len(vals), fmt), *vals)


def state_dict_case():
    """A state dict with every dtype, shared storage, a strided view, a Parameter, nested dicts
    and non-tensor values. Returns (root, storages, expected tensors, expected skipped)."""
    s_f32 = Storage("0", "FloatStorage", pack("f", [0.5 * i for i in range(12)]))
    s_f16 = Storage("1", "HalfStorage", pack("e", [1.0, -2.0, 65504.0, 0.000061035]))
    s_bf16 = Storage("2", "BFloat16Storage", pack("H", [0x3F80, 0xC040, 0x7F80]))  # 1, -3, inf
    s_f64 = Storage("3", "DoubleStorage", pack("d", [math.pi, -1e300]))
    s_i64 = Storage("4", "LongStorage", pack("q", [-(2 ** 63), 2 ** 62, 7]))
    s_i32 = Storage("5", "IntStorage", pack("i", [-5, 2 ** 31 - 1]))
    s_i16 = Storage("6", "ShortStorage", pack("h", [-32768, 12]))
    s_i8 = Storage("7", "CharStorage", pack("b", [-128, 127, 0]))
    s_u8 = Storage("8", "ByteStorage", pack("B", [255, 1]))
    s_bool = Storage("9", "BoolStorage", pack("B", [1, 0, 1]))
    root = collections.OrderedDict()
    root["encoder.weight"] = T(s_f32, 0, (3, 4), (4, 1), parameter=True)
    root["encoder.weight_t"] = T(s_f32, 0, (4, 3), (1, 4))          # transposed view, same storage
    root["encoder.slice"] = T(s_f32, 5, (2,), (3,))                  # offset + stride
    root["half"] = T(s_f16, 0, (2, 2), (2, 1))
    root["bf16"] = T(s_bf16, 0, (3,), (1,))
    root["f64"] = T(s_f64, 0, (2,), (1,))
    root["i64"] = T(s_i64, 0, (3,), (1,))
    root["i32"] = T(s_i32, 0, (1, 2), (2, 1))
    root["i16"] = T(s_i16, 1, (), ())                                # 0-dim scalar
    root["i8"] = T(s_i8, 0, (3,), (1,))
    root["u8"] = T(s_u8, 0, (2,), (1,))
    root["mask"] = T(s_bool, 0, (3,), (1,))
    root["empty"] = T(s_f32, 12, (0, 5), (5, 1))
    root["head"] = {"dense": {"bias": T(s_f32, 10, (2,), (1,))}, "epoch": 3}
    root["step"] = 1200
    root["lr"] = 0.001
    root["name"] = "roberta"
    # As nn.Module.state_dict(): an attribute on the OrderedDict, pickled as BUILD after SETITEMS.
    root._metadata = collections.OrderedDict([("", {"version": 1}), ("encoder", {"version": 1})])
    storages = [s_f32, s_f16, s_bf16, s_f64, s_i64, s_i32, s_i16, s_i8, s_u8, s_bool]
    expected = collections.OrderedDict()

    def add(name, t):
        st, off, size, stride = t.args[:4]
        vals = elements(TensorRef(None, off, size, stride), decode(st.type_name, st.raw))
        expected[name] = {"dtype": STORAGES[st.type_name][0], "shape": list(size),
                          "values": [v if (not isinstance(v, float) or math.isfinite(v)) else str(v) for v in vals]}

    for k, v in root.items():
        if isinstance(v, T):
            add(k, v)
    add("head.dense.bias", root["head"]["dense"]["bias"])
    skipped = {"head.epoch": "int", "step": "int", "lr": "float", "name": "str"}
    return root, storages, expected, skipped


def write_corpus():
    out = os.path.join(HERE, "torch_zip_corpus")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    expected = {}
    root, storages, tensors, skipped = state_dict_case()
    good = archive(root, storages)
    # Python's zipfile and pickle (with inert stand-ins) must read what we wrote.
    chk = os.path.join(out, "ok_state_dict.pt")
    open(chk, "wb").write(good)
    assert zipfile.ZipFile(chk).testzip() is None

    def ok(name, data, tensors=tensors, skipped=skipped):
        open(os.path.join(out, name), "wb").write(data)
        expected[name] = {"tensors": tensors, "skipped": skipped}

    def bad(name, data, msg):
        open(os.path.join(out, name), "wb").write(data)
        expected[name] = {"error": msg}

    ok("ok_state_dict.pt", good)
    ok("ok_zip64.pt", archive(root, storages, zip64=True))
    ok("ok_other_prefix.pt", archive(root, storages, prefix="my_model/"))
    ok("ok_byteorder_little.pt", archive(root, storages, extra_records=[("archive/byteorder", b"little")]))
    # A hostile pickle: REDUCE of posix.system must be recorded, never called.
    s = Storage("0", "FloatStorage", pack("f", [1.0, 2.0]))
    hostile = collections.OrderedDict([("w", T(s, 0, (2,), (1,))), ("evil", Call(POSIX.system, ("touch /tmp/dpft_pwned",)))])
    ok("ok_hostile_global_not_called.pt", archive(hostile, [s]),
       tensors={"w": {"dtype": "F32", "shape": [2], "values": [1.0, 2.0]}}, skipped={"evil": "posix.system"})

    bad("bad_empty.pt", b"", "not a zip archive (too short)")
    bad("bad_not_zip.pt", b"PK\x03\x04" + b"x" * 100, "no end of central directory")
    bad("bad_truncated.pt", good[: len(good) // 2], "no end of central directory")
    bad("bad_no_data_pkl.pt", zip_bytes([("archive/version", b"3\n")]), "not a torch.save checkpoint")
    comp = io.BytesIO()
    with zipfile.ZipFile(comp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("archive/data.pkl", date_time=(1980, 1, 1, 0, 0, 0)), pickle_bytes(root),
                   compress_type=zipfile.ZIP_DEFLATED)  # fixed time: the file is reproducible
    bad("bad_compressed.pt", comp.getvalue(), "is compressed (method 8)")
    p = bytearray(good)
    i = p.index(b"encoder.weight")
    p[i] ^= 0x20  # flips 'e' to 'E' in data.pkl: CRC mismatch
    bad("bad_pickle_crc.pt", bytes(p), "data.pkl fails its CRC-32 check")
    p = bytearray(good)
    i = p.index(b"archive/data/0") + len("archive/data/0")
    p[i + 3] ^= 0x01  # a byte of storage 0: fails when loaded
    bad("bad_storage_crc.pt", bytes(p), "fails its CRC-32 check")
    s = Storage("0", "FloatStorage", pack("f", [1.0, 2.0]))
    one = lambda t: collections.OrderedDict([("w", t)])  # noqa: E731
    bad("bad_missing_record.pt", archive(one(T(s, 0, (2,), (1,))), []), "storage record data/0 is missing")
    bad("bad_record_size.pt", archive(one(T(Storage("0", "FloatStorage", pack("f", [1.0, 2.0]), numel=3), 0, (2,), (1,))),
                                      [s]), "has 8 bytes, but 3 x F32 elements need 12")
    bad("bad_view_out_of_bounds.pt", archive(one(T(s, 1, (2,), (1,))), [s]), "reaches element 2 of storage 0")
    s4 = Storage("0", "FloatStorage", pack("f", [1.0, 2.0, 3.0, 4.0]))
    bad("bad_overlapping_view.pt", archive(one(T(s4, 0, (3, 2), (0, 1))), [s4]), "overlapping views are not supported")
    bad("bad_stride_out_of_bounds.pt", archive(one(T(s, 0, (2, 2), (1, 1))), [s]), "reaches element 2")
    bad("bad_size_stride_rank.pt", archive(one(T(s, 0, (2,), (1, 1))), [s]), "size and stride differ")
    bad("bad_complex_storage.pt", archive(one(T(Storage("0", "ComplexFloatStorage", b"\0" * 8, numel=1), 0, (1,), (1,))),
                                          [Storage("0", "ComplexFloatStorage", b"\0" * 8, numel=1)]),
        "unsupported storage type torch.ComplexFloatStorage")
    bad("bad_root_list.pt", archive([T(s, 0, (2,), (1,))], [s]), "holds a list, not a dict of tensors")
    bad("bad_byteorder_big.pt", archive(one(T(s, 0, (2,), (1,))), [s], extra_records=[("archive/byteorder", b"big")]),
        "byteorder 'big' is not supported")
    bool_s = Storage("0", "BoolStorage", b"\x01\x02")
    bad("bad_bool_byte.pt", archive(one(T(bool_s, 0, (2,), (1,))), [bool_s]), "bool byte 1 is 2")
    # Raw pickles: text-protocol opcode, truncated pickle, stack underflow, unknown memo.
    raw = lambda pkl: zip_bytes([("archive/data.pkl", pkl), ("archive/version", b"3\n")])  # noqa: E731
    bad("bad_opcode.pt", raw(b"\x80\x02I12\n."), "unsupported pickle opcode 0x49")
    bad("bad_pickle_truncated.pt", raw(pickle_bytes(root)[:40]), "pickle ends early")
    bad("bad_stack_underflow.pt", raw(b"\x80\x02(R."), "stack underflow")
    bad("bad_memo.pt", raw(b"\x80\x02h\x05."), "memo entry 5 was never stored")
    bad("bad_long_int.pt", raw(b"\x80\x02\x8a\x09" + b"\x01" * 9 + b"."), "integer of 9 bytes")
    bad("bad_self_dict.pt", raw(b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s."), "a dict contains itself")
    bad("bad_duplicate_name.pt", archive(collections.OrderedDict([("a.b", T(s, 0, (2,), (1,))),
                                                                   ("a", {"b": T(s, 0, (2,), (1,))})]), [s]),
        "tensor name 'a.b' appears twice")
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    # The independent reader agrees with what we meant to write.
    for name in ("ok_state_dict.pt", "ok_zip64.pt"):
        got = {t["name"]: t for t in read_checkpoint(os.path.join(out, name))}
        for k, v in tensors.items():
            if k.startswith("head."):
                continue  # nested: read_checkpoint lists top-level tensors only
            assert got[k]["shape"] == v["shape"] and got[k]["dtype"] == v["dtype"], k
    print("wrote %d files to %s" % (len(expected), out))


def write_roberta():
    if not os.path.exists(ROBERTA):
        print("skipped roberta fixture: %s absent" % ROBERTA)
        return
    tensors = read_checkpoint(ROBERTA)
    path = os.path.join(HERE, "roberta_lora_mnli_tensors.json")
    with open(path, "w") as f:
        json.dump({"source": "shared/data/lora_adapter_roberta_mnli/roberta_base_lora_mnli.bin",
                   "tensors": tensors}, f, indent=1)
        f.write("\n")
    print("wrote %d tensors to %s" % (len(tensors), path))


if __name__ == "__main__":
    write_corpus()
    write_roberta()
