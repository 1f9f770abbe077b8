# Rewrites the first F32 tensor of a safetensors file as I16 (twice the elements, same bytes).
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = next(k for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F32")
h[name]["dtype"] = "I16"
h[name]["shape"][-1] *= 2
head = json.dumps(h).encode()
head += b" " * ((8 - len(head) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(head)) + head + b[8 + n:])
