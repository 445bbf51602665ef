#!/usr/bin/env python3
"""The onnx-light graphs (../shared/models/onnx-light) with seeded random
weights, so that a wrong number in a kernel shows in their outputs.

The stored graphs make every weight with ConstantOfShape(0.02): 8 of the 9
then give every class the same logit and their Softmax prints 0.001
everywhere, whatever a kernel computes. `randomize()` replaces each such
ConstantOfShape by an initializer of the same shape drawn from
numpy.random.RandomState (its stream is fixed across numpy versions), scaled
by the weight's role so that activations neither vanish nor explode through
50+ layers and the logits spread:

  Conv / Gemm weight   U(-a, a), a = sqrt(6 / fan_in) (He, for ReLU nets)
  Conv / Gemm bias     U(-0.1, 0.1)
  BatchNorm scale      U(0.5, 1.5) (also the Mul of BN + Mul + Add)
  BatchNorm bias       U(-0.2, 0.2) (also the Add of BN + Mul + Add)
  BatchNorm mean       U(-0.2, 0.2)
  BatchNorm variance   U(0.02, 1.5): positive, and small enough in places
                       that the epsilon matters

The Softmax's input (the logits) becomes a second graph output, so a check
sees what the Softmax hides when it saturates. Weights the stored graph
already holds (some first layers) stay. The input is seeded too
(`make_inputs`). Weights go to MODEL.onnx.data (external data, one file):
VGG19's 143M parameters would be 575 MB of protobuf.

`weights_digest` (sha256 of the names, shapes and bytes of every weight in
the written model) is stored beside the onnxruntime reference, so a changed
generator is reported as such, not as a kernel bug.

References: test/runtime/references/onnx-light/ holds onnxruntime's outputs
for the randomized graphs and inputs (<model>.<output>.npy) and
manifest.json (digests, versions). Written OFFLINE, where onnxruntime is
installed (CI has none):

  python3 test/runtime/onnx_light_random.py --write-references \
      ../shared/models/onnx-light test/runtime/references/onnx-light

(onnxruntime CPU provider, one thread, graph optimizations off, as
models/zoo). `compare()` is the check the tests make against them.
"""
import argparse
import glob
import hashlib
import json
import os
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCES = os.path.join(HERE, "references", "onnx-light")
# Relative max-norm error allowed against onnxruntime: float reordering in
# convolutions (blocked, Winograd) stays below ~1e-5 on these graphs; a
# dropped bias, a changed epsilon or a leaking ReLU moves the logits by
# 1e-3 or more (docs/runtime.md, "Model checks against onnxruntime").
TOLERANCE = 1e-4
CHUNK = 1 << 22  # elements drawn per call: bounds the float64 temporaries


def _seed(text):
    """A seed from a name, the same on every machine and Python."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def _uniform(rs, n, lo, hi):
    out = np.empty(n, dtype=np.float32)
    for i in range(0, n, CHUNK):
        k = min(CHUNK, n - i)
        out[i:i + k] = lo + (hi - lo) * rs.random_sample(k)
    return out


def _consumers(graph):
    use = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            use.setdefault(name, []).append((node, i))
    return use


def _role(name, shape, use, inits, random):
    """What a ConstantOfShape output feeds: (kind, fan_in, node)."""
    from onnx import numpy_helper
    uses = use.get(name, [])
    if len(uses) != 1:
        raise ValueError(f"{name}: used by {len(uses)} nodes, expected one")
    node, i = uses[0]
    attrs = {a.name: a for a in node.attribute}
    if node.op_type == "Reshape" and i == 0 and node.input[1] in inits:  # Inception v1's classifier
        target = [int(d) for d in numpy_helper.to_array(inits[node.input[1]])]
        return _role(node.output[0], target, use, inits, random)
    if node.op_type == "Unsqueeze":  # BN + Mul + Add (DenseNet, Inception v2)
        nxt = use.get(node.output[0], [])
        if len(nxt) == 1 and nxt[0][0].op_type in ("Mul", "Add"):
            return ("post_scale" if nxt[0][0].op_type == "Mul" else "bn_bias"), 0, node
    if node.op_type == "Conv":
        if i == 1:
            return "weight", int(np.prod(shape[1:])), node
        return "bias", 0, node
    if node.op_type == "Gemm":
        if i == 1:
            trans_b = "transB" in attrs and attrs["transB"].i
            return "weight", int(shape[1] if trans_b else shape[0]), node
        if i == 2:
            return "bias", 0, node
    if node.op_type == "BatchNormalization" and 1 <= i <= 4:
        kind = ["bn_scale", "bn_bias", "bn_mean", "bn_var"][i - 1]
        if kind in ("bn_scale", "bn_var") and node.input[1] in random and node.input[4] in random:
            kind += "_tiny"  # see _draw
        if kind.startswith("bn_scale") and any(n.op_type == "Sum" for n, _ in use.get(node.output[0], [])):
            kind = kind.replace("bn_scale", "bn_scale_residual")
        return kind, 0, node
    raise ValueError(f"{name}: input {i} of {node.op_type} '{node.name}' has no random weight rule")


# A BatchNorm multiplies by gamma / sqrt(var + eps): E[gamma^2] E[1 / var]
# is ~1 for the ranges below, so a chain of 30 (Inception v2) keeps its
# scale. The last BN of a residual branch (its output feeds a Sum: ResNet,
# ShuffleNet) gets a small gamma, or 16 blocks of x + f(x) grow the
# activations to 1e12. Every 16th channel of a BN whose gamma and variance
# are both drawn gets var * 1e-3 and gamma * sqrt(1e-3) (the same gain),
# where eps = 1e-5 is 1% of var + eps: a changed epsilon shows.
RANGES = {"bias": (-0.1, 0.1), "bn_scale": (0.75, 1.15), "bn_scale_residual": (0.1, 0.25),
          "post_scale": (0.8, 1.2), "bn_bias": (-0.2, 0.2), "bn_mean": (-0.2, 0.2), "bn_var": (0.5, 1.5)}
TINY = 1e-3
# The classifier's weights (those of the node that makes the logits) times
# this, so that the logits' std is 2-4 (onnxruntime, these ranges): the
# Softmax neither flat nor one-hot. Others are 2-8 as drawn.
CLASSIFIER_GAIN = {"light_densenet121": 4.0, "light_resnet50": 8.0, "light_shufflenet": 0.03}


def _draw(rs, kind, fan_in, n):
    if kind == "weight":
        a = float(np.sqrt(6.0 / fan_in))
        return _uniform(rs, n, -a, a)
    tiny = kind.endswith("_tiny")
    kind = kind[:-len("_tiny")] if tiny else kind
    w = _uniform(rs, n, *RANGES[kind])
    if tiny:
        w[::16] *= np.float32(TINY if kind == "bn_var" else np.sqrt(TINY))
    return w


def logits_name(graph):
    """The Softmax's input when the graph ends in one (else None)."""
    last = graph.node[-1]
    return last.input[0] if last.op_type == "Softmax" else None


def logits_name_of(path):
    import onnx
    return logits_name(onnx.load(path, load_external_data=False).graph)


def randomize(src, out, perturb=None):
    """Write `src` with seeded random weights to `out` (+ `out`.data).
    perturb=(index, factor): scale the index-th random weight tensor by
    factor (a test of the test). Returns {"weights_digest", "weights",
    "parameters", "outputs"}."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(src)
    g = model.graph
    base = os.path.splitext(os.path.basename(src))[0]
    rs = np.random.RandomState(_seed(base))
    inits = {t.name: t for t in g.initializer}
    use = _consumers(g)
    data_path = out + ".data"
    location = os.path.basename(data_path)
    digest = hashlib.sha256()
    keep, offset, count, params = [], 0, 0, 0
    logits = logits_name(g)
    random = {n.output[0] for n in g.node if n.op_type == "ConstantOfShape" and n.input[0] in inits}
    new_inits, new_inputs = [], []
    with open(data_path, "wb") as f:
        for node in g.node:
            if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
                keep.append(node)
                continue
            name = node.output[0]
            shape = [int(d) for d in numpy_helper.to_array(inits[node.input[0]])]
            kind, fan_in, consumer = _role(name, shape, use, inits, random)
            n = int(np.prod(shape))
            w = _draw(rs, kind, fan_in, n)
            if kind == "weight" and consumer.output[0] in (logits, g.output[0].name):
                w *= np.float32(CLASSIFIER_GAIN.get(base, 1.0))
            if perturb is not None and perturb[0] == count:
                w *= np.float32(perturb[1])
            count += 1
            params += n
            raw = w.tobytes()
            digest.update(f"{name}:{shape}:".encode())
            digest.update(raw)
            f.write(raw)
            t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", location), ("offset", str(offset)), ("length", str(len(raw)))):
                e = t.external_data.add()
                e.key, e.value = k, v
            offset += len(raw)
            new_inits.append(t)
            # IR 3: an initializer is also a graph input.
            new_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    # The ConstantOfShape shape tensors are no longer used: drop them.
    used = {i for n in keep for i in n.input} | {o.name for o in g.output}
    stale = {n for n in inits if n not in used}
    kept_inits = [t for t in g.initializer if t.name not in stale]
    kept_inputs = [i for i in g.input if i.name not in stale]
    del g.node[:]
    g.node.extend(keep)
    del g.initializer[:]
    g.initializer.extend(kept_inits + new_inits)
    del g.input[:]
    g.input.extend(kept_inputs + new_inputs)
    if logits:
        g.output.extend([helper.make_tensor_value_info(logits, TensorProto.FLOAT, None)])
    # The kept (real) weights count too: the digest covers every weight.
    for t in kept_inits:
        a = numpy_helper.to_array(t)
        digest.update(f"{t.name}:{list(a.shape)}:".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    with open(out, "wb") as f:
        f.write(model.SerializeToString())
    return {"weights_digest": digest.hexdigest(), "weights": count, "parameters": params,
            "outputs": [o.name for o in g.output]}


def make_inputs(model_path):
    """Seeded inputs of the graph's real (non-initializer) inputs: N(0, 1)
    float32, the model's fixed shape."""
    import onnx
    m = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    base = os.path.splitext(os.path.basename(model_path))[0]
    rs = np.random.RandomState(_seed(base + ":input"))
    out = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rs.standard_normal(shape).astype(np.float32)
    return out


def inputs_digest(inputs):
    h = hashlib.sha256()
    for k in sorted(inputs):
        h.update(f"{k}:{list(inputs[k].shape)}:".encode())
        h.update(np.ascontiguousarray(inputs[k]).tobytes())
    return h.hexdigest()


def safe(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def rel_error(got, ref):
    """max |got - ref| / max |ref| (inf on a shape mismatch, NaN or inf)."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape or not np.all(np.isfinite(got)):
        return float("inf")
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return float(np.max(np.abs(got - ref))) / max(scale, 1e-30) if ref.size else 0.0


def load_manifest(refs=REFERENCES):
    with open(os.path.join(refs, "manifest.json")) as f:
        return json.load(f)


def compare(name, info, outputs, refs=REFERENCES, tolerance=TOLERANCE, check_digest=True):
    """Check `outputs` ({output name: array}) of the randomized `name` (info:
    what randomize() returned) against the stored onnxruntime outputs.
    Returns (ok, message)."""
    manifest = load_manifest(refs)
    entry = manifest["models"].get(name)
    if entry is None:
        return False, f"{name}: no onnxruntime reference in {refs}"
    if check_digest and entry["weights_digest"] != info["weights_digest"]:
        return False, (f"{name}: the generated weights differ from those of the reference "
                       f"(digest {info['weights_digest'][:12]}, reference {entry['weights_digest'][:12]}): "
                       f"the generator changed; rewrite the references (onnx_light_random.py)")
    if "inputs_digest" in info and entry["inputs_digest"] != info["inputs_digest"]:
        return False, f"{name}: the seeded inputs differ from those of the reference: rewrite the references"
    worst, parts = 0.0, []
    for out in entry["outputs"]:
        ref = np.load(os.path.join(refs, f"{name}.{safe(out)}.npy"))
        got = outputs.get(out)
        if got is None:
            return False, f"{name}: output '{out}' missing"
        err = rel_error(got, ref)
        worst = max(worst, err)
        parts.append(f"'{out}' {err:.3g}")
    ok = worst <= tolerance
    return ok, (f"{name}: against onnxruntime, max-norm relative error {', '.join(parts)} "
                f"({'within' if ok else 'ABOVE'} {tolerance:g})")


def write_references(src_dir, refs):
    """OFFLINE: onnxruntime's outputs for every randomized graph."""
    import tempfile
    import onnxruntime as ort
    import onnx
    os.makedirs(refs, exist_ok=True)
    manifest = {"generated_by": "test/runtime/onnx_light_random.py --write-references",
                "onnxruntime": ort.__version__, "onnx": onnx.__version__, "numpy": np.__version__,
                "tolerance": TOLERANCE, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for src in sorted(glob.glob(os.path.join(src_dir, "*.onnx"))):
            name = os.path.splitext(os.path.basename(src))[0]
            path = os.path.join(tmp, name + ".onnx")
            info = randomize(src, path)
            inputs = make_inputs(path)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            names = [o.name for o in sess.get_outputs()]
            outs = dict(zip(names, sess.run(names, inputs)))
            stats = {}
            for out, a in outs.items():
                np.save(os.path.join(refs, f"{name}.{safe(out)}.npy"), a)
                flat = a.reshape(-1).astype(np.float64)
                stats[out] = {"shape": list(a.shape), "max_abs": float(np.max(np.abs(flat))),
                              "std": float(np.std(flat)), "max": float(np.max(flat)),
                              "min": float(np.min(flat))}
            # The point of the random weights: outputs that depend on every
            # class's weights. Logits with a spread; a Softmax neither flat
            # nor one-hot.
            for out, a in outs.items():
                std, top = float(np.std(a)), float(np.max(a))
                probs = out != logits_name_of(path) and np.allclose(np.sum(a), 1.0, atol=1e-3)
                if (probs and not 2e-3 < top < 0.99) or (not probs and not 0.5 < std < 20):
                    raise SystemExit(f"{name}: output '{out}' std {std:.3g}, max {top:.3g}: flat or saturated")
            manifest["models"][name] = {"weights_digest": info["weights_digest"],
                                        "inputs_digest": inputs_digest(inputs),
                                        "random_weights": info["weights"],
                                        "random_parameters": info["parameters"],
                                        "outputs": names, "stats": stats}
            print(name, json.dumps(stats))
    with open(os.path.join(refs, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-references", nargs=2, metavar=("SRC_DIR", "REF_DIR"))
    ap.add_argument("--randomize", nargs=2, metavar=("SRC", "OUT"))
    a = ap.parse_args()
    if a.write_references:
        write_references(*a.write_references)
    elif a.randomize:
        print(json.dumps(randomize(*a.randomize)))
    else:
        ap.error("nothing to do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
