"""The calibration sweep's random networks (:mod:`sim.synthetic`): valid quantized models,
the same bytes from the same seed, of the kernel kinds and shapes the sweep needs, and
computing what onnxruntime computes (hwgen's executor within one LSB of it). No Verilator."""

import collections

import numpy as np
import onnx
import pytest

from fusion.compiler.plan import compile_model
from fusion.frontend import import_onnx
from fusion.kernels.cache import KernelCache
from fusion.passes.driver import optimize
from fusion.reference import executor
from fusion.runtime.run import random_inputs
from hwgen.presets import DRAM_TEST
from sim.synthetic import network
from tests.fusion.references import check_within_one_lsb, lsb_errors, output_scale, session

SEEDS = range(12)


def test_a_seed_gives_the_same_network_and_seeds_differ():
    a, b = network(3).SerializeToString(), network(3).SerializeToString()
    assert a == b
    assert len({network(s).SerializeToString() for s in range(6)}) == 6


def test_networks_are_mlps_and_cnns_of_the_ops_quantizers_write():
    ops, names = collections.Counter(), set()
    for seed in SEEDS:
        model = network(seed)
        onnx.checker.check_model(model, full_check=True)
        ops.update(n.op_type for n in model.graph.node)
        names.add(model.graph.name.split("_")[1])
    assert names == {"cnn", "mlp"}
    assert {"Conv", "MaxPool", "Add", "Relu", "Gemm", "MatMul", "QuantizeLinear",
            "DequantizeLinear"} <= set(ops)


def test_their_kernels_are_gemms_passes_and_pools_on_a_small_variant():
    kinds = collections.Counter()
    for seed in SEEDS:
        graph = import_onnx(network(seed))
        for fused in (True, False):
            compiled = compile_model(graph, DRAM_TEST, cache=KernelCache(disk=False),
                                     fusion=fused)
            kinds.update(k.spec.kind.name for k in compiled.kernels)
    assert kinds["gemm"] and kinds["pass"] and kinds["max"], kinds


@pytest.mark.parametrize("seed", range(4))
def test_hwgen_computes_what_onnxruntime_computes(seed, tmp_path):
    model = network(seed)
    path = tmp_path / "net.onnx"
    onnx.save(model, str(path))
    graph = optimize(import_onnx(model))
    out = model.graph.output[0].name
    ort, scale = session(path), output_scale(model, out)
    errors = []
    for inputs_seed in range(3):
        x = random_inputs(graph, inputs_seed)
        want = ort.run([out], {k: v for k, v in x.items()})[0]
        errors.append(lsb_errors(executor.run(graph, x)[out], want, scale))
    check_within_one_lsb(np.concatenate(errors), f"network {seed} vs onnxruntime",
                         integer=False)
