"""Block-pruned models, quantized by onnxruntime: the inputs of issue 33's weight-sparsity table.

Block pruning is how edge models are made smaller: the float weights of every convolution and
dense layer, viewed as the ``K x N`` matrix a GEMM multiplies by (a Dense layer's ``W.T``; a
convolution's ``[C*kh*kw, F]`` in im2col order), are cut into blocks of ``BLOCK x BLOCK``
(the 8x8 array's weight blocks), and the given share of the blocks with the smallest L1 norm
per layer is set to zero. Depthwise convolutions are left dense (their weights are
block-diagonal already). Then the model is quantized as the MLPerf Tiny models are
(:func:`examples.build_real_models.quantize`: QDQ, per-channel int8 weights, whose zero stays
exactly zero).

The models: the 256-256-256-64 MLP of issue 33 (run at batch 32), the FC autoencoder and
ResNet-8 of ``examples/real``, each at 0, 50, 75 and 90% of its weight blocks pruned. They
are built on demand into ``build/pruned/`` (a few seconds each), never checked in: their bytes
depend on onnxruntime's float calibration, as ``examples/build_real_models.py`` explains.

    .venv/bin/python -m examples.build_pruned_models
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from examples.build_real_models import _Net, fc_autoencoder, quantize, resnet8

OUT = Path(__file__).resolve().parent.parent / "build" / "pruned"
#: Rows and columns of a pruned block: the 8x8 array's weight block.
BLOCK = 8
#: Shares of weight blocks pruned.
FRACTIONS = (0.0, 0.5, 0.75, 0.9)
#: Input shape of each model (batch 1; the MLP runs batched).
SHAPES = {"mlp": (1, 256), "fc_autoencoder": (1, 640), "resnet8": (1, 3, 32, 32)}


def mlp() -> onnx.ModelProto:
    """256-256-256-64, ReLU between, as PyTorch exports Linear layers (Gemm, transB)."""
    net = _Net(133)
    net.shapes["x"] = SHAPES["mlp"]
    x = net.dense("x", "fc1", 256)
    x = net.dense(x, "fc2", 256)
    return net.model("mlp", net.dense(x, "fc3", 64, relu=False), input_shape=SHAPES["mlp"])


BUILDERS = {"mlp": mlp, "fc_autoencoder": fc_autoencoder, "resnet8": resnet8}


def prune_blocks(b: np.ndarray, fraction: float, block: int = BLOCK) -> np.ndarray:
    """``b`` (a GEMM's ``K x N`` weights) with the ``fraction`` of its ``block x block`` blocks
    of least L1 norm set to zero (ties broken by position, so the result is deterministic)."""
    k, n = b.shape
    kb, nb = -(-k // block), -(-n // block)
    padded = np.zeros((kb * block, nb * block), b.dtype)
    padded[:k, :n] = b
    norms = np.abs(padded).reshape(kb, block, nb, block).sum(axis=(1, 3)).ravel()
    drop = np.argsort(norms, kind="stable")[:int(round(fraction * norms.size))]
    mask = np.ones(norms.size, bool)
    mask[drop] = False
    keep = np.repeat(np.repeat(mask.reshape(kb, nb), block, 0), block, 1)[:k, :n]
    return np.where(keep, b, 0).astype(b.dtype)


def pruned(model: onnx.ModelProto, fraction: float) -> onnx.ModelProto:
    """``model`` with the weights of its Conv (not depthwise), Gemm and MatMul nodes
    block-pruned by :func:`prune_blocks`, in the GEMM view each runs as."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type not in ("Conv", "Gemm", "MatMul") or node.input[1] not in inits:
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            if attrs.get("group", 1) != 1:
                continue
            f = w.shape[0]
            b = prune_blocks(w.reshape(f, -1).T, fraction)  # [C*kh*kw, F]: im2col order
            new = b.T.reshape(w.shape)
        elif node.op_type == "Gemm" and attrs.get("transB", 0):
            new = prune_blocks(w.T, fraction).T
        else:
            new = prune_blocks(w, fraction)
        inits[node.input[1]].CopyFrom(numpy_helper.from_array(new.astype(w.dtype),
                                                              node.input[1]))
    return model


def sample(name: str, seed: int) -> np.ndarray:
    """A seeded float input of ``name`` (seeds 0 to 15 calibrate)."""
    return np.random.default_rng(seed).normal(0, 1, SHAPES[name]).astype(np.float32)


def path_of(name: str, fraction: float) -> Path:
    return OUT / f"{name}_p{round(fraction * 100):02d}_qdq.onnx"


def build(name: str, fraction: float) -> Path:
    """The pruned and quantized model's file, built if it is not there yet."""
    path = path_of(name, fraction)
    if not path.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        quantize(name, pruned(BUILDERS[name](), fraction), "qdq", path,
                 sample=lambda seed: sample(name, seed))
    return path


def main() -> None:
    for name in BUILDERS:
        for fraction in FRACTIONS:
            print(f"wrote {build(name, fraction)}")


if __name__ == "__main__":
    main()
