"""The ONNX graph of a static int8 model (:mod:`bertkit.inference.int8_plan`): the float graph with each of the
plan's int8 layers rewritten as QuantizeLinear / DequantizeLinear (QDQ) around its product, carrying the plan's
own numbers, which ONNX Runtime fuses into int8 products.

For a layer the plan runs in int8, the product ``x Wᵀ`` of the float graph (a MatMul on ``Wᵀ`` or a Gemm on ``W``,
found by its weight's values) becomes::

    x -> [Mul 1/s] -> QuantizeLinear(scale, zero_point: uint8) -> DequantizeLinear -> MatMul <- DequantizeLinear(q)

with ``s`` the layer's SmoothQuant vector (when it has one), ``scale`` / ``zero_point`` its calibrated activation
grid, and ``q`` / its per-output-channel scales the int8 weights the static kernel runs (of ``W``, or of ``W``'s
int8 round trip times ``s``: :func:`bertkit.modeling.quantization.quantize_weight`; 7-bit where the CPU's int8
products saturate, as the kernel does: :func:`bertkit.modeling.quantization.seven_bit`). Layers the plan keeps
float stay float, embedding tables too: the graph computes what bertkit's static kernels compute, up to rounding.
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

from bertkit import devices
from bertkit.modeling.fast import Linear
from bertkit.modeling.quantization import dequantize_weight, quantize_weight, seven_bit


def static_int8_graph(source: str | os.PathLike, target: str | os.PathLike, model: nn.Module, plan) -> int:
    """Write ``target``: the float graph ``source`` (of ``model``, the module ``plan``'s layer names are relative
    to) with every int8 layer of ``plan`` in QDQ form (see the module doc). Returns how many products were
    rewritten (a layer the graph never runs, a sentence model's pooler, has none); ValueError when none of the
    plan's int8 layers has a product in the graph."""
    import onnx
    from onnx import helper, numpy_helper

    graph_model = onnx.load(os.fspath(source))
    graph = graph_model.graph
    layers = {name: m for name, m in model.named_modules() if isinstance(m, Linear)}
    wanted = {name: layers[name] for name in plan.int8_layers if name in layers}
    by_value = {_key(m.weight.detach().float().numpy()): name for name, m in wanted.items()}
    initializers = {init.name: init for init in graph.initializer}
    # a weight the graph transposes as it runs (an LM decoder tied to the embedding table the Gather reads)
    transposes = {node.output[0]: node.input[0] for node in graph.node if node.op_type == "Transpose"
                  and node.input[0] in initializers and len(initializers[node.input[0]].dims) == 2}
    rewritten, nodes = set(), []
    for node in graph.node:
        name, transposed = _layer_of(node, initializers, transposes, by_value)
        if name is None or name in rewritten:
            nodes.append(node)
            continue
        entry = plan.layers[name]
        prefix = f"qdq.{name}"
        x = node.input[0]
        new = []
        if entry.smooth is not None:
            inverse = numpy_helper.from_array(np.reciprocal(entry.smooth.numpy()).astype(np.float32), f"{prefix}.1/s")
            graph.initializer.append(inverse)
            new.append(helper.make_node("Mul", [x, inverse.name], [f"{prefix}.x_s"]))
            x = f"{prefix}.x_s"
        graph.initializer.extend([
            numpy_helper.from_array(np.array(entry.scale, dtype=np.float32), f"{prefix}.x_scale"),
            numpy_helper.from_array(np.array(entry.zero_point, dtype=np.uint8), f"{prefix}.x_zero")])
        new += [helper.make_node("QuantizeLinear", [x, f"{prefix}.x_scale", f"{prefix}.x_zero"], [f"{prefix}.xq"]),
                helper.make_node("DequantizeLinear", [f"{prefix}.xq", f"{prefix}.x_scale", f"{prefix}.x_zero"],
                                 [f"{prefix}.xdq"])]
        q, scale = _int8_weight(wanted[name], entry.smooth)
        q = q.T.copy() if transposed else q  # MatMul holds [in, out]: the channels are axis 1
        graph.initializer.extend([
            numpy_helper.from_array(q, f"{prefix}.wq"),
            numpy_helper.from_array(scale, f"{prefix}.w_scale"),
            numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{prefix}.w_zero")])
        new.append(helper.make_node("DequantizeLinear", [f"{prefix}.wq", f"{prefix}.w_scale", f"{prefix}.w_zero"],
                                    [f"{prefix}.wdq"], axis=1 if transposed else 0))
        inputs = [f"{prefix}.xdq", f"{prefix}.wdq", *node.input[2:]]
        new.append(helper.make_node(node.op_type, inputs, list(node.output), name=node.name,
                                    **{a.name: helper.get_attribute_value(a) for a in node.attribute}))
        nodes += new
        rewritten.add(name)
    if wanted and not rewritten:  # a layer missing alone is one the graph never runs (a sentence model's pooler)
        raise ValueError(f"the ONNX graph has no product of any of the plan's {len(wanted)} int8 layers (such as "
                         f"{sorted(wanted)[0]!r}); the graph was not exported from this model.")
    del graph.node[:]
    graph.node.extend(nodes)
    _drop_unused(graph)
    onnx.save(graph_model, os.fspath(target))
    return len(rewritten)


def _key(array: np.ndarray) -> tuple:
    """What finds a weight among the graph's initializers: its shape and bytes (float32, ``[out, in]``)."""
    return array.shape, np.ascontiguousarray(array, dtype=np.float32).tobytes()


def _layer_of(node, initializers: dict, transposes: dict, by_value: dict) -> tuple[str | None, bool]:
    """``(layer name, whether the graph holds its weight transposed)`` of a MatMul / Gemm whose weight (an
    initializer, or one transposed by ``transposes``' node: output -> initializer) is one of ``by_value``'s, else
    ``(None, False)``."""
    from onnx import helper, numpy_helper

    if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2:
        return None, False
    if node.input[1] in initializers:
        weight = numpy_helper.to_array(initializers[node.input[1]])
    elif node.input[1] in transposes:
        weight = numpy_helper.to_array(initializers[transposes[node.input[1]]]).T
    else:
        return None, False
    if weight.ndim != 2:
        return None, False
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Gemm" and (attributes.get("transA", 0) or attributes.get("alpha", 1.0) != 1.0):
        return None, False
    transposed = node.op_type == "MatMul" or not attributes.get("transB", 0)
    name = by_value.get(_key(weight.T if transposed else weight))
    return name, transposed


def _int8_weight(layer: Linear, smooth: torch.Tensor | None) -> tuple[np.ndarray, np.ndarray]:
    """``(q int8 [out, in], scale float32 [out])``: the int8 weights the static kernel runs for ``layer``."""
    weight = layer.weight.detach().float()
    if smooth is not None:  # as the kernel: the int8 round trip of the weight, smoothed
        weight = dequantize_weight(*quantize_weight(weight)) * smooth.to(weight)
    q, scale = quantize_weight(weight)
    if devices.int8_saturates():
        q, scale = seven_bit(q, scale)
    return q.numpy(), scale.numpy().astype(np.float32)


def _drop_unused(graph) -> None:
    """Remove what no node reads any more: the Transpose nodes of replaced weights, then the float weights."""
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    nodes = [node for node in graph.node if node.op_type != "Transpose" or any(o in used for o in node.output)]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
