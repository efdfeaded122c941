#!/usr/bin/env python3
"""Generates the ONNX test fixtures in fixtures/onnx/ (committed) and their shape oracles.

Run with the truth venv (torch, torchvision, onnx):
    ~/.venvs/truth/bin/python validation/make_onnx_fixtures.py

* torchvision models (weights=None) exported with torch.onnx.export (TorchScript exporter, opset 17,
  TrainingMode.TRAINING so BatchNormalization and Dropout keep their training semantics, no constant
  folding, dynamic batch axis named `batch`). Their initializers are moved to an external data file
  `NAME.onnx.data` that is NOT committed (.gitignore): the committed graph references data that is
  missing, which is exactly what vramscope must cope with (it never reads initializer data).
* resnet18 through the dynamo exporter (`dynamo=True`): no module scopes in node names.
* the models of validation/onnx_models.py (LSTM, bidirectional GRU, an embedding + transformer
  text classifier with dynamic `batch`/`sequence` axes, the same with attention written out),
  exported the same way (`make_onnx_fixtures.py attention_text_classifier` exports one); the truth tool
  measures the same classes (fixtures/truth/onnx_models.jsonl).
* hand-made models (onnx.helper): dynamic `batch`/`sequence` axes with Shape->Gather->Concat->Reshape
  chains, Slice, Expand, ConstantOfShape; a small external-data model whose data file IS committed;
  1-D/3-D convolutions with every auto_pad mode; com.microsoft::Attention and the opset-23
  Attention op; and broken files (truncated, garbage, cyclic, absurd shapes, unsupported ops,
  dangling inputs, bad LSTM/GRU/Attention/Conv attributes).
* NAME.shapes.json: for every value, the shape Python's onnx.shape_inference gives (ints, or strings
  for symbolic dims), the oracle the Rust shape inference is tested against.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "onnx")
os.makedirs(OUT, exist_ok=True)


def path(name):
    return os.path.join(OUT, name)


def dims_of(vi):
    out = []
    for d in vi.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            out.append("?")
    return out


def write_oracle(model, name):
    inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    g = inferred.graph
    shapes = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = dims_of(vi)
    with open(path(name + ".shapes.json"), "w") as f:
        json.dump(shapes, f, indent=0, sort_keys=True)
        f.write("\n")


def save_external(model, name, size_threshold=0):
    """Saves NAME.onnx with every initializer (of at least `size_threshold` bytes) in NAME.onnx.data."""
    data = name + ".onnx.data"
    if os.path.exists(path(data)):
        os.remove(path(data))
    onnx.save_model(model, path(name + ".onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=data, size_threshold=size_threshold)


def export_torchvision(name):
    import torch
    import torchvision
    import warnings
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None)
    m.train()
    x = torch.randn(2, 3, 224, 224)
    tmp = path(name + ".tmp.onnx")
    torch.onnx.export(m, (x,), tmp, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    model = onnx.load(tmp)
    os.remove(tmp)
    write_oracle(model, name)
    save_external(model, name)


def export_dynamo(name):
    """A torchvision model through the dynamo exporter (torch.onnx.export(dynamo=True), its
    defaults): node names without module scopes, weights named by their full paths; external
    data not committed (NAME.dynamo.onnx.data)."""
    import torch
    import torchvision
    import warnings
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None)
    m.train()
    tmp = path(name + ".dynamo.tmp.onnx")
    torch.onnx.export(m, (torch.randn(2, 3, 224, 224),), tmp, dynamo=True)
    model = onnx.load(tmp)
    for f in (tmp, tmp + ".data"):
        if os.path.exists(f):
            os.remove(f)
    # the dynamo exporter writes shape constants (ReduceMean axes, Reshape shapes) as
    # initializers: keep those small ones inline, since the data file is not committed
    save_external(model, name + ".dynamo", size_threshold=1024)


def export_custom(name):
    """One of validation/onnx_models.py's models, exported like the torchvision ones (dynamic
    batch and sequence axes)."""
    import torch
    import warnings
    warnings.filterwarnings("ignore")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from onnx_models import MODELS
    build, example, input_name, axes = MODELS[name]
    torch.manual_seed(0)
    m = build()
    m.train()
    tmp = path(name + ".tmp.onnx")
    torch.onnx.export(m, (example(),), tmp, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=[input_name], output_names=["logits"],
                      dynamic_axes={input_name: axes, "logits": {0: "batch"}})
    model = onnx.load(tmp)
    os.remove(tmp)
    write_oracle(model, name)
    save_external(model, name)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def make_dynamic_mlp():
    """A transformer-ish block over [batch, sequence, 64] with shape arithmetic."""
    H, D, HEADS = 64, 128, 4
    f = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    inits = [
        init("ln.weight", np.ones(H, np.float32)), init("ln.bias", np.zeros(H, np.float32)),
        init("qkv.weight_t", rng.standard_normal((H, 3 * H)).astype(np.float32)),
        init("qkv.bias", np.zeros(3 * H, np.float32)),
        init("fc1.weight_t", rng.standard_normal((H, D)).astype(np.float32)),
        init("fc1.bias", np.zeros(D, np.float32)),
        init("fc2.weight_t", rng.standard_normal((D, H)).astype(np.float32)),
        init("fc2.bias", np.zeros(H, np.float32)),
        init("head.weight", rng.standard_normal((10, H)).astype(np.float32)),
        init("head.bias", np.zeros(10, np.float32)),
        init("c0", np.array([0], np.int64)), init("c1", np.array([1], np.int64)),
        init("heads_dims", np.array([HEADS, H // HEADS], np.int64)),
        init("minus1", np.array([-1], np.int64)),
        init("scale", np.array(0.25, np.float32)),
    ]
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "ln.weight", "ln.bias"], ["ln_out"], name="/ln/LayerNormalization", axis=-1),
        n("MatMul", ["ln_out", "qkv.weight_t"], ["qkv_mm"], name="/qkv/MatMul"),
        n("Add", ["qkv_mm", "qkv.bias"], ["qkv"], name="/qkv/Add"),
        n("Split", ["qkv"], ["q", "k", "v"], name="/attn/Split", axis=2, num_outputs=3),
        n("Shape", ["x"], ["x_shape"], name="/attn/Shape"),
        n("Gather", ["x_shape", "c0"], ["b_dim"], name="/attn/Gather", axis=0),
        n("Gather", ["x_shape", "c1"], ["s_dim"], name="/attn/Gather_1", axis=0),
        n("Concat", ["b_dim", "s_dim", "heads_dims"], ["heads_shape"], name="/attn/Concat", axis=0),
        n("Reshape", ["q", "heads_shape"], ["q4"], name="/attn/Reshape"),
        n("Reshape", ["k", "heads_shape"], ["k4"], name="/attn/Reshape_1"),
        n("Reshape", ["v", "heads_shape"], ["v4"], name="/attn/Reshape_2"),
        n("Transpose", ["q4"], ["qt"], name="/attn/Transpose", perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], ["kt"], name="/attn/Transpose_1", perm=[0, 2, 3, 1]),
        n("Transpose", ["v4"], ["vt"], name="/attn/Transpose_2", perm=[0, 2, 1, 3]),
        n("MatMul", ["qt", "kt"], ["scores"], name="/attn/MatMul"),
        n("Mul", ["scores", "scale"], ["scaled"], name="/attn/Mul"),
        n("Softmax", ["scaled"], ["probs"], name="/attn/Softmax", axis=-1),
        n("MatMul", ["probs", "vt"], ["ctx"], name="/attn/MatMul_1"),
        n("Transpose", ["ctx"], ["ctx_t"], name="/attn/Transpose_3", perm=[0, 2, 1, 3]),
        n("Concat", ["b_dim", "s_dim", "minus1"], ["merge_shape"], name="/attn/Concat_1", axis=0),
        n("Reshape", ["ctx_t", "merge_shape"], ["attn_out"], name="/attn/Reshape_3"),
        n("Add", ["attn_out", "x"], ["res1"], name="/Add"),
        n("MatMul", ["res1", "fc1.weight_t"], ["h_mm"], name="/fc1/MatMul"),
        n("Add", ["h_mm", "fc1.bias"], ["h"], name="/fc1/Add"),
        n("Gelu", ["h"], ["h_act"], name="/act/Gelu", domain=""),
        n("MatMul", ["h_act", "fc2.weight_t"], ["o_mm"], name="/fc2/MatMul"),
        n("Add", ["o_mm", "fc2.bias"], ["o"], name="/fc2/Add"),
        n("Add", ["o", "res1"], ["res2"], name="/Add_1"),
        n("ConstantOfShape", ["heads_dims"], ["zeros"], name="/ConstantOfShape",
          value=helper.make_tensor("v", f, [1], [0.0])),
        n("Slice", ["res2", "c0", "c1", "c1"], ["first_tok"], name="/Slice"),
        n("Squeeze", ["first_tok", "c1"], ["cls"], name="/Squeeze"),
        n("Gemm", ["cls", "head.weight", "head.bias"], ["logits"], name="/head/Gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "dynamic_mlp",
        [helper.make_tensor_value_info("x", f, ["batch", "sequence", H])],
        [helper.make_tensor_value_info("logits", f, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(model)
    write_oracle(model, "dynamic_mlp")
    onnx.save_model(model, path("dynamic_mlp.onnx"))


def make_small_cnn(name, external):
    """Conv/BN/pool/misc ops on a static 1x3x32x32 input; `external` puts initializers in a
    committed NAME.onnx.data file."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(1)
    inits = [
        init("conv.weight", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
        init("conv.bias", np.zeros(8, np.float32)),
        init("bn.weight", np.ones(8, np.float32)), init("bn.bias", np.zeros(8, np.float32)),
        init("bn.running_mean", np.zeros(8, np.float32)), init("bn.running_var", np.ones(8, np.float32)),
        init("up.weight", rng.standard_normal((8, 4, 2, 2)).astype(np.float32)),
        init("gn.weight", np.ones(4, np.float32)), init("gn.bias", np.zeros(4, np.float32)),
        init("fc.weight", rng.standard_normal((5, 4)).astype(np.float32)),
        init("fc.bias", np.zeros(5, np.float32)),
        init("two", np.array(2.0, np.float32)),
        init("split", np.array([2, 2], np.int64)),
        init("axes23", np.array([2, 3], np.int64)),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="/conv/Conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        n("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"], ["b"], name="/bn/BatchNormalization"),
        n("LeakyRelu", ["b"], ["r"], name="/act/LeakyRelu", alpha=0.1),
        n("MaxPool", ["r"], ["p"], name="/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
        n("ConvTranspose", ["p", "up.weight"], ["u"], name="/up/ConvTranspose", kernel_shape=[2, 2], strides=[2, 2]),
        n("GroupNormalization", ["u", "gn.weight", "gn.bias"], ["g"], name="/gn/GroupNormalization", num_groups=2),
        n("Split", ["g", "split"], ["s0", "s1"], name="/Split", axis=1),
        n("Sigmoid", ["s0"], ["sg"], name="/Sigmoid"),
        n("Tanh", ["s1"], ["th"], name="/Tanh"),
        n("Concat", ["sg", "th"], ["cat"], name="/Concat", axis=1),
        n("Pow", ["cat", "two"], ["sq"], name="/Pow"),
        n("Sqrt", ["sq"], ["rt"], name="/Sqrt"),
        n("Clip", ["rt"], ["cl"], name="/Clip"),
        n("AveragePool", ["cl"], ["ap"], name="/AveragePool", kernel_shape=[2, 2], strides=[2, 2]),
        n("ReduceMean", ["ap", "axes23"], ["m"], name="/ReduceMean", keepdims=0),
        n("Gemm", ["m", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", f, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", f, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    write_oracle(model, name)
    if external:
        save_external(model, name)
    else:
        onnx.save_model(model, path(name + ".onnx"))


def make_conv_nd():
    """1-D and 3-D convolutions and every auto_pad mode (SAME_UPPER with an even kernel pads
    asymmetrically) over a [batch, 2, 8, 16, 16] volume."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(3)
    w = lambda *s: rng.standard_normal(s).astype(np.float32)
    inits = [
        init("c3a.weight", w(4, 2, 3, 3, 3)), init("c3a.bias", np.zeros(4, np.float32)),
        init("c3b.weight", w(4, 4, 2, 2, 2)),
        init("flat", np.array([0, 4, 256], np.int64)),
        init("c1a.weight", w(8, 4, 4)), init("c1a.bias", np.zeros(8, np.float32)),
        init("c1b.weight", w(8, 8, 4)),
        init("to2d", np.array([0, 8, 8, 16], np.int64)),
        init("c2.weight", w(6, 8, 2, 3)),
        init("axes", np.array([2, 3], np.int64)),
        init("fc.weight", w(10, 6)), init("fc.bias", np.zeros(10, np.float32)),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "c3a.weight", "c3a.bias"], ["a"], name="/c3a/Conv", pads=[1, 1, 1, 1, 1, 1]),
        n("Relu", ["a"], ["ar"], name="/act/Relu"),
        n("Conv", ["ar", "c3b.weight"], ["b"], name="/c3b/Conv", strides=[2, 2, 2], auto_pad="VALID"),
        n("Reshape", ["b", "flat"], ["bf"], name="/Reshape"),
        n("Conv", ["bf", "c1a.weight", "c1a.bias"], ["c"], name="/c1a/Conv", strides=[2], auto_pad="SAME_UPPER"),
        n("Conv", ["c", "c1b.weight"], ["d"], name="/c1b/Conv", auto_pad="SAME_UPPER"),
        n("Reshape", ["d", "to2d"], ["d2"], name="/Reshape_1"),
        n("Conv", ["d2", "c2.weight"], ["e"], name="/c2/Conv", auto_pad="SAME_LOWER"),
        n("ReduceMean", ["e", "axes"], ["m"], name="/ReduceMean", keepdims=0),
        n("Gemm", ["m", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "conv_nd", [helper.make_tensor_value_info("x", f, ["batch", 2, 8, 16, 16])],
        [helper.make_tensor_value_info("logits", f, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    write_oracle(model, "conv_nd")
    onnx.save_model(model, path("conv_nd.onnx"))


def make_attention_ops():
    """com.microsoft::Attention (packed QKV weights, 4 heads) then the ONNX Attention op (opset
    23, 3-D q/k/v with q_num_heads/kv_num_heads, causal) over [batch, sequence, 64]."""
    f = TensorProto.FLOAT
    rng = np.random.default_rng(4)
    w = lambda *s: rng.standard_normal(s).astype(np.float32)
    inits = [
        init("attn.weight", w(64, 192)), init("attn.bias", np.zeros(192, np.float32)),
        init("ln.weight", np.ones(64, np.float32)), init("ln.bias", np.zeros(64, np.float32)),
        init("axes", np.array([1], np.int64)),
        init("head.weight", w(5, 64)), init("head.bias", np.zeros(5, np.float32)),
    ]
    n = helper.make_node
    nodes = [
        n("Attention", ["x", "attn.weight", "attn.bias"], ["a"], name="/attn/Attention",
          domain="com.microsoft", num_heads=4),
        n("LayerNormalization", ["a", "ln.weight", "ln.bias"], ["h"], name="/ln/LayerNormalization", axis=-1),
        n("Attention", ["h", "h", "h"], ["y"], name="/self/Attention", q_num_heads=4, kv_num_heads=4,
          is_causal=1),
        n("ReduceMean", ["y", "axes"], ["m"], name="/ReduceMean", keepdims=0),
        n("Gemm", ["m", "head.weight", "head.bias"], ["logits"], name="/head/Gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "attention_ops", [helper.make_tensor_value_info("x", f, ["batch", "sequence", 64])],
        [helper.make_tensor_value_info("logits", f, ["batch", 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23),
                                                    helper.make_opsetid("com.microsoft", 1)])
    write_oracle(model, "attention_ops")
    onnx.save_model(model, path("attention_ops.onnx"))


def make_broken():
    with open(path("resnet18.onnx"), "rb") as fh:
        good = fh.read()
    with open(path("truncated.onnx"), "wb") as fh:
        fh.write(good[: len(good) // 2])
    rng = np.random.default_rng(2)
    with open(path("garbage.onnx"), "wb") as fh:
        fh.write(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    f = TensorProto.FLOAT
    n = helper.make_node
    # cyclic: a -> b -> a
    g = helper.make_graph(
        [n("Relu", ["x", "b"], ["a"], name="/r1/Relu"), n("Add", ["a", "x"], ["b"], name="/add/Add")],
        "cyclic", [helper.make_tensor_value_info("x", f, [1, 4])],
        [helper.make_tensor_value_info("b", f, [1, 4])])
    onnx.save_model(helper.make_model(g), path("cyclic.onnx"))
    # absurd: a static input of 2^62 elements
    g = helper.make_graph(
        [n("Relu", ["x"], ["y"], name="/relu/Relu")], "absurd",
        [helper.make_tensor_value_info("x", f, [1 << 31, 1 << 31, 4])],
        [helper.make_tensor_value_info("y", f, [1 << 31, 1 << 31, 4])])
    onnx.save_model(helper.make_model(g), path("absurd_shape.onnx"))
    # absurd initializer dims: a 2^40 x 2^40 weight (only its header exists)
    w = TensorProto(name="fc.weight", data_type=f, dims=[1 << 40, 1 << 40])
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="nowhere.bin")
    g = helper.make_graph(
        [n("Gemm", ["x", "fc.weight"], ["y"], name="/fc/Gemm", transB=1)], "absurd_init",
        [helper.make_tensor_value_info("x", f, [1, 1 << 40])],
        [helper.make_tensor_value_info("y", f, [1, 1 << 40])], [w])
    onnx.save_model(helper.make_model(g), path("absurd_initializer.onnx"))
    # unsupported ops, named in the error
    g = helper.make_graph(
        [n("Relu", ["x"], ["r"], name="/relu/Relu"),
         n("NonZero", ["r"], ["nz"], name="/mask/NonZero"),
         n("Det", ["r"], ["y"], name="/det/Det")], "unsupported",
        [helper.make_tensor_value_info("x", f, [2, 4, 4])],
        [helper.make_tensor_value_info("y", f, [2])])
    onnx.save_model(helper.make_model(g), path("unsupported.onnx"))
    # new ops with bad attributes or shapes (the checker is not run on these)
    def rnn_file(name, op, gates, **attrs):
        H, F_ = 8, 4
        inits = [init("W", np.zeros((1, gates * H, F_), np.float32)),
                 init("R", np.zeros((1, gates * H, H), np.float32))]
        nodes = [n(op, ["x", "W", "R"], ["y"], name=f"/rnn/{op}", **attrs),
                 n("ReduceMean", ["y"], ["m"], name="/ReduceMean", keepdims=0)]
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", f, [3, 2, F_])],
                              [helper.make_tensor_value_info("m", f, [2, 8])], inits)
        onnx.save_model(helper.make_model(g), path(name + ".onnx"))
    rnn_file("bad_lstm_hidden", "LSTM", 4, hidden_size=6)
    rnn_file("bad_gru_direction", "GRU", 3, hidden_size=8, direction="sideways")
    g = helper.make_graph(
        [n("Attention", ["x", "x", "x"], ["y"], name="/attn/Attention")], "bad_attention",
        [helper.make_tensor_value_info("x", f, [2, 5, 16])],
        [helper.make_tensor_value_info("y", f, [2, 5, 16])])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)]),
                    path("bad_attention.onnx"))
    g = helper.make_graph(
        [n("Conv", ["x", "w"], ["y"], name="/conv/Conv", auto_pad="SAME_MIDDLE")], "bad_auto_pad",
        [helper.make_tensor_value_info("x", f, [1, 2, 8])],
        [helper.make_tensor_value_info("y", f, [1, 3, 8])],
        [init("w", np.zeros((3, 2, 3), np.float32))])
    onnx.save_model(helper.make_model(g), path("bad_auto_pad.onnx"))
    # a node input nobody produces
    g = helper.make_graph(
        [n("Add", ["x", "ghost"], ["y"], name="/add/Add")], "dangling",
        [helper.make_tensor_value_info("x", f, [1, 4])],
        [helper.make_tensor_value_info("y", f, [1, 4])])
    onnx.save_model(helper.make_model(g), path("dangling.onnx"))


TORCHVISION = ["resnet18", "mobilenet_v3_small", "squeezenet1_1", "resnet50", "densenet121", "vit_b_16"]
CUSTOM = ["lstm_classifier", "gru_classifier", "text_classifier", "volume_classifier",
          "attention_text_classifier"]


if __name__ == "__main__":
    which = sys.argv[1:] or ["torchvision", "dynamo", "custom", "hand", "broken"]
    # one custom model by its name (`attention_text_classifier`)
    for name in [w for w in which if w in CUSTOM]:
        export_custom(name)
        print("exported", name)
    if "torchvision" in which:
        for name in TORCHVISION:
            export_torchvision(name)
            print("exported", name)
    if "dynamo" in which:
        export_dynamo("resnet18")
        print("exported resnet18 (dynamo)")
    if "custom" in which:
        for name in CUSTOM:
            export_custom(name)
            print("exported", name)
    if "hand" in which:
        make_dynamic_mlp()
        make_small_cnn("small_cnn", external=False)
        make_small_cnn("external_cnn", external=True)
        make_conv_nd()
        make_attention_ops()
    if "broken" in which:
        make_broken()
    print("fixtures in", os.path.normpath(OUT))
