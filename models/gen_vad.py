#!/usr/bin/python3
"""Write a small streaming voice-activity-detector-shaped ONNX model with
control flow (If, Loop, Scan around recurrent state), and node-test cases
for it whose expected outputs are computed here in numpy.

    /usr/bin/python3 models/gen_vad.py -o OUT.onnx [--cases DIR] [--seed 0]

Inputs: x[batch, T, F] (a chunk of feature frames), h0[batch, H] (the
state carried from the previous chunk), reset (bool scalar: start a new
stream). Outputs: probs[batch, T] (speech probability per frame),
h[batch, H] (state for the next chunk), energy[batch, T] (running frame
energy).

  xs = x * 0.5                                   (read only inside the Loop)
  h_init = If(reset,
              then: zeros like h0                (reads h0 from the outer scope)
              else: GRU(x, W, R, B, initial_h=h0) last state: a warm-up state update
                    over the chunk, then Squeeze)
  T = Gather(Shape(x), 1)
  h, ps = Loop(T, "", h_init) body(i, cond, h):
              x_t = Gather(xs, i, axis=1)
              h' = Tanh(x_t Wx + h Wh + b)       (MatMul state update)
              p  = Sigmoid(h' Wo)[:, 0]          (scan output, stacked on axis 0: [T, batch])
  probs = Transpose(ps)                          ([batch, T])
  e0 = ReduceMean(h0 * 0, axis 1)                ([batch] zeros)
  e, energy = Scan(e0, x) scan_input_axes=[1], scan_output_axes=[1]:
              e' = 0.9 e + 0.1 mean(x_t^2, axis 1); output e'

Opset 14 (GRU layout attribute absent: seq-major), IR version 7; checked
with onnx.checker. The --cases folders are node-test cases
(model.onnx + test_data_set_0/{input,output}_N.pb) for
hetplan-run-node-tests: test_vad_reset (reset true) and test_vad_keep
(reset false), batch 3, T 5.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, H = 6, 8


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def build(rng):
    w = {
        "gru.W": rng.standard_normal((1, 3 * H, F)) * 0.4,
        "gru.R": rng.standard_normal((1, 3 * H, H)) * 0.4,
        "gru.B": rng.standard_normal((1, 6 * H)) * 0.1,
        "cell.Wx": rng.standard_normal((F, H)) * 0.5,
        "cell.Wh": rng.standard_normal((H, H)) * 0.4,
        "cell.b": rng.standard_normal((H,)) * 0.1,
        "head.Wo": rng.standard_normal((H, 1)) * 0.6,
    }
    w = {k: v.astype(np.float32) for k, v in w.items()}
    inits = [numpy_helper.from_array(v, k) for k, v in w.items()]
    inits += [
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array(0.9, np.float32), "decay"),
        numpy_helper.from_array(np.array(0.1, np.float32), "gain"),
    ]
    f32 = TensorProto.FLOAT
    # If branches: no inputs, outer-scope reads.
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["h0", "zero"], ["h_zero"], name="reset.zero")],
        "reset_state", [], [helper.make_tensor_value_info("h_zero", f32, ["batch", H])])
    else_g = helper.make_graph(
        [helper.make_node("Unsqueeze", ["h0", "axis0"], ["h0_3d"], name="warm.unsq"),
         helper.make_node("Transpose", ["x"], ["x_tbf"], name="warm.tr", perm=[1, 0, 2]),
         helper.make_node("GRU", ["x_tbf", "gru.W", "gru.R", "gru.B", "", "h0_3d"], ["", "h_last3"],
                          name="warm.gru", hidden_size=H),
         helper.make_node("Squeeze", ["h_last3", "axis0"], ["h_warm"], name="warm.sq")],
        "warm_state", [], [helper.make_tensor_value_info("h_warm", f32, ["batch", H])])
    # Loop body: (i, cond, h) -> (cond, h', p)
    loop_body = helper.make_graph(
        [helper.make_node("Gather", ["xs", "i"], ["x_t"], name="cell.x_t", axis=1),
         helper.make_node("MatMul", ["x_t", "cell.Wx"], ["ax"], name="cell.mx"),
         helper.make_node("MatMul", ["h", "cell.Wh"], ["ah"], name="cell.mh"),
         helper.make_node("Add", ["ax", "ah"], ["a1"], name="cell.add1"),
         helper.make_node("Add", ["a1", "cell.b"], ["a2"], name="cell.add2"),
         helper.make_node("Tanh", ["a2"], ["h_next"], name="cell.tanh"),
         helper.make_node("MatMul", ["h_next", "head.Wo"], ["logit"], name="head.mm"),
         helper.make_node("Sigmoid", ["logit"], ["p2"], name="head.sig"),
         helper.make_node("Squeeze", ["p2", "one"], ["p"], name="head.sq"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cell.cond")],
        "frame_step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", f32, ["batch", H])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_next", f32, ["batch", H]),
         helper.make_tensor_value_info("p", f32, ["batch"])])
    # Scan body: (e, x_t) -> (e', e')
    scan_body = helper.make_graph(
        [helper.make_node("Mul", ["x_f", "x_f"], ["sq"], name="en.sq"),
         helper.make_node("ReduceMean", ["sq"], ["m"], name="en.mean", axes=[1], keepdims=0),
         helper.make_node("Mul", ["e", "decay"], ["ed"], name="en.decay"),
         helper.make_node("Mul", ["m", "gain"], ["mg"], name="en.gain"),
         helper.make_node("Add", ["ed", "mg"], ["e_next"], name="en.add"),
         helper.make_node("Identity", ["e_next"], ["e_out"], name="en.out")],
        "energy_step",
        [helper.make_tensor_value_info("e", f32, ["batch"]),
         helper.make_tensor_value_info("x_f", f32, ["batch", F])],
        [helper.make_tensor_value_info("e_next", f32, ["batch"]),
         helper.make_tensor_value_info("e_out", f32, ["batch"])])
    nodes = [
        helper.make_node("Mul", ["x", "half"], ["xs"], name="scale"),
        helper.make_node("If", ["reset"], ["h_init"], name="state.if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Shape", ["x"], ["x_shape"], name="frames.shape"),
        helper.make_node("Gather", ["x_shape", "one"], ["T"], name="frames.T", axis=0),
        helper.make_node("Loop", ["T", "", "h_init"], ["h", "ps"], name="frames.loop", body=loop_body),
        helper.make_node("Transpose", ["ps"], ["probs"], name="probs.tr", perm=[1, 0]),
        helper.make_node("Mul", ["h0", "zero"], ["h0z"], name="energy.z"),
        helper.make_node("ReduceMean", ["h0z"], ["e0"], name="energy.e0", axes=[1], keepdims=0),
        helper.make_node("Scan", ["e0", "x"], ["e_final", "energy"], name="energy.scan", body=scan_body,
                         num_scan_inputs=1, scan_input_axes=[1], scan_output_axes=[1]),
    ]
    graph = helper.make_graph(
        nodes, "vad_stream",
        [helper.make_tensor_value_info("x", f32, ["batch", "sequence", F]),
         helper.make_tensor_value_info("h0", f32, ["batch", H]),
         helper.make_tensor_value_info("reset", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("probs", f32, ["batch", "sequence"]),
         helper.make_tensor_value_info("h", f32, ["batch", H]),
         helper.make_tensor_value_info("energy", f32, ["batch", "sequence"])],
        inits,
        # Shapes of the control-flow results, for planners whose shape rules
        # do not see into subgraphs (ONNX inference leaves the Loop's trip
        # count dim unknown).
        value_info=[helper.make_tensor_value_info("h_init", f32, ["batch", H]),
                    helper.make_tensor_value_info("ps", f32, ["sequence", "batch"]),
                    helper.make_tensor_value_info("e_final", f32, ["batch"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                              producer_name="hetplan models/gen_vad.py")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model, w


def reference(w, x, h0, reset):
    """The model's outputs in numpy (float64, cast to float32)."""
    x = x.astype(np.float64)
    h0 = h0.astype(np.float64)
    if reset:
        h = np.zeros_like(h0)
    else:  # ONNX GRU, forward, linear_before_reset 0, gates z, r, h
        W, R, B = w["gru.W"][0].astype(np.float64), w["gru.R"][0].astype(np.float64), w["gru.B"][0].astype(np.float64)
        Wz, Wr, Wh = W[:H], W[H:2 * H], W[2 * H:]
        Rz, Rr, Rh = R[:H], R[H:2 * H], R[2 * H:]
        Wbz, Wbr, Wbh, Rbz, Rbr, Rbh = (B[k * H:(k + 1) * H] for k in range(6))
        h = h0
        for t in range(x.shape[1]):
            xt = x[:, t, :]
            z = sigmoid(xt @ Wz.T + h @ Rz.T + Wbz + Rbz)
            r = sigmoid(xt @ Wr.T + h @ Rr.T + Wbr + Rbr)
            hh = np.tanh(xt @ Wh.T + (r * h) @ Rh.T + Rbh + Wbh)
            h = (1 - z) * hh + z * h
    xs = x * 0.5
    probs = []
    for t in range(x.shape[1]):
        h = np.tanh(xs[:, t, :] @ w["cell.Wx"] + h @ w["cell.Wh"] + w["cell.b"])
        probs.append(sigmoid(h @ w["head.Wo"])[:, 0])
    e = np.zeros(x.shape[0])
    energy = []
    for t in range(x.shape[1]):
        e = 0.9 * e + 0.1 * np.mean(x[:, t, :] ** 2, axis=1)
        energy.append(e)
    return {"probs": np.stack(probs, 1).astype(np.float32), "h": h.astype(np.float32),
            "energy": np.stack(energy, 1).astype(np.float32)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--cases", help="write node-test cases test_vad_reset/ and test_vad_keep/ here")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    model, w = build(rng)
    onnx.save(model, a.output)
    if not a.cases:
        return
    x = rng.uniform(-1, 1, (3, 5, F)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (3, H)).astype(np.float32)
    for name, reset in (("test_vad_reset", True), ("test_vad_keep", False)):
        d = os.path.join(a.cases, name, "test_data_set_0")
        os.makedirs(d, exist_ok=True)
        onnx.save(model, os.path.join(a.cases, name, "model.onnx"))
        ins = {"x": x, "h0": h0, "reset": np.array(reset)}
        for k, (n, v) in enumerate(ins.items()):
            with open(os.path.join(d, f"input_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())
        for k, (n, v) in enumerate(reference(w, x, h0, reset).items()):
            with open(os.path.join(d, f"output_{k}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())


if __name__ == "__main__":
    main()
