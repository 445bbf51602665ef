"""One Adam step of an ONNX model in numpy (float64), independent of
hetplan: the reference for step 2's loss in example_models_check.py.

A small reverse-mode interpreter over the ops gpt2-tiny and bert-tiny use
(examples/models): forward keeps every value, backward walks the nodes in
reverse. The loss is what `hetplan run --labels` computes: softmax
cross-entropy over the first output's last axis, mean over the labels.
Parameters are the float initializers of rank >= 1 (the scalar constants
are not trained, as in the runtime). Adam as runtime/src/exec/Training.cpp:
m = (1 - b1) g, v = (1 - b2) g^2 at step 1, p -= lr m/(1 - b1) /
(sqrt(v/(1 - b2)) + eps), p rounded to float32.
"""
import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _unbroadcast(g, shape):
    """Sum g down to `shape` (numpy broadcasting in reverse)."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, d in enumerate(shape):
        if d == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def _slices(x):
    """Slice's (data, starts, ends[, axes]) as an index (steps of 1)."""
    sl = [slice(None)] * x[0].ndim
    axes = x[3] if len(x) > 3 else range(len(x[1]))
    for s, e, ax in zip(x[1], x[2], axes):
        sl[int(ax)] = slice(int(s), int(e))
    return tuple(sl)


def forward(model, feeds, params):
    """All values of the graph: {name: array} (floats in float64)."""
    from onnx import numpy_helper
    v = {}
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        v[t.name] = a.astype(np.float64) if a.dtype == np.float32 else a
    v.update(params)
    v.update(feeds)
    for n in model.graph.node:
        at = _attrs(n)
        x = [v[i] if i else None for i in n.input]
        op = n.op_type
        if op == "Shape":
            y = [np.array(x[0].shape, dtype=np.int64)]
        elif op == "Gather":
            y = [np.take(x[0], x[1], axis=at.get("axis", 0))]
        elif op == "Unsqueeze":
            y = [np.expand_dims(x[0], tuple(int(a) for a in x[1]))]
        elif op == "Range":
            y = [np.arange(x[0], x[1], x[2], dtype=np.int64)]
        elif op == "Concat":
            y = [np.concatenate(x, axis=at["axis"])]
        elif op == "Reshape":
            shape = [x[0].shape[i] if d == 0 else int(d) for i, d in enumerate(x[1])]
            y = [x[0].reshape(shape)]
        elif op in ("Add", "Sub", "Mul", "Div"):
            f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
            y = [f(x[0], x[1])]
        elif op == "Slice":
            y = [x[0][_slices(x)]]
        elif op == "LayerNormalization":
            ax = at.get("axis", -1)
            mu = x[0].mean(axis=ax, keepdims=True)
            var = ((x[0] - mu) ** 2).mean(axis=ax, keepdims=True)
            xh = (x[0] - mu) / np.sqrt(var + at.get("epsilon", 1e-5))
            y = [xh * x[1] + (x[2] if len(x) > 2 else 0)]
        elif op == "MatMul":
            y = [np.matmul(x[0], x[1])]
        elif op == "Gemm":
            a = x[0].T if at.get("transA", 0) else x[0]
            b = x[1].T if at.get("transB", 0) else x[1]
            y = [at.get("alpha", 1.0) * (a @ b) + at.get("beta", 1.0) * (x[2] if len(x) > 2 else 0)]
        elif op == "Split":
            ax = at.get("axis", 0)
            idx = np.cumsum(x[1])[:-1]
            y = np.split(x[0], idx, axis=ax)
        elif op == "Transpose":
            y = [np.transpose(x[0], at.get("perm"))]
        elif op == "Where":
            y = [np.where(x[0], x[1], x[2])]
        elif op == "Softmax":
            ax = at.get("axis", -1)
            e = np.exp(x[0] - x[0].max(axis=ax, keepdims=True))
            y = [e / e.sum(axis=ax, keepdims=True)]
        elif op == "Erf":
            y = [_erf(x[0])]
        elif op == "Tanh":
            y = [np.tanh(x[0])]
        elif op == "Cast":
            y = [x[0].astype(np.float64 if at["to"] == 1 else np.int64 if at["to"] == 7 else bool)]
        else:
            raise NotImplementedError(op)
        for name, val in zip(n.output, y):
            v[name] = val
    return v


def backward(model, v, grad_out):
    """Gradients {name: array} of every float value, given d loss / d output."""
    g = dict(grad_out)

    def acc(name, d):
        if name:
            g[name] = g[name] + d if name in g else d

    for n in reversed(model.graph.node):
        dys = [g.get(o) for o in n.output]
        if all(d is None for d in dys):
            continue
        at = _attrs(n)
        x = [v[i] if i else None for i in n.input]
        dy = dys[0]
        op = n.op_type
        if op == "Gather":
            if x[0].dtype == np.float64:
                d = np.zeros_like(x[0])
                np.add.at(d, x[1].reshape(-1), dy.reshape(-1, *x[0].shape[1:]))
                acc(n.input[0], d)
        elif op in ("Add", "Sub"):
            acc(n.input[0], _unbroadcast(dy, x[0].shape))
            acc(n.input[1], _unbroadcast(dy if op == "Add" else -dy, x[1].shape))
        elif op == "Mul":
            acc(n.input[0], _unbroadcast(dy * x[1], x[0].shape))
            acc(n.input[1], _unbroadcast(dy * x[0], x[1].shape))
        elif op == "Div":
            acc(n.input[0], _unbroadcast(dy / x[1], x[0].shape))
            acc(n.input[1], _unbroadcast(-dy * x[0] / x[1] ** 2, x[1].shape))
        elif op == "Reshape":
            acc(n.input[0], dy.reshape(x[0].shape))
        elif op == "Unsqueeze":
            acc(n.input[0], dy.reshape(x[0].shape))
        elif op == "Slice":  # BERT's position embeddings
            if x[0].dtype == np.float64:
                d = np.zeros_like(x[0])
                d[_slices(x)] = dy
                acc(n.input[0], d)
        elif op == "Concat":
            ax = at["axis"]
            idx = np.cumsum([t.shape[ax] for t in x])[:-1]
            for name, d in zip(n.input, np.split(dy, idx, axis=ax)):
                if v[name].dtype == np.float64:
                    acc(name, d)
        elif op == "LayerNormalization":
            ax = at.get("axis", -1)
            eps = at.get("epsilon", 1e-5)
            mu = x[0].mean(axis=ax, keepdims=True)
            inv = 1 / np.sqrt(((x[0] - mu) ** 2).mean(axis=ax, keepdims=True) + eps)
            xh = (x[0] - mu) * inv
            dxh = dy * x[1]
            dx = inv * (dxh - dxh.mean(axis=ax, keepdims=True) - xh * (dxh * xh).mean(axis=ax, keepdims=True))
            acc(n.input[0], dx)
            acc(n.input[1], _unbroadcast(dy * xh, x[1].shape))
            if len(x) > 2:
                acc(n.input[2], _unbroadcast(dy, x[2].shape))
        elif op == "MatMul":
            a, b = x
            acc(n.input[0], _unbroadcast(np.matmul(dy, np.swapaxes(b, -1, -2)), a.shape))
            acc(n.input[1], _unbroadcast(np.matmul(np.swapaxes(a, -1, -2), dy), b.shape))
        elif op == "Gemm":
            ta, tb, alpha = at.get("transA", 0), at.get("transB", 0), at.get("alpha", 1.0)
            a = x[0].T if ta else x[0]
            b = x[1].T if tb else x[1]
            da, db = alpha * dy @ b.T, alpha * a.T @ dy
            acc(n.input[0], da.T if ta else da)
            acc(n.input[1], db.T if tb else db)
            if len(x) > 2:
                acc(n.input[2], _unbroadcast(at.get("beta", 1.0) * dy, x[2].shape))
        elif op == "Split":
            ax = at.get("axis", 0)
            parts = [d if d is not None else np.zeros_like(v[o]) for d, o in zip(dys, n.output)]
            acc(n.input[0], np.concatenate(parts, axis=ax))
        elif op == "Transpose":
            perm = at.get("perm") or list(reversed(range(dy.ndim)))
            acc(n.input[0], np.transpose(dy, np.argsort(perm)))
        elif op == "Where":
            acc(n.input[1], _unbroadcast(np.where(x[0], dy, 0), x[1].shape))
            acc(n.input[2], _unbroadcast(np.where(x[0], 0, dy), x[2].shape))
        elif op == "Softmax":
            y = v[n.output[0]]
            ax = at.get("axis", -1)
            acc(n.input[0], y * (dy - (dy * y).sum(axis=ax, keepdims=True)))
        elif op == "Erf":
            acc(n.input[0], dy * 2 / np.sqrt(np.pi) * np.exp(-x[0] ** 2))
        elif op == "Tanh":
            acc(n.input[0], dy * (1 - v[n.output[0]] ** 2))
        elif op in ("Shape", "Range", "Cast"):
            pass
        else:
            raise NotImplementedError(op)
    return g


def cross_entropy(logits, labels):
    """(loss, d loss / d logits): mean over rows of -log softmax[label]."""
    x = logits.reshape(-1, logits.shape[-1])
    y = labels.reshape(-1)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    loss = float(np.mean(-np.log(p[np.arange(len(y)), y])))
    d = p.copy()
    d[np.arange(len(y)), y] -= 1
    return loss, (d / len(y)).reshape(logits.shape)


def two_losses(model_path, feeds, labels, lr, eps, beta1=0.9, beta2=0.999):
    """Losses of steps 1 and 2 of `hetplan run --labels --steps 2`."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(model_path)
    params = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer
              if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 1}
    out = model.graph.output[0].name
    v = forward(model, feeds, params)
    loss1, dlogits = cross_entropy(v[out], labels)
    grads = backward(model, v, {out: dlogits})
    stepped = {}
    for name, p in params.items():
        gr = grads.get(name, np.zeros_like(p))
        m, s = (1 - beta1) * gr, (1 - beta2) * gr * gr
        stepped[name] = (p - lr * (m / (1 - beta1)) / (np.sqrt(s / (1 - beta2)) + eps)).astype(np.float32).astype(
            np.float64)
    v2 = forward(model, feeds, stepped)
    loss2, _ = cross_entropy(v2[out], labels)
    return loss1, loss2
