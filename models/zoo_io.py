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
