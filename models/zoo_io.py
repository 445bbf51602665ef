"""What the zoo generators share (models/export_zoo.py, models/gen_shipped.py):
onnxruntime's reference outputs and reproducible .npz files."""
import io
import zipfile

import numpy as np


def reference(path, feeds):
    """onnxruntime's outputs for `feeds` (CPU provider, one thread, graph
    optimizations off), by output name."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def write_npz(path, arrays):
    """np.savez with a fixed zip date, so that the bytes are reproducible."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for key, arr in arrays.items():
            buf = io.BytesIO()
            arr = np.asarray(arr)  # (ascontiguousarray would make a scalar 1-D)
            np.lib.format.write_array(buf, arr if arr.ndim == 0 else np.ascontiguousarray(arr),
                                      allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, buf.getvalue())


def bound_dims(name, declared, feeds, unnamed=()):
    """Each named dim of the inputs (`declared`: input -> dims, a name or a
    size each) with its size in the reference inputs; names in `unnamed`
    (the `?` placeholder) are no dims of their own."""
    dims = {}
    for n, shape in declared.items():
        for d, v in zip(shape, feeds[n].shape):
            if isinstance(d, str) and d not in unnamed:
                assert dims.get(d, v) == v, (name, d, dims[d], v)
                dims[d] = v
    return dims


def write_refs(path, feeds, ref):
    """The .npz of a zoo model: `in:NAME` inputs, `out:NAME` outputs."""
    arrays = {"in:" + k: v for k, v in feeds.items()}
    arrays.update({"out:" + k: v for k, v in ref.items()})
    write_npz(path, arrays)


def op_counts(m):
    ops = {}
    for node in m.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return dict(sorted(ops.items()))
