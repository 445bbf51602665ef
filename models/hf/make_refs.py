#!/usr/bin/env python3
"""Writes models/hf/manifest.json and one <name>.npz per model (inputs `in:*`
and onnxruntime's outputs `out:*`) so the zoo check (test/zoo/zoo_check.py
--zoo models/hf) runs every file here through `hetplan run` on 1 and 3 ranks
against onnxruntime. Needs onnxruntime and numpy (pip); CI reads the files.

  python3 models/hf/make_refs.py
"""
import io, json, os, zipfile

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
B, S = 3, 8
MODELS = {
    # name: (kind, inputs)
    "gpt2": "lm", "gpt2-opset18": "lm", "llama": "lm", "llama-opset18": "lm",
    "bert": "encoder", "vit": "vision",
}


def save_npz(path, arrays):
    # Fixed dates in the zip: same inputs, same bytes.
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for k in sorted(arrays):
            buf = io.BytesIO()
            np.save(buf, arrays[k])
            info = zipfile.ZipInfo(k + ".npy", date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, buf.getvalue())


def main():
    rng = np.random.default_rng(0)
    rows = []
    for name, kind in MODELS.items():
        path = os.path.join(HERE, name + ".onnx")
        m = onnx.load(path, load_external_data=False)
        feeds, inputs = {}, {}
        for vi in m.graph.input:
            dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            shape = [B if d == "batch" else S if d == "sequence" else d for d in dims]
            if vi.name == "input_ids":
                x = rng.integers(0, 512, shape).astype(np.int64)
            elif vi.name == "attention_mask":
                x = np.ones(shape, np.int64)
                x[0, -2:] = 0  # padding in row 0
            else:
                x = rng.standard_normal(shape).astype(np.float32)
            feeds[vi.name] = x
            inputs[vi.name] = {"shape": list(x.shape), "dtype": str(x.dtype), "dims": dims}
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = sess.run(None, feeds)
        names = [o.name for o in sess.get_outputs()]
        arrays = {"in:" + k: v for k, v in feeds.items()}
        arrays.update({"out:" + k: v for k, v in zip(names, outs)})
        save_npz(os.path.join(HERE, name + ".npz"), arrays)
        dims = {"batch": B}
        if any("sequence" in i["dims"] for i in inputs.values()):
            dims["sequence"] = S
        row = {"name": "hf-" + name, "file": name + ".onnx", "ref": name + ".npz",
               "exporter": "torchscript" if "opset18" not in name else "dynamo",
               "opset": 18 if "opset18" in name else 17, "family": name.split("-")[0],
               "kind": kind, "source": "models/hf (models/export_hf.py)", "batch": B,
               "dims": dims, "inputs": inputs,
               "outputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)}
                           for k, v in zip(names, outs)}}
        if kind == "lm":
            row["labels"] = {"shape": [B, S], "dtype": "int64", "classes": 512}
        rows.append(row)
        print(name, {k: v.shape for k, v in zip(names, outs)})
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump({"models": rows}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
