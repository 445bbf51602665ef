"""Copy a grouped-query Llama's weights into the same Llama with one key/value
head per query head, each K/V head the one its group shares (transformers'
repeat_kv): the two models compute the same function.

    gqa_as_mha.py GQA.onnx MHA.onnx OUT.onnx HEADS KV_HEADS
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

gqa_path, mha_path, out_path, heads, kv_heads = sys.argv[1:6]
heads, kv_heads = int(heads), int(kv_heads)
gqa = {t.name: numpy_helper.to_array(t) for t in onnx.load(gqa_path).graph.initializer}
mha = onnx.load(mha_path)
for t in mha.graph.initializer:
    w = gqa[t.name]
    if t.name.endswith(("k_proj.weight", "v_proj.weight")):
        d = w.shape[1] // kv_heads
        group = heads // kv_heads
        w = np.concatenate([w[:, (h // group) * d:(h // group + 1) * d] for h in range(heads)], axis=1)
    if w.shape != tuple(t.dims):
        sys.exit(f"{t.name}: {w.shape} does not fit {tuple(t.dims)}")
    t.CopyFrom(numpy_helper.from_array(w, t.name))
onnx.save(mha, out_path)
