#!/usr/bin/env python3
"""Write hetplan's model zoo: small real exporter output with reference outputs.

Each model is a tiny Hugging Face architecture built from a config (or a small
torch.nn module written here) with random weights: torch seed 0, then N(0, 0.02)
noise on every parameter (models/hf/README.md says why). Nothing is downloaded.
Each is exported with one of PyTorch's two exporters (TorchScript,
`dynamo=False`, opset 17; or dynamo, `dynamo=True`, opset 18); a few more are
derived from those exports the way other tools write ONNX: Paddle-style
graphs (every weight a `Constant` node, `p2o.DynamicDimension.N` dims),
onnxruntime quantization (QDQ, QOperator, dynamic) and fp16 conversions.

For each model M it writes into models/zoo/:
  M.onnx   the graph, weights inline
  M.npz    reference inputs (`in:NAME`) and onnxruntime's outputs (`out:NAME`)
           for batch 3 (and a short sequence), written with a fixed zip date
and models/zoo/manifest.json describes them all (test/zoo/zoo_check.py reads
it). Needs torch, transformers, onnx, onnxscript, onnxruntime; see
models/zoo/README.md for the versions.

    python models/export_zoo.py [-o models/zoo] [--only NAME ...] [--list]
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

from zoo_io import bound_dims, op_counts, reference, write_refs  # models/zoo_io.py

import torch
import transformers

BATCH = 3
SEQ = 8
VOCAB = 256
MAX_BYTES = 3 * 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))

warnings.filterwarnings("ignore")


# ---------------------------------------------------------------------------
# inputs


def gen():
    return torch.Generator().manual_seed(1)


def ids(g, b=BATCH, s=SEQ, vocab=VOCAB):
    # Token 0 and 1 are avoided: they are pad ids for some configs.
    return torch.randint(2, vocab, (b, s), generator=g)


def mask(b=BATCH, s=SEQ, pad=2):
    m = torch.ones(b, s, dtype=torch.int64)
    m[0, s - pad:] = 0
    return m


def image(g, b=BATCH, c=3, h=32, w=32):
    return torch.randn(b, c, h, w, generator=g)


def noise(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
        # BatchNorm running stats are buffers: make them non-trivial too.
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


class Wrapper(torch.nn.Module):
    """Calls `fn(model, **inputs)` and returns a tuple of tensors."""

    def __init__(self, model, input_names, fn):
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.fn = fn

    def forward(self, *args):
        return tuple(self.fn(self.model, **dict(zip(self.input_names, args))))


def hf_outputs(*names):
    def fn(model, **kw):
        out = model(**kw, return_dict=True)
        return [out[n] for n in names]
    return fn


# ---------------------------------------------------------------------------
# model builders: each returns a dict with
#   model, inputs (ordered dict of tensors), dynamic (input -> {axis: dim name}),
#   outputs (names), fn (model, **inputs) -> list of tensors,
#   kind, family, and optionally labels (LMs).

LM = dict(kind="lm")


def tf(cls_name, config_name, **cfg):
    config = getattr(transformers, config_name)(**cfg)
    torch.manual_seed(0)
    return noise(getattr(transformers, cls_name)(config))


def bert():
    m = tf("BertModel", "BertConfig", num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
           intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64,
           attn_implementation="eager")
    g = gen()
    return dict(model=m, inputs={"input_ids": ids(g), "attention_mask": mask()},
                dynamic={"input_ids": {0: "batch", 1: "sequence"},
                         "attention_mask": {0: "batch", 1: "sequence"}},
                outputs=["last_hidden_state", "pooler_output"],
                output_dynamic={"last_hidden_state": {0: "batch", 1: "sequence"}},
                fn=hf_outputs("last_hidden_state", "pooler_output"),
                kind="encoder", family="bert")


def distilbert():
    m = tf("DistilBertModel", "DistilBertConfig", n_layers=2, dim=32, n_heads=2, hidden_dim=64,
           vocab_size=VOCAB, max_position_embeddings=64, attn_implementation="eager")
    g = gen()
    return dict(model=m, inputs={"input_ids": ids(g), "attention_mask": mask()},
                dynamic={"input_ids": {0: "batch", 1: "sequence"},
                         "attention_mask": {0: "batch", 1: "sequence"}},
                outputs=["last_hidden_state"], fn=hf_outputs("last_hidden_state"),
                output_dynamic={"last_hidden_state": {0: "batch", 1: "sequence"}},
                kind="encoder", family="distilbert")


def roberta():
    m = tf("RobertaModel", "RobertaConfig", num_hidden_layers=2, hidden_size=32,
           num_attention_heads=2, intermediate_size=64, vocab_size=VOCAB,
           max_position_embeddings=64, type_vocab_size=1)
    g = gen()
    return dict(model=m, inputs={"input_ids": ids(g), "attention_mask": mask()},
                dynamic={"input_ids": {0: "batch", 1: "sequence"},
                         "attention_mask": {0: "batch", 1: "sequence"}},
                outputs=["last_hidden_state", "pooler_output"],
                fn=hf_outputs("last_hidden_state", "pooler_output"),
                kind="encoder", family="roberta")


def bert_cls():
    m = tf("BertForSequenceClassification", "BertConfig", num_hidden_layers=2, hidden_size=32,
           num_attention_heads=2, intermediate_size=64, vocab_size=VOCAB,
           max_position_embeddings=64, num_labels=3)
    g = gen()
    tt = torch.zeros(BATCH, SEQ, dtype=torch.int64)
    tt[:, SEQ // 2:] = 1
    return dict(model=m, inputs={"input_ids": ids(g), "attention_mask": mask(),
                                 "token_type_ids": tt},
                dynamic={n: {0: "batch", 1: "sequence"}
                         for n in ("input_ids", "attention_mask", "token_type_ids")},
                outputs=["logits"], fn=hf_outputs("logits"), kind="encoder", family="bert")


def causal(cls, config, family, attn="eager", **cfg):
    def build():
        base = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=64, vocab_size=VOCAB,
                    max_position_embeddings=64, use_cache=False, attn_implementation=attn)
        base.update(cfg)
        m = tf(cls, config, **base)
        g = gen()

        def fn(model, **kw):
            return [model(**kw, use_cache=False, return_dict=True).logits]
        return dict(model=m, inputs={"input_ids": ids(g), "attention_mask": mask()},
                    dynamic={"input_ids": {0: "batch", 1: "sequence"},
                             "attention_mask": {0: "batch", 1: "sequence"}},
                    outputs=["logits"], fn=fn, kind="lm", family=family,
                    output_dynamic={"logits": {0: "batch", 1: "sequence"}},
                    labels=[BATCH, SEQ])
    return build


def llama_kv(attn):
    """Llama with its KV cache as inputs: one decoding chunk of SEQ tokens after
    SEQ cached ones. past.N.key/value are [batch, kv_heads, past_sequence, 16]."""
    def build():
        m = tf("LlamaForCausalLM", "LlamaConfig", hidden_size=32, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
               vocab_size=VOCAB, max_position_embeddings=64, use_cache=True,
               attn_implementation=attn)
        g = gen()
        inputs = {"input_ids": ids(g)}
        dynamic = {"input_ids": {0: "batch", 1: "sequence"}}
        names = []
        for i in range(2):
            for kv in ("key", "value"):
                n = f"past.{i}.{kv}"
                inputs[n] = torch.randn(BATCH, 2, SEQ, 8, generator=g)
                dynamic[n] = {0: "batch", 2: "past_sequence"}
                names.append(n)

        def fn(model, input_ids, **past):
            from transformers import DynamicCache
            cache = DynamicCache()
            for i in range(2):
                cache.update(past[f"past.{i}.key"], past[f"past.{i}.value"], i)
            out = model(input_ids=input_ids, past_key_values=cache, use_cache=True,
                        return_dict=True)
            res = [out.logits]
            pkv = out.past_key_values
            for i in range(2):
                if hasattr(pkv, "layers"):
                    res += [pkv.layers[i].keys, pkv.layers[i].values]
                else:
                    res += [pkv.key_cache[i], pkv.value_cache[i]]
            return res
        outs = ["logits"] + [f"present.{i}.{kv}" for i in range(2) for kv in ("key", "value")]
        od = {o: {0: "batch", 2: "total_sequence"} for o in outs[1:]}
        od["logits"] = {0: "batch", 1: "sequence"}
        return dict(model=m, inputs=inputs, dynamic=dynamic, outputs=outs, fn=fn,
                    kind="lm-kv", family="llama", output_dynamic=od)
    return build


def moe(cls, config, family, **cfg):
    return causal(cls, config, family, **cfg)


def seq2seq(m, family):
    """An encoder-decoder's export spec: token ids and mask in, decoder ids in, logits out."""
    g = gen()
    return dict(model=m, inputs={"input_ids": ids(g), "attention_mask": mask(),
                                 "decoder_input_ids": ids(g)},
                dynamic={"input_ids": {0: "batch", 1: "sequence"},
                         "attention_mask": {0: "batch", 1: "sequence"},
                         "decoder_input_ids": {0: "batch", 1: "decoder_sequence"}},
                outputs=["logits"], fn=hf_outputs("logits"), kind="seq2seq",
                output_dynamic={"logits": {0: "batch", 1: "decoder_sequence"}}, family=family)


def t5():
    m = tf("T5ForConditionalGeneration", "T5Config", d_model=32, d_kv=8, d_ff=64, num_layers=2,
           num_decoder_layers=2, num_heads=4, vocab_size=VOCAB, decoder_start_token_id=0)
    return seq2seq(m, "t5")


def bart():
    m = tf("BartForConditionalGeneration", "BartConfig", d_model=32, encoder_layers=1,
           decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
           encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB, max_position_embeddings=64)
    return seq2seq(m, "bart")


def whisper():
    m = tf("WhisperForConditionalGeneration", "WhisperConfig", num_mel_bins=16, d_model=32,
           encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
           decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB,
           max_source_positions=16, max_target_positions=32, pad_token_id=0,
           bos_token_id=1, eos_token_id=1, decoder_start_token_id=1)
    g = gen()
    return dict(model=m, inputs={"input_features": torch.randn(BATCH, 16, 32, generator=g),
                                 "decoder_input_ids": ids(g)},
                dynamic={"input_features": {0: "batch"},
                         "decoder_input_ids": {0: "batch", 1: "decoder_sequence"}},
                outputs=["logits"], fn=hf_outputs("logits"), kind="seq2seq",
                output_dynamic={"logits": {0: "batch", 1: "decoder_sequence"}}, family="whisper")


def vision(cls, config, family, outputs, **cfg):
    def build():
        m = tf(cls, config, **cfg)
        g = gen()
        return dict(model=m, inputs={"pixel_values": image(g)},
                    dynamic={"pixel_values": {0: "batch"}}, outputs=outputs,
                    fn=hf_outputs(*outputs), kind="vision", family=family)
    return build


VIT = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
           num_attention_heads=2, intermediate_size=64)


def clip():
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, max_position_embeddings=32, eos_token_id=2)
    vis = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
               image_size=32, patch_size=8)
    config = transformers.CLIPConfig(text_config=text, vision_config=vis, projection_dim=16)
    torch.manual_seed(0)
    m = noise(transformers.CLIPModel(config))
    g = gen()
    return dict(model=m, inputs={"input_ids": ids(g), "attention_mask": mask(),
                                 "pixel_values": image(g)},
                dynamic={"input_ids": {0: "text_batch", 1: "sequence"},
                         "attention_mask": {0: "text_batch", 1: "sequence"},
                         "pixel_values": {0: "image_batch"}},
                outputs=["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"],
                output_dynamic={"logits_per_image": {0: "image_batch", 1: "text_batch"},
                                "logits_per_text": {0: "text_batch", 1: "image_batch"},
                                "text_embeds": {0: "text_batch"},
                                "image_embeds": {0: "image_batch"}},
                fn=hf_outputs("logits_per_image", "logits_per_text", "text_embeds",
                              "image_embeds"),
                kind="two-tower", family="clip")


# --- small torch.nn models


class Cnn(torch.nn.Module):
    """Reflect padding, 5x1 and 1x5 kernels, strided conv, ConvTranspose,
    nearest and bilinear Upsample, BatchNorm, a skip connection."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.pad = nn.ReflectionPad2d(2)
        self.c1 = nn.Conv2d(3, 8, (5, 1))
        self.c2 = nn.Conv2d(8, 8, (1, 5))
        self.bn = nn.BatchNorm2d(8)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
        self.down2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, padding_mode="reflect")
        self.near = nn.Upsample(scale_factor=2, mode="nearest")
        self.bil = nn.Upsample(scale_factor=0.5, mode="bilinear", align_corners=False)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = torch.relu(self.bn(self.c2(self.c1(self.pad(x)))))
        z = torch.relu(self.up(torch.relu(self.down(y)))) + y
        z = self.near(self.down2(z)) + z
        return self.head(self.bil(z))


class BasicBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        nn = torch.nn
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.short is None else self.short(x)))


class ResNet(torch.nn.Module):
    """ResNet-18's layout at width 8 (2 blocks per stage, 4 stages)."""

    def __init__(self, width=8, classes=10):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, c in enumerate([width, 2 * width, 4 * width, 8 * width]):
            blocks += [BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)]
            cin = c
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Yolo(torch.nn.Module):
    """A YOLO-style head: backbone, 3 anchors x (5 + 4 classes) per cell,
    decoded against a grid made with arange/meshgrid from the feature map's
    own size (Range, Shape in the graph), boxes [batch, cells*3, 9]."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(), nn.Conv2d(8, 16, 3, 2, 1),
                                  nn.SiLU(), nn.Conv2d(16, 16, 3, 2, 1), nn.SiLU())
        self.head = nn.Conv2d(16, 3 * 9, 1)
        self.register_buffer("anchors", torch.tensor([[10., 13.], [16., 30.], [33., 23.]]))

    def forward(self, x):
        p = self.head(self.body(x))
        b, _, h, w = p.shape
        p = p.view(b, 3, 9, h, w).permute(0, 1, 3, 4, 2)
        gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32),
                                torch.arange(w, dtype=torch.float32), indexing="ij")
        grid = torch.stack((gx, gy), -1).view(1, 1, h, w, 2)
        xy = (p[..., :2].sigmoid() * 2 - 0.5 + grid) * 8.0
        wh = (p[..., 2:4].sigmoid() * 2) ** 2 * self.anchors.view(1, 3, 1, 1, 2)
        rest = p[..., 4:].sigmoid()
        return torch.cat((xy, wh, rest), -1).reshape(b, -1, 9)


class Gru(torch.nn.Module):
    """batch_first GRU; h0 is [layers, batch, hidden]: batch on dim 1."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(12, 16, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(16, 5)

    def forward(self, x, h0):
        y, h = self.rnn(x, h0)
        return self.out(y), h


class Lstm(torch.nn.Module):
    """Sequence-first LSTM (PyTorch's default): x is [sequence, batch, 12]."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(12, 16, num_layers=1)
        self.out = torch.nn.Linear(16, 5)

    def forward(self, x, h0, c0):
        y, (h, c) = self.rnn(x, (h0, c0))
        return self.out(y), h, c


@torch.jit.script
def branch(x):
    if bool(x.sum() > 0):
        return torch.relu(x) * 2.0
    return torch.tanh(x) - 1.0


class CondTs(torch.nn.Module):
    """Data-dependent branch kept as an ONNX If: a torch.jit.script function
    called from the traced module."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.b(branch(self.a(x)))


class CondDyn(torch.nn.Module):
    """torch.cond: the dynamo exporter writes an If with two subgraphs."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 16)

    def forward(self, x):
        y = self.a(x)
        y = torch.cond(y.sum() > 0, lambda t: torch.relu(t) * 2.0, lambda t: torch.tanh(t) - 1.0,
                       (y,))
        return self.b(y)


def plain(cls, inputs, dynamic, outputs, kind, family, output_dynamic=None):
    def build():
        torch.manual_seed(0)
        m = noise(cls())
        g = gen()
        return dict(model=m, inputs={k: v(g) for k, v in inputs.items()}, dynamic=dynamic,
                    outputs=outputs, fn=lambda model, **kw: list(_tup(model(*kw.values()))),
                    kind=kind, family=family, output_dynamic=output_dynamic or {})
    return build


def _tup(x):
    return x if isinstance(x, tuple) else (x,)


IMG = {"x": lambda g: image(g)}
BATCH0 = {"x": {0: "batch"}}

# name -> (builder, exporter)
EXPORTS = {
    "bert-ts": (bert, "ts"),
    "distilbert-ts": (distilbert, "ts"),
    "roberta-dyn": (roberta, "dynamo"),
    "bert-cls-dyn": (bert_cls, "dynamo"),
    "qwen2-ts": (causal("Qwen2ForCausalLM", "Qwen2Config", "qwen2"), "ts"),
    "mistral-dyn": (causal("MistralForCausalLM", "MistralConfig", "mistral", attn="sdpa",
                           sliding_window=4), "dynamo"),
    "gemma-dyn": (causal("GemmaForCausalLM", "GemmaConfig", "gemma", attn="sdpa", head_dim=8),
                  "dynamo"),
    "llama-kv-ts": (llama_kv("eager"), "ts"),
    "llama-kv-dyn": (llama_kv("sdpa"), "dynamo"),
    "mixtral-ts": (moe("MixtralForCausalLM", "MixtralConfig", "mixtral", num_local_experts=4,
                       num_experts_per_tok=2, experts_implementation="batched_mm"), "ts"),
    "qwen2moe-dyn": (moe("Qwen2MoeForCausalLM", "Qwen2MoeConfig", "qwen2-moe", attn="sdpa",
                         num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                         shared_expert_intermediate_size=32,
                         experts_implementation="batched_mm"), "dynamo"),
    "t5-ts": (t5, "ts"),
    "bart-dyn": (bart, "dynamo"),
    "whisper-ts": (whisper, "ts"),
    "deit-ts": (vision("DeiTModel", "DeiTConfig", "deit", ["last_hidden_state", "pooler_output"],
                       attn_implementation="eager", **VIT), "ts"),
    "vit-cls-dyn": (vision("ViTForImageClassification", "ViTConfig", "vit", ["logits"],
                           num_labels=5, **VIT), "dynamo"),
    "swin-dyn": (vision("SwinModel", "SwinConfig", "swin", ["last_hidden_state", "pooler_output"],
                        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                        num_heads=[1, 2], window_size=4), "dynamo"),
    "convnext-ts": (vision("ConvNextModel", "ConvNextConfig", "convnext",
                           ["last_hidden_state", "pooler_output"], num_channels=3,
                           num_stages=2, hidden_sizes=[8, 16], depths=[1, 1],
                           image_size=32), "ts"),
    "clip-ts": (clip, "ts"),
    "cnn-ts": (plain(Cnn, IMG, BATCH0, ["y"], "vision", "cnn"), "ts"),
    "cnn-dyn": (plain(Cnn, IMG, BATCH0, ["y"], "vision", "cnn"), "dynamo"),
    "resnet-ts": (plain(ResNet, IMG, BATCH0, ["logits"], "vision", "resnet"), "ts"),
    "yolo-ts": (plain(Yolo, {"x": lambda g: image(g, h=64, w=48)},
                      {"x": {0: "batch", 2: "height", 3: "width"}}, ["boxes"], "detection",
                      "yolo", {"boxes": {0: "batch", 1: "boxes"}}), "ts"),
    "gru-ts": (plain(Gru, {"x": lambda g: torch.randn(BATCH, SEQ, 12, generator=g),
                           "h0": lambda g: torch.randn(2, BATCH, 16, generator=g)},
                     {"x": {0: "batch", 1: "sequence"}, "h0": {1: "batch"}}, ["y", "hn"],
                     "recurrent", "gru",
                     {"y": {0: "batch", 1: "sequence"}, "hn": {1: "batch"}}), "ts"),
    "lstm-ts": (plain(Lstm, {"x": lambda g: torch.randn(SEQ, BATCH, 12, generator=g),
                             "h0": lambda g: torch.randn(1, BATCH, 16, generator=g),
                             "c0": lambda g: torch.randn(1, BATCH, 16, generator=g)},
                      {"x": {0: "sequence", 1: "batch"}, "h0": {1: "batch"}, "c0": {1: "batch"}},
                      ["y", "hn", "cn"], "recurrent", "lstm",
                      {"y": {0: "sequence", 1: "batch"}, "hn": {1: "batch"},
                       "cn": {1: "batch"}}), "ts"),
    "gru-dyn": (plain(Gru, {"x": lambda g: torch.randn(BATCH, SEQ, 12, generator=g),
                            "h0": lambda g: torch.randn(2, BATCH, 16, generator=g)},
                      {"x": {0: "batch", 1: "sequence"}, "h0": {1: "batch"}}, ["y", "hn"],
                      "recurrent", "gru"), "dynamo"),
    "if-ts": (plain(CondTs, {"x": lambda g: torch.randn(BATCH, 16, generator=g)}, BATCH0, ["y"],
                    "control-flow", "if"), "ts"),
    "if-dyn": (plain(CondDyn, {"x": lambda g: torch.randn(BATCH, 16, generator=g)}, BATCH0, ["y"],
                     "control-flow", "if"), "dynamo"),
}

# Derived from an export above: name -> (source, transform)
DERIVED = {
    "paddle-bert": ("bert-ts", "paddle"),
    "paddle-resnet": ("resnet-ts", "paddle"),
    "paddle-cnn": ("cnn-ts", "paddle"),
    "qdq-resnet": ("resnet-ts", "qdq"),
    "qop-cnn": ("cnn-ts", "qoperator"),
    "qop-bert": ("bert-ts", "qoperator"),
    "dynq-bert": ("bert-ts", "dynamic-quant"),
    "fp16-deit": ("deit-ts", "fp16"),
    "fp16-resnet": ("resnet-ts", "fp16"),
}


# ---------------------------------------------------------------------------
# export


def export(name, out_dir):
    builder, exporter = EXPORTS[name]
    spec = builder()
    model, inputs = spec["model"], spec["inputs"]
    input_names, output_names = list(inputs), spec["outputs"]
    wrapper = Wrapper(model, input_names, spec["fn"]).eval()
    args = tuple(inputs.values())
    path = os.path.join(out_dir, name + ".onnx")
    if exporter == "ts":
        opset = 17
        axes = {n: dict(d) for n, d in spec["dynamic"].items()}
        out_dyn = spec.get("output_dynamic") or {}
        for o in output_names:
            axes[o] = out_dyn.get(o, {0: "batch"})
        with torch.no_grad():
            torch.onnx.export(wrapper, args, path, dynamo=False, opset_version=opset,
                              input_names=input_names, output_names=output_names,
                              dynamic_axes=axes, do_constant_folding=True)
    else:
        opset = 18
        dyn = tuple({a: torch.export.Dim.DYNAMIC for a in spec["dynamic"].get(n, {})}
                    or None for n in input_names)
        with torch.no_grad():
            program = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset,
                                        input_names=input_names, output_names=output_names,
                                        dynamic_shapes={"args": dyn}, external_data=False)
        m = program.model_proto
        rename_dims(m, spec, input_names)
        onnx.save(m, path)
    m = onnx.load(path)
    strip_metadata(m)
    onnx.save(m, path)
    ref = reference(path, {n: t.numpy() for n, t in inputs.items()})
    with torch.no_grad():
        want = wrapper(*args)
    for n, got, w in zip(output_names, ref.values(), want):
        err = float(np.max(np.abs(got - w.numpy()))) if got.size else 0.0
        assert got.shape == tuple(w.shape) and err < 1e-3, (name, n, got.shape, w.shape, err)
    return finish(name, path, ref, {n: t.numpy() for n, t in inputs.items()}, dict(
        exporter="torchscript" if exporter == "ts" else "dynamo", opset=opset,
        family=spec["family"], kind=spec["kind"], labels=spec.get("labels"),
        source=type(model).__name__), out_dir)


def rename_dims(m, spec, input_names):
    """The dynamo exporter names dynamic dims s0, s1, ...; give the graph's
    interface the names of the spec (batch, sequence, ...), as the
    TorchScript exports have them, everywhere they occur."""
    mapping = {}
    for vi in m.graph.input:
        for axis, name in spec["dynamic"].get(vi.name, {}).items():
            d = vi.type.tensor_type.shape.dim[axis]
            if d.dim_param and d.dim_param not in mapping:
                mapping[d.dim_param] = name
    if not mapping:
        return
    import re
    pat = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(mapping, key=len,
                                                                     reverse=True)) + r")\b")

    def fix(vis):
        for vi in vis:
            if not vi.type.HasField("tensor_type"):
                continue
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param:
                    d.dim_param = pat.sub(lambda mo: mapping[mo.group(1)], d.dim_param)

    def walk(g):
        fix(g.input)
        fix(g.output)
        fix(g.value_info)
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)
    walk(m.graph)


def strip_metadata(m):
    """Drop the dynamo exporter's per-node stack traces (file paths of this
    machine) so that the files do not depend on where the venv lives."""
    def walk(g):
        for node in g.node:
            del node.metadata_props[:]
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)
    walk(m.graph)
    del m.metadata_props[:]


def interface_dims(m):
    """dim name -> value, from the graph inputs' declared symbolic dims and the
    reference inputs' shapes."""
    return [(vi.name, [d.dim_param if d.dim_param else int(d.dim_value)
                       for d in vi.type.tensor_type.shape.dim]) for vi in m.graph.input]


def finish(name, path, ref, feeds, meta, out_dir):
    size = os.path.getsize(path)
    assert size < MAX_BYTES, f"{path} is {size} bytes"
    m = onnx.load(path)
    onnx.checker.check_model(m)
    declared = dict(interface_dims(m))
    dims = bound_dims(name, declared, feeds)
    write_refs(os.path.join(out_dir, name + ".npz"), feeds, ref)
    row = dict(file=name + ".onnx", ref=name + ".npz", **meta,
               bytes=size, nodes=len(m.graph.node),
               batch=BATCH, dims=dims,
               inputs={k: dict(shape=list(v.shape), dtype=str(v.dtype), dims=declared[k])
                       for k, v in feeds.items()},
               outputs={k: dict(shape=list(v.shape), dtype=str(v.dtype)) for k, v in ref.items()},
               ops=op_counts(m))
    if row.get("labels") is None:
        row.pop("labels", None)
    else:
        row["labels"] = dict(shape=row["labels"], dtype="int64", classes=VOCAB)
    print(f"{name}: {size:,} B, {len(m.graph.node)} nodes, dims {dims}", file=sys.stderr)
    return row


# ---------------------------------------------------------------------------
# derived models


def to_paddle(m):
    """Every initializer becomes a Constant node (as Paddle2ONNX writes
    weights), dims are renamed p2o.DynamicDimension.N, and nodes get
    Paddle-like names (p2o.<Op>.<N>)."""
    consts = []
    for init in m.graph.initializer:
        consts.append(helper.make_node("Constant", [], [init.name],
                                       name=f"p2o.Constant.{len(consts)}", value=init))
    del m.graph.initializer[:]
    # Initializers listed as graph inputs (IR < 4) would dangle.
    names = {c.output[0] for c in consts}
    keep = [i for i in m.graph.input if i.name not in names]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    counts = {}
    for node in m.graph.node:
        k = counts.get(node.op_type, 0)
        counts[node.op_type] = k + 1
        node.name = f"p2o.{node.op_type}.{k}"
    nodes = consts + list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    mapping = {}
    for vis in (m.graph.input, m.graph.output, m.graph.value_info):
        for vi in vis:
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param:
                    if d.dim_param not in mapping:
                        mapping[d.dim_param] = f"p2o.DynamicDimension.{len(mapping)}"
                    d.dim_param = mapping[d.dim_param]
    m.producer_name = "PaddlePaddle"
    m.producer_version = "paddle2onnx-style (made by models/export_zoo.py)"
    return m


def to_fp16(m):
    """float32 -> float16 everywhere, inputs and outputs included
    (onnxconverter_common's convert_float_to_float16, keep_io_types=False)."""
    from onnxconverter_common import float16
    m = float16.convert_float_to_float16(m, keep_io_types=False)
    # The converter leaves Cast(to=FLOAT) nodes (the TorchScript exporter's
    # mask arithmetic) as they are; make them cast to float16 too.
    def walk(g):
        for node in g.node:
            for a in node.attribute:
                if node.op_type == "Cast" and a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                    a.i = onnx.TensorProto.FLOAT16
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
    walk(m.graph)
    return m


class Reader:
    def __init__(self, feeds):
        self.feeds = [feeds]

    def get_next(self):
        return self.feeds.pop() if self.feeds else None


def derive(name, out_dir, rows):
    src, how = DERIVED[name]
    src_path = os.path.join(out_dir, src + ".onnx")
    src_row = rows[src]
    with np.load(os.path.join(out_dir, src + ".npz")) as z:
        feeds = {k[3:]: z[k] for k in z.files if k.startswith("in:")}
    path = os.path.join(out_dir, name + ".onnx")
    meta = dict(exporter=src_row["exporter"] + "+" + how, opset=src_row["opset"],
                family=src_row["family"], kind=src_row["kind"], source=src)
    if how == "paddle":
        m = to_paddle(onnx.load(src_path))
        onnx.save(m, path)
    elif how == "fp16":
        m = to_fp16(onnx.load(src_path))
        onnx.save(m, path)
        feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v
                 for k, v in feeds.items()}
    else:
        from onnxruntime import quantization as q
        tmp = path + ".pre.onnx"
        q.quant_pre_process(src_path, tmp, skip_symbolic_shape=True)
        if how == "dynamic-quant":
            q.quantize_dynamic(tmp, path, weight_type=q.QuantType.QInt8)
        else:
            fmt = q.QuantFormat.QDQ if how == "qdq" else q.QuantFormat.QOperator
            q.quantize_static(tmp, path, Reader(dict(feeds)), quant_format=fmt,
                              activation_type=q.QuantType.QUInt8,
                              weight_type=q.QuantType.QInt8, per_channel=(how == "qdq"))
        os.remove(tmp)
        m = onnx.load(path)
        strip_metadata(m)
        onnx.save(m, path)
    ref = reference(path, feeds)
    row = finish(name, path, ref, feeds, meta, out_dir)
    # How far the derived model's outputs are from the source's (quantization
    # and fp16 change the numbers; the harness compares with this file's own
    # onnxruntime outputs).
    with np.load(os.path.join(out_dir, src + ".npz")) as z:
        errs = []
        for k, v in ref.items():
            if "out:" + k in z.files:
                r = z["out:" + k].astype(np.float64)
                errs.append(float(np.max(np.abs(v.astype(np.float64) - r)) /
                                  max(float(np.max(np.abs(r))), 1e-30)))
        row["vs_source"] = round(max(errs), 6) if errs else None
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-o", "--out-dir", default=os.path.join(HERE, "zoo"))
    p.add_argument("--only", nargs="*")
    p.add_argument("--list", action="store_true")
    p.add_argument("--keep-going", action="store_true", help="report a failed export, go on")
    a = p.parse_args()
    if a.list:
        print("\n".join(list(EXPORTS) + list(DERIVED)))
        return 0
    os.makedirs(a.out_dir, exist_ok=True)
    manifest_path = os.path.join(a.out_dir, "manifest.json")
    rows = {}
    if os.path.exists(manifest_path):
        rows = {r["name"]: r for r in json.load(open(manifest_path))["models"]}
    import onnxruntime
    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "transformers": transformers.__version__, "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__, "numpy": np.__version__}
    try:
        import onnxscript
        versions["onnxscript"] = onnxscript.__version__
    except ImportError:
        pass
    try:
        import onnxconverter_common
        versions["onnxconverter_common"] = onnxconverter_common.__version__
    except ImportError:
        pass
    failed = []
    for name in a.only or (list(EXPORTS) + list(DERIVED)):
        try:
            row = export(name, a.out_dir) if name in EXPORTS else derive(name, a.out_dir, rows)
        except Exception as e:  # noqa: BLE001
            if not a.keep_going:
                raise
            print(f"{name}: export FAILED: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            failed.append(name)
            continue
        rows[name] = dict(name=name, **row)
    order = list(EXPORTS) + list(DERIVED)
    models = [rows[n] for n in order if n in rows]
    with open(manifest_path, "w") as f:
        json.dump({"versions": versions, "batch": BATCH, "sequence": SEQ, "models": models}, f,
                  indent=1)
        f.write("\n")
    total = sum(r["bytes"] for r in models)
    print(f"{len(models)} models, {total:,} bytes of .onnx; failed: {failed or 'none'}",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
