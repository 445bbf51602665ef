#!/usr/bin/python3
"""Write ONNX node-test cases (model.onnx + test_data_set_0/{input,output}_N.pb)
for If, Loop and Scan, with expected outputs computed here in numpy, for
hetplan-run-node-tests (ctest runtime-control-flow):

  loop_m_only        M given, cond empty (the body's condition is ignored)
  loop_cond_only     M empty, cond given (a while loop)
  loop_both          M and cond, the condition ends it first
  loop_zero_trip     M = 0: carried values pass through, scan output [0, 2]
  loop_cond_false    cond false at entry
  loop_nested_if     a Loop whose body holds an If on the iteration number;
                     the branches read a top-level value and a body value
                     (two scope levels)
  scan_axes          Scan-11: scan_input_axes [-2, 0], a reversed input,
                     scan_output_axes [1, 0], a reversed output
  scan8_lens         Scan-8: batch axis, sequence_lens, a reversed input
  if_outer_output    If whose branches output an outer value directly
  if_unsupported_inner  an op without a kernel inside a Loop inside an If:
                     refused at load, the message names the node's path
  scan9_multi_state, scan9_scalar  the ONNX 1.22 node models (no data
                     there), rebuilt here with the same graphs
  vad_reset, vad_keep  models/gen_vad.py's streaming model (If + GRU,
                     Loop, Scan)

    gen_control_flow_cases.py OUTDIR
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
vi = helper.make_tensor_value_info


def write_case(root, name, graph, inputs, outputs, opset=16, check=True):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    if check:
        onnx.checker.check_model(model)
    d = os.path.join(root, "test_" + name, "test_data_set_0")
    os.makedirs(d, exist_ok=True)
    onnx.save(model, os.path.join(root, "test_" + name, "model.onnx"))
    for k, (n, v) in enumerate(inputs):
        with open(os.path.join(d, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(v), n).SerializeToString())
    for k, (n, v) in enumerate(outputs):
        with open(os.path.join(d, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(v), n).SerializeToString())


def counter_body(stop_below=None):
    """(i, cond, s) -> (cond', s + 1, s + 1); cond' = s+1 < stop_below, or false."""
    nodes = [helper.make_node("Add", ["s", "one_f"], ["s1"]),
             helper.make_node("Identity", ["s1"], ["s_scan"])]
    if stop_below is None:
        nodes.append(helper.make_node("Less", ["i", "minus_one"], ["c_out"]))  # always false: ignored
    else:
        nodes.append(helper.make_node("ReduceMin", ["s1"], ["s1_min"], keepdims=0))  # s1[0]
        nodes.append(helper.make_node("Less", ["s1_min", "limit"], ["c_out"]))
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "one_f"),
             numpy_helper.from_array(np.array(-1, np.int64), "minus_one"),
             numpy_helper.from_array(np.array(stop_below if stop_below is not None else 0, np.float32), "limit")]
    return helper.make_graph(nodes, "counter", [vi("i", I64, []), vi("c", BOOL, []), vi("s", F32, [2])],
                             [vi("c_out", BOOL, []), vi("s1", F32, [2]), vi("s_scan", F32, [2])], inits)


def loop_case(root, name, m, cond, stop_below, s0):
    ins, feeds = [], []
    node_in = []
    if m is not None:
        ins.append(vi("M", I64, []))
        feeds.append(("M", np.array(m, np.int64)))
        node_in.append("M")
    else:
        node_in.append("")
    if cond is not None:
        ins.append(vi("cond", BOOL, []))
        feeds.append(("cond", np.array(cond)))
        node_in.append("cond")
    else:
        node_in.append("")
    ins.append(vi("s0", F32, [2]))
    feeds.append(("s0", s0))
    node = helper.make_node("Loop", node_in + ["s0"], ["s_final", "s_all"], body=counter_body(stop_below))
    graph = helper.make_graph([node], name, ins, [vi("s_final", F32, [2]), vi("s_all", F32, ["n", 2])])
    # numpy reference
    s, trace, i, c = s0.copy(), [], 0, True if cond is None else cond
    while (m is None or i < m) and c:
        s = s + 1
        trace.append(s)
        if cond is not None:
            c = bool(s[0] < stop_below)
        i += 1
    s_all = np.stack(trace) if trace else np.zeros((0, 2), np.float32)
    write_case(root, name, graph, feeds, [("s_final", s.astype(np.float32)), ("s_all", s_all.astype(np.float32))])


def loop_nested_if(root):
    # top: w = x * 3 ; Loop(M=4, "", acc) body(i, c, acc):
    #   even = (i % 2 == 0); If(even) then: acc + w  else: acc * y_b (y_b = acc - 1 in the body)
    #   scan output: the If's output
    then_g = helper.make_graph([helper.make_node("Add", ["acc", "w"], ["t_out"])], "then", [],
                               [vi("t_out", F32, [3])])
    else_g = helper.make_graph([helper.make_node("Mul", ["acc", "y_b"], ["e_out"])], "else", [],
                               [vi("e_out", F32, [3])])
    body = helper.make_graph(
        [helper.make_node("Mod", ["i", "two"], ["r"]),
         helper.make_node("Equal", ["r", "zero_i"], ["even"]),
         helper.make_node("Sub", ["acc", "half"], ["y_b"]),
         helper.make_node("If", ["even"], ["acc1"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Identity", ["acc1"], ["acc_scan"])],
        "body", [vi("i", I64, []), vi("c", BOOL, []), vi("acc", F32, [3])],
        [vi("c_out", BOOL, []), vi("acc1", F32, [3]), vi("acc_scan", F32, [3])],
        [numpy_helper.from_array(np.array(2, np.int64), "two"),
         numpy_helper.from_array(np.array(0, np.int64), "zero_i"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "three"], ["w"]),
         helper.make_node("Loop", ["M", "", "acc0"], ["acc_final", "accs"], body=body)],
        "loop_nested_if", [vi("x", F32, [3]), vi("acc0", F32, [3]), vi("M", I64, [])],
        [vi("acc_final", F32, [3]), vi("accs", F32, [4, 3])],
        [numpy_helper.from_array(np.array(3.0, np.float32), "three")])
    x = np.array([0.5, -1.0, 2.0], np.float32)
    acc0 = np.array([1.0, 2.0, -0.5], np.float32)
    w, acc, trace = x * 3, acc0.astype(np.float32), []
    for i in range(4):
        acc = (acc + w) if i % 2 == 0 else (acc * (acc - 0.5))
        trace.append(acc)
    write_case(root, "loop_nested_if", graph, [("x", x), ("acc0", acc0), ("M", np.array(4, np.int64))],
               [("acc_final", acc.astype(np.float32)), ("accs", np.stack(trace).astype(np.float32))])


def scan_axes(root, rng):
    # states: s[3]; scan inputs a[2, 4, 3] over axis -2 (= 1), b[4, 3] over axis 0 reversed.
    # body: s' = s + sum(a_t, 0) * b_t ; outputs: k0 = s' (axis 1 of the result), k1 = a_t (axis 0, reversed)
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["a_t"], ["as"], axes=[0], keepdims=0),
         helper.make_node("Mul", ["as", "b_t"], ["p"]),
         helper.make_node("Add", ["s", "p"], ["s1"]),
         helper.make_node("Identity", ["s1"], ["k0"]),
         helper.make_node("Identity", ["a_t"], ["k1"])],
        "body", [vi("s", F32, [3]), vi("a_t", F32, [2, 3]), vi("b_t", F32, [3])],
        [vi("s1", F32, [3]), vi("k0", F32, [3]), vi("k1", F32, [2, 3])])
    node = helper.make_node("Scan", ["s0", "a", "b"], ["s_final", "k0s", "k1s"], body=body, num_scan_inputs=2,
                            scan_input_axes=[-2, 0], scan_input_directions=[0, 1],
                            scan_output_axes=[1, 0], scan_output_directions=[0, 1])
    graph = helper.make_graph([node], "scan_axes",
                              [vi("s0", F32, [3]), vi("a", F32, [2, 4, 3]), vi("b", F32, [4, 3])],
                              [vi("s_final", F32, [3]), vi("k0s", F32, [3, 4]), vi("k1s", F32, [4, 2, 3])])
    s0 = rng.standard_normal(3).astype(np.float32)
    a = rng.standard_normal((2, 4, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    s, k0, k1 = s0.astype(np.float64), [], []
    for t in range(4):
        at, bt = a[:, t, :], b[3 - t]
        s = s + at.sum(0) * bt
        k0.append(s)
        k1.append(at)
    k0s = np.stack(k0, 1)           # [3, 4]
    k1s = np.stack(k1[::-1], 0)     # reversed output: iteration t at position 3 - t
    write_case(root, "scan_axes", graph, [("s0", s0), ("a", a), ("b", b)],
               [("s_final", s.astype(np.float32)), ("k0s", k0s.astype(np.float32)), ("k1s", k1s.astype(np.float32))],
               opset=11)


def scan8_lens(root, rng):
    # Scan-8: batch 2; state s[2, 3]; scan input x[2, 4, 3] reversed; lens [4, 2].
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x_t"], ["s1"]), helper.make_node("Identity", ["s1"], ["y"])],
        "body", [vi("s", F32, [3]), vi("x_t", F32, [3])], [vi("s1", F32, [3]), vi("y", F32, [3])])
    node = helper.make_node("Scan", ["lens", "s0", "x"], ["s_final", "ys"], body=body, num_scan_inputs=1,
                            directions=[1])
    graph = helper.make_graph([node], "scan8_lens",
                              [vi("lens", TensorProto.INT32, [2]), vi("s0", F32, [2, 3]), vi("x", F32, [2, 4, 3])],
                              [vi("s_final", F32, [2, 3]), vi("ys", F32, [2, 4, 3])])
    lens = np.array([4, 2], np.int32)
    s0 = rng.standard_normal((2, 3)).astype(np.float32)
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    s_final, ys = np.zeros_like(s0), np.zeros_like(x)
    for bi in range(2):
        s = s0[bi].copy()
        L = lens[bi]
        for t in range(L):
            s = s + x[bi, L - 1 - t]
            ys[bi, t] = s
        s_final[bi] = s
    write_case(root, "scan8_lens", graph, [("lens", lens), ("s0", s0), ("x", x)],
               [("s_final", s_final), ("ys", ys)], opset=8)


def if_outer_output(root):
    then_g = helper.make_graph([], "then", [], [vi("a2", F32, [2])])
    else_g = helper.make_graph([], "else", [], [vi("b", F32, [2])])
    graph = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["a2"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        "if_outer_output", [vi("c", BOOL, []), vi("a", F32, [2]), vi("b", F32, [2])], [vi("y", F32, [2])])
    a = np.array([1.5, -2], np.float32)
    b = np.array([7, 8], np.float32)
    write_case(root, "if_outer_output", graph, [("c", np.array(True)), ("a", a), ("b", b)], [("y", -a)])


def if_unsupported_inner(root):
    """An op without a kernel two subgraphs deep: refused at load, naming the path."""
    body = helper.make_graph(
        [helper.make_node("NoSuchOp", ["s"], ["s1"], name="bad"), helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [vi("i", I64, []), vi("c", BOOL, []), vi("s", F32, [2])], [vi("c_out", BOOL, []), vi("s1", F32, [2])])
    then_g = helper.make_graph([helper.make_node("Identity", ["a"], ["t"])], "then", [], [vi("t", F32, [2])])
    else_g = helper.make_graph([helper.make_node("Loop", ["M", "", "a"], ["e"], name="inner", body=body)],
                               "else", [], [vi("e", F32, [2])],
                               [numpy_helper.from_array(np.array(1, np.int64), "M")])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="outer", then_branch=then_g,
                                                else_branch=else_g)],
                              "if_unsupported_inner", [vi("c", BOOL, []), vi("a", F32, [2])], [vi("y", F32, [2])])
    a = np.array([1, 2], np.float32)
    write_case(root, "if_unsupported_inner", graph, [("c", np.array(True)), ("a", a)], [("y", a)], check=False)


def scan9_v122(root):
    """The graphs of ONNX 1.22's test_scan9_multi_state / test_scan9_scalar."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         helper.make_node("Mul", ["prod_in", "next"], ["prod_out"]),
         helper.make_node("Identity", ["sum_out"], ["scan_out"])],
        "scan_body", [vi("sum_in", F32, [2]), vi("prod_in", F32, [2]), vi("next", F32, [2])],
        [vi("sum_out", F32, [2]), vi("prod_out", F32, [2]), vi("scan_out", F32, [2])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["initial_sum", "initial_prod", "x"], ["y_sum", "y_prod", "z"], body=body,
                          num_scan_inputs=1)],
        "test_scan9_multi_state", [vi("initial_sum", F32, [2]), vi("initial_prod", F32, [2]), vi("x", F32, [3, 2])],
        [vi("y_sum", F32, [2]), vi("y_prod", F32, [2]), vi("z", F32, [3, 2])])
    x = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    write_case(root, "scan9_multi_state", graph,
               [("initial_sum", np.zeros(2, np.float32)), ("initial_prod", np.ones(2, np.float32)), ("x", x)],
               [("y_sum", x.sum(0)), ("y_prod", x.prod(0)), ("z", np.cumsum(x, 0))], opset=9)
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         helper.make_node("Identity", ["sum_out"], ["scan_out"])],
        "scan_body", [vi("sum_in", F32, []), vi("next", F32, [])], [vi("sum_out", F32, []), vi("scan_out", F32, [])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["initial", "x"], ["y", "z"], body=body, num_scan_inputs=1)],
        "test_scan9_scalar", [vi("initial", F32, []), vi("x", F32, [5])], [vi("y", F32, []), vi("z", F32, [5])])
    x = np.arange(1, 6, dtype=np.float32)
    write_case(root, "scan9_scalar", graph, [("initial", np.array(0, np.float32)), ("x", x)],
               [("y", np.array(x.sum(), np.float32)), ("z", np.cumsum(x).astype(np.float32))], opset=9)


def main():
    root = sys.argv[1]
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    s0 = np.array([0.0, 10.0], np.float32)
    loop_case(root, "loop_m_only", 4, None, None, s0)
    loop_case(root, "loop_cond_only", None, True, 5.5, s0)
    loop_case(root, "loop_both", 10, True, 3.5, s0)
    loop_case(root, "loop_zero_trip", 0, True, 100.0, s0)
    loop_case(root, "loop_cond_false", 5, False, 100.0, s0)
    loop_nested_if(root)
    scan_axes(root, rng)
    scan8_lens(root, rng)
    if_outer_output(root)
    if_unsupported_inner(root)
    scan9_v122(root)
    gen_vad = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "gen_vad.py")
    subprocess.run([sys.executable, gen_vad, "-o", os.path.join(root, "vad.onnx"), "--cases", root], check=True)


if __name__ == "__main__":
    main()
