"""Synthetic quantized models for tests, benchmarks and the demo (built with the builder API)."""

from __future__ import annotations

import numpy as np

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Graph, Quant


def mlp(layers: int = 20, width: int = 64, batch: int = 8, *, seed: int = 0,
        in_dtype: str = "int8", relu: bool = True, per_channel: bool = True,
        name: str | None = None) -> Graph:
    """An int8 MLP: ``layers`` x (qmatmul -> bias_add -> requant -> relu), ``width`` wide.

    Weights are random int8 with per-output-channel scales (or one scale); each layer's
    output scale is chosen so the int8 range is used without saturating everything.
    """
    rng = np.random.default_rng(seed)
    b = GraphBuilder(name or f"mlp{layers}x{width}")
    x = b.input("x", (batch, width), in_dtype,
                quant=Quant(0.05, 128 if in_dtype == "uint8" else 0))
    act_scale = 0.05
    for i in range(layers):
        w = rng.integers(-127, 128, (width, width)).astype(np.int8)
        if per_channel:
            scales = tuple(float(s) for s in rng.uniform(0.002, 0.004, width))
            wq = Quant(scales, (0,) * width, 1)
        else:
            scales = (0.003,)
            wq = Quant(0.003, 0)
        wt = b.const(f"w{i}", w, quant=wq)
        acc = b.qmatmul(x, wt, name=f"fc{i}/qmatmul")
        bias = rng.integers(-2000, 2000, width).astype(np.int32)
        acc = b.bias_add(acc, b.const(f"b{i}", bias), name=f"fc{i}/bias_add")
        # An accumulator's spread grows like sqrt(width) * 127 * (activation spread): map a
        # few sigma onto int8, so that some values saturate but most do not.
        out_scale = act_scale * float(np.mean(scales)) * np.sqrt(width) * 80
        x = b.requant(acc, Quant(out_scale, 0), name=f"fc{i}/requant")
        if relu:
            x = b.relu(x, name=f"fc{i}/relu")
        act_scale = out_scale
    return b.build(outputs=[x])
