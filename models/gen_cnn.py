#!/usr/bin/python3
"""Write a small residual convnet as an ONNX model (for CNN training tests).

    /usr/bin/python3 models/gen_cnn.py -o OUT.onnx [--classes 10] [--size 16] [--seed 0]

input[batch, 3, size, size] -> logits[batch, classes]:
  Conv 3x3 (8) + BatchNormalization + Relu -> MaxPool 2x2
  -> residual block {Conv 3x3 pad 1 + BN + Relu, Conv 3x3 pad 1 + BN} + Add + Relu
  -> Conv 1x1 stride 2 (16) -> AveragePool 2x2 -> GlobalAveragePool -> Flatten -> Gemm (transB=1)
Weights are float32 initializers (He-style N(0, sqrt(2/fan_in)); BN scale 1 + N(0, 0.1),
running stats N(0, 0.1) / 1 + U(0, 0.5)), drawn from one numpy Generator seeded with --seed.
Opset 17, IR version 8; checked with onnx.checker and shape inference.
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    inits, nodes = [], []

    def weight(name, shape, fan_in):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), name))
        return name

    def conv_bn(x, name, cin, cout, k, stride=1, pad=0, relu=True):
        w = weight(f"{name}.weight", (cout, cin, k, k), cin * k * k)
        nodes.append(helper.make_node("Conv", [x, w], [f"{name}.conv"], name=f"{name}.conv",
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4))
        bn = [f"{name}.bn.{p}" for p in ("scale", "bias", "mean", "var")]
        inits.append(numpy_helper.from_array((1 + 0.1 * rng.standard_normal(cout)).astype(np.float32), bn[0]))
        inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), bn[1]))
        inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), bn[2]))
        inits.append(numpy_helper.from_array((1 + 0.5 * rng.random(cout)).astype(np.float32), bn[3]))
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv"] + bn, [f"{name}.bn"],
                                      name=f"{name}.bn", epsilon=1e-5))
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"], name=f"{name}.relu"))
        return f"{name}.relu"

    x = conv_bn("input", "stem", 3, 8, 3, pad=1)
    nodes.append(helper.make_node("MaxPool", [x], ["stem.pool"], name="stem.pool", kernel_shape=[2, 2], strides=[2, 2]))
    y = conv_bn("stem.pool", "block.a", 8, 8, 3, pad=1)
    y = conv_bn(y, "block.b", 8, 8, 3, pad=1, relu=False)
    nodes.append(helper.make_node("Add", ["stem.pool", y], ["block.add"], name="block.add"))
    nodes.append(helper.make_node("Relu", ["block.add"], ["block.relu"], name="block.relu"))
    w = weight("down.weight", (16, 8, 1, 1), 8)
    nodes.append(helper.make_node("Conv", ["block.relu", w], ["down.conv"], name="down.conv",
                                  kernel_shape=[1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("AveragePool", ["down.conv"], ["down.pool"], name="down.pool",
                                  kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1], count_include_pad=0))
    nodes.append(helper.make_node("GlobalAveragePool", ["down.pool"], ["head.gap"], name="head.gap"))
    nodes.append(helper.make_node("Flatten", ["head.gap"], ["head.flat"], name="head.flat"))
    fc = weight("head.fc.weight", (a.classes, 16), 16)
    inits.append(numpy_helper.from_array(np.zeros(a.classes, np.float32), "head.fc.bias"))
    nodes.append(helper.make_node("Gemm", ["head.flat", fc, "head.fc.bias"], ["logits"], name="head.fc", transB=1))

    graph = helper.make_graph(
        nodes, "small-cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, a.size, a.size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", a.classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="hetplan gen_cnn.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.save(model, a.output)
    print(f"small-cnn: {len(nodes)} nodes, {sum(int(np.prod(i.dims)) for i in inits)} weights -> {a.output}")


if __name__ == "__main__":
    main()
