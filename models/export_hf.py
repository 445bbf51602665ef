#!/usr/bin/env python3
"""Export tiny Hugging Face models with torch.onnx.export, for hetplan's tests.

Each model is built from a small config with random weights (torch seed 0);
nothing is downloaded from the hub. The graphs are what the PyTorch exporters
write for the real architectures, so the planner is tested on exporter output
rather than only on the hand-written graphs of gen_transformer.py.

Needs torch, transformers, onnx, onnxscript (for the dynamo exporter, which
writes the opset-18 files) and onnxruntime. models/hf/README.md gives the
versions used and how to set up a virtualenv.

    python models/export_hf.py [-o models/hf] [--only NAME ...] [--no-check]

Each export is checked with onnx.checker, then run with onnxruntime on the
export's own shape ((2, 16) tokens or a (2, 3, 32, 32) image) and on
(3, 7) tokens with padding (3 images for ViT), and compared with PyTorch.
Only the .onnx files are written; the weights are inline, so no .data file.
"""

import argparse
import os
import sys
import warnings

import numpy as np
import onnx
import torch
import transformers
from transformers import (BertConfig, BertModel, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM, ViTConfig, ViTModel)

BATCH, SEQ = 2, 16
MAX_BYTES = 3 * 1024 * 1024

# The opset-17 files use eager attention, written by the classic TorchScript
# exporter: the MatMul / Softmax / MatMul pattern exporters wrote for years.
# The opset-18 files use transformers' default, SDPA, written by the dynamo
# exporter, which decomposes it into MatMul / Softmax with IsNaN/Where guards.


def gpt2(attn):
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=128,
                        bos_token_id=0, eos_token_id=0, use_cache=False,
                        attn_implementation=attn)
    return GPT2LMHeadModel(config), ["input_ids", "attention_mask"], ["logits"]


def bert(attn):
    config = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                        intermediate_size=256, vocab_size=512, max_position_embeddings=128,
                        attn_implementation=attn)
    return (BertModel(config), ["input_ids", "attention_mask"],
            ["last_hidden_state", "pooler_output"])


def llama(attn):
    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, vocab_size=512,
                         max_position_embeddings=128, use_cache=False,
                         attn_implementation=attn)
    return LlamaForCausalLM(config), ["input_ids", "attention_mask"], ["logits"]


def vit(attn):
    config = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                       num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                       attn_implementation=attn)
    return ViTModel(config), ["pixel_values"], ["last_hidden_state", "pooler_output"]


# name -> (builder, opset, dynamo exporter?, attention implementation)
MODELS = {
    "gpt2": (gpt2, 17, False, "eager"),
    "bert": (bert, 17, False, "eager"),
    "llama": (llama, 17, False, "eager"),
    "vit": (vit, 17, False, "eager"),
    "gpt2-opset18": (gpt2, 18, True, "sdpa"),
    "llama-opset18": (llama, 18, True, "sdpa"),
}


def make_inputs(input_names, batch=BATCH, seq=SEQ, pad=0):
    """Random inputs; the last `pad` positions of row 0 are masked out."""
    g = torch.Generator().manual_seed(1)
    inputs = {}
    for name in input_names:
        if name == "input_ids":
            inputs[name] = torch.randint(0, 512, (batch, seq), generator=g)
        elif name == "attention_mask":
            inputs[name] = torch.ones(batch, seq, dtype=torch.int64)
            if pad:
                inputs[name][0, seq - pad:] = 0
        elif name == "pixel_values":
            inputs[name] = torch.randn(batch, 3, 32, 32, generator=g)
    return inputs


class Wrapper(torch.nn.Module):
    """Calls the model with keyword inputs and returns a plain tuple."""

    def __init__(self, model, input_names, output_names):
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.output_names = output_names

    def forward(self, *args):
        kwargs = dict(zip(self.input_names, args))
        if "input_ids" in kwargs:
            kwargs["use_cache"] = False
        out = self.model(**kwargs, return_dict=True)
        return tuple(out[n] for n in self.output_names)


def export(name, out_dir, check):
    builder, opset, dynamo, attn = MODELS[name]
    torch.manual_seed(0)
    model, input_names, output_names = builder(attn)
    model.eval()
    # Fresh models have LayerNorm scales of 1 and biases of 0. The TorchScript
    # exporter merges initializers of equal value, so one "h.0.ln_1.weight"
    # would feed every LayerNorm; noise makes every weight distinct, as in a
    # trained model.
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    wrapper = Wrapper(model, input_names, output_names).eval()
    inputs = make_inputs(input_names)
    args = tuple(inputs[n] for n in input_names)
    path = os.path.join(out_dir, name + ".onnx")

    seq_dims = {0: "batch", 1: "sequence"}
    if dynamo:
        batch = torch.export.Dim("batch", min=1, max=64)
        seq = torch.export.Dim("sequence", min=2, max=128)
        dims = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
                "pixel_values": {0: batch}}
        dynamic_shapes = tuple(dims[n] for n in input_names)
        with torch.no_grad():
            program = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset,
                                        input_names=input_names, output_names=output_names,
                                        dynamic_shapes={"args": dynamic_shapes},
                                        external_data=False)
        program.save(path, external_data=False)
    else:
        dynamic_axes = {}
        for n in input_names:
            dynamic_axes[n] = {0: "batch"} if n == "pixel_values" else seq_dims
        for n in output_names:
            dynamic_axes[n] = {0: "batch"} if (n == "pooler_output" or "pixel_values" in input_names) \
                else seq_dims
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapper, args, path, dynamo=False, opset_version=opset,
                              input_names=input_names, output_names=output_names,
                              dynamic_axes=dynamic_axes, do_constant_folding=True)

    size = os.path.getsize(path)
    assert not os.path.exists(path + ".data"), "external data written for " + path
    assert size < MAX_BYTES, f"{path} is {size} bytes"
    m = onnx.load(path)
    onnx.checker.check_model(m)
    opsets = {o.domain or "ai.onnx": o.version for o in m.opset_import}
    params = sum(int(np.prod(t.dims)) for t in m.graph.initializer)
    print(f"{path}: {size:,} bytes, opsets {opsets}, {len(m.graph.node)} nodes, "
          f"{params:,} initializer elements, torch params "
          f"{sum(p.numel() for p in model.parameters()):,}")
    if check:
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        # The export's own shape, then another one with padding, so that the
        # dynamic axes and the attention mask are really used.
        for feed in (inputs, make_inputs(input_names, batch=3, seq=7, pad=2)):
            got = sess.run(None, {n: feed[n].numpy() for n in input_names})
            with torch.no_grad():
                want = wrapper(*(feed[n] for n in input_names))
            for n, g_, w in zip(output_names, got, want):
                err = float(np.max(np.abs(g_ - w.numpy())))
                print(f"  onnxruntime {n}: {list(g_.shape)} max |diff| {err:.2e}")
                assert g_.shape == tuple(w.shape) and err < 1e-3, (n, g_.shape, err)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-o", "--out-dir", default=os.path.join(os.path.dirname(__file__), "hf"))
    p.add_argument("--only", nargs="*", choices=sorted(MODELS))
    p.add_argument("--no-check", action="store_true", help="skip the onnxruntime run")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"onnx {onnx.__version__}", file=sys.stderr)
    for name in a.only or MODELS:
        export(name, a.out_dir, not a.no_check)


if __name__ == "__main__":
    main()
