#!/usr/bin/env python3
"""Re-save a checkpoint directory's model.safetensors as PyTorch weight files, as checkpoints
saved without safetensors come: torch.save(state_dict) to pytorch_model.bin, or N shards
pytorch_model-0000i-of-0000N.bin with pytorch_model.bin.index.json ({"metadata": {...},
"weight_map": {name: shard}}). Floating tensors are cast to DTYPE (float32, float16, bfloat16).
config.json is copied. For tests/test_model_parity.cpp (Debian python3-torch).

Usage: /usr/bin/python3 to_pytorch_bin.py SRC_DIR DST_DIR DTYPE SHARDS
"""
import collections
import json
import os
import shutil
import sys

import torch

from ref_forward import read_safetensors


def main():
    src, dst, dtype, shards = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3]), int(sys.argv[4])
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), os.path.join(dst, "config.json"))
    tensors = read_safetensors(os.path.join(src, "model.safetensors"), keep_dtype=True)
    state = collections.OrderedDict(
        (k, v.to(dtype) if v.is_floating_point() else v) for k, v in sorted(tensors.items()))
    if shards == 1:
        torch.save(state, os.path.join(dst, "pytorch_model.bin"))
        return
    names = list(state)
    weight_map = {}
    for i in range(shards):
        part = collections.OrderedDict((k, state[k]) for k in names[i::shards])
        fname = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        torch.save(part, os.path.join(dst, fname))
        weight_map.update({k: fname for k in part})
    size = sum(v.numel() * v.element_size() for v in state.values())
    with open(os.path.join(dst, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": size}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
