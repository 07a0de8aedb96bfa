#!/usr/bin/env python3
"""Writes the ONNX graphs the Rust peers (onnxruntime, rten) run: one small graph
per operator and variant, with symbolic dimensions, plus manifest.json.

Variants are listed in the order a peer tries them: ONNX Runtime's fused
operators first where they exist, the same maths as basic nodes last. A peer
uses the first variant that loads, runs and matches the reference, and reports
which one it used.

Usage: make_models.py OUT_DIR
"""

import json
import os
import sys

import onnx
from onnx import TensorProto, helper

F = TensorProto.FLOAT
OPSET = 23
RMS_EPS = 1e-6
LN_EPS = 1e-5


def model(nodes, inputs, outputs, inits=(), ms=False):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    imports = [helper.make_opsetid("", OPSET)]
    if ms:
        imports.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(g, opset_imports=imports, producer_name="taskgrain-bench-peers")
    m.ir_version = 10
    return m


def t(name, dims):
    return helper.make_tensor_value_info(name, F, dims)


def const(name, vals, dtype=F, dims=None):
    return helper.make_tensor(name, dtype, dims if dims is not None else [len(vals)], vals)


def n(op, ins, outs, domain="", **attrs):
    return helper.make_node(op, ins, outs, domain=domain or None, **attrs)


RC = ["R", "C"]


def rmsnorm():
    ins = [t("x", RC), t("w", ["C"])]
    out = [t("y", RC)]
    yield "rms23", "RMSNormalization (opset 23)", model(
        [n("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=RMS_EPS)], ins, out
    )
    yield "simplified", "SimplifiedLayerNormalization (ORT fused)", model(
        [n("SimplifiedLayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=RMS_EPS)], ins, out
    )
    yield "basic", "Mul, ReduceMean, Add, Sqrt, Div, Mul", model(
        [
            n("Mul", ["x", "x"], ["sq"]),
            n("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
            n("Add", ["ms", "eps"], ["mse"]),
            n("Sqrt", ["mse"], ["rms"]),
            n("Div", ["x", "rms"], ["xn"]),
            n("Mul", ["xn", "w"], ["y"]),
        ],
        ins,
        out,
        [const("axes", [-1], TensorProto.INT64), const("eps", [RMS_EPS], dims=[])],
    )


def layernorm():
    ins = [t("x", RC), t("w", ["C"]), t("b", ["C"])]
    out = [t("y", RC)]
    yield "ln17", "LayerNormalization (opset 17)", model(
        [n("LayerNormalization", ["x", "w", "b"], ["y"], axis=-1, epsilon=LN_EPS)], ins, out
    )
    yield "basic", "ReduceMean, Sub, Mul, ReduceMean, Add, Sqrt, Div, Mul, Add", model(
        [
            n("ReduceMean", ["x", "axes"], ["mu"], keepdims=1),
            n("Sub", ["x", "mu"], ["d"]),
            n("Mul", ["d", "d"], ["d2"]),
            n("ReduceMean", ["d2", "axes"], ["var"], keepdims=1),
            n("Add", ["var", "eps"], ["vare"]),
            n("Sqrt", ["vare"], ["sd"]),
            n("Div", ["d", "sd"], ["xn"]),
            n("Mul", ["xn", "w"], ["xw"]),
            n("Add", ["xw", "b"], ["y"]),
        ],
        ins,
        out,
        [const("axes", [-1], TensorProto.INT64), const("eps", [LN_EPS], dims=[])],
    )


def masked_softmax():
    yield "basic", "Add, Softmax", model(
        [n("Add", ["x", "mask"], ["z"]), n("Softmax", ["z"], ["y"], axis=-1)],
        [t("x", RC), t("mask", RC)],
        [t("y", RC)],
    )


def swiglu():
    yield "basic", "Sigmoid, Mul, Mul", model(
        [n("Sigmoid", ["g"], ["s"]), n("Mul", ["g", "s"], ["silu"]), n("Mul", ["silu", "u"], ["y"])],
        [t("g", RC), t("u", RC)],
        [t("y", RC)],
    )


def gelu_residual():
    ins = [t("x", RC), t("r", RC)]
    out = [t("y", RC)]
    yield "gelu20", "Gelu (opset 20, exact), Add", model(
        [n("Gelu", ["x"], ["g"], approximate="none"), n("Add", ["g", "r"], ["y"])], ins, out
    )
    yield "basic", "Div, Erf, Add, Mul, Mul, Add", model(
        [
            n("Div", ["x", "sqrt2"], ["xs"]),
            n("Erf", ["xs"], ["e"]),
            n("Add", ["e", "one"], ["e1"]),
            n("Mul", ["x", "e1"], ["xe"]),
            n("Mul", ["xe", "half"], ["g"]),
            n("Add", ["g", "r"], ["y"]),
        ],
        ins,
        out,
        [
            const("sqrt2", [2**0.5], dims=[]),
            const("one", [1.0], dims=[]),
            const("half", [0.5], dims=[]),
        ],
    )


def rope():
    # Rows are the sequence: x [1, R, C] with one head, cos/sin [1, R, C/2]
    # (opset 23 takes 3-D caches when no position ids are given).
    yield "rotary23", "RotaryEmbedding (opset 23, rotate-half)", model(
        [n("RotaryEmbedding", ["x", "cos", "sin"], ["y"], interleaved=0, num_heads=1)],
        [t("x", ["B", "R", "C"]), t("cos", ["B", "R", "H"]), t("sin", ["B", "R", "H"])],
        [t("y", ["B", "R", "C"])],
    )
    yield "basic", "Split, Mul, Sub, Add, Concat", model(
        [
            n("Split", ["x"], ["a", "b"], axis=-1, num_outputs=2),
            n("Mul", ["a", "cos"], ["ac"]),
            n("Mul", ["b", "sin"], ["bs"]),
            n("Sub", ["ac", "bs"], ["y1"]),
            n("Mul", ["b", "cos"], ["bc"]),
            n("Mul", ["a", "sin"], ["as"]),
            n("Add", ["bc", "as"], ["y2"]),
            n("Concat", ["y1", "y2"], ["y"], axis=-1),
        ],
        [t("x", ["B", "R", "C"]), t("cos", ["B", "R", "H"]), t("sin", ["B", "R", "H"])],
        [t("y", ["B", "R", "C"])],
    )


def attention():
    ins = [t("q", ["B", "Hq", "Sq", "Dk"]), t("k", ["B", "Hkv", "Skv", "Dk"]), t("v", ["B", "Hkv", "Skv", "Dv"])]
    out = [t("y", ["B", "Hq", "Sq", "Dv"])]
    yield "attention23", "Attention (opset 23, GQA, 4-D)", model(
        [n("Attention", ["q", "k", "v"], ["y"])], ins, out
    )
    # Query head h reads kv head h / (Hq/Hkv): [B, Hq, Sq, Dk] viewed as
    # [B, Hkv, G·Sq, Dk] lines every group of query heads up with its kv head.
    i64 = TensorProto.INT64
    yield "basic", "MatMul, Mul, Softmax, MatMul (GQA by reshape)", model(
        [
            n("Shape", ["q"], ["b"], start=0, end=1),
            n("Shape", ["k"], ["hkv"], start=1, end=2),
            n("Shape", ["q"], ["dk"], start=3, end=4),
            n("Shape", ["q"], ["bhq"], start=0, end=2),
            n("Shape", ["v"], ["dv"], start=3, end=4),
            n("Concat", ["b", "hkv", "m1", "dk"], ["qshape"], axis=0),
            n("Reshape", ["q", "qshape"], ["qg"]),
            n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
            n("MatMul", ["qg", "kt"], ["s0"]),
            n("Cast", ["dk"], ["dkf"], to=F),
            n("Sqrt", ["dkf"], ["sdk"]),
            n("Reciprocal", ["sdk"], ["scale"]),
            n("Mul", ["s0", "scale"], ["s"]),
            n("Softmax", ["s"], ["p"], axis=-1),
            n("MatMul", ["p", "v"], ["og"]),
            n("Concat", ["bhq", "m1", "dv"], ["oshape"], axis=0),
            n("Reshape", ["og", "oshape"], ["y"]),
        ],
        ins,
        out,
        [const("m1", [-1], i64)],
    )


def floor():
    yield "basic", "Add of two 1-element tensors", model(
        [n("Add", ["a", "b"], ["y"])], [t("a", [1]), t("b", [1])], [t("y", [1])]
    )


OPS = {
    "rmsnorm": rmsnorm,
    "layernorm": layernorm,
    "masked_softmax": masked_softmax,
    "swiglu": swiglu,
    "gelu_residual": gelu_residual,
    "rope": rope,
    "attention": attention,
    "floor": floor,
}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    manifest = {"onnx": onnx.__version__, "opset": OPSET, "ops": {}}
    for op, gen in OPS.items():
        entries = []
        for kind, desc, m in gen():
            onnx.checker.check_model(m) if kind == "basic" else None
            fname = f"{op}.{kind}.onnx"
            onnx.save(m, os.path.join(out, fname))
            entries.append({"file": fname, "variant": kind, "fused": kind != "basic", "nodes": desc})
        manifest["ops"][op] = entries
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {sum(len(v) for v in manifest['ops'].values())} models to {out}")


if __name__ == "__main__":
    main()
