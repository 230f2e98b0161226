"""The runtime's dispatch check reads one metadata schema for every kind: a kernel compiled for
other params, or given operands of another shape or type, is refused before it runs (no
simulator needed)."""

import dataclasses

import numpy as np
import pytest

from fusion.compiler.plan import compile_model
from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import GraphError, Quant
from fusion.runtime.run import check_dispatch
from hwgen.config import EPILOGUE_STAGES, VariantConfig

CONFIG = VariantConfig(rows=4, cols=4, epilogue=EPILOGUE_STAGES)


def _model():
    """A GEMM with its epilogue, a standalone requantize, and a max pool: three kinds."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("kinds")
    x = b.input("x", (1, 4, 8, 8), "int8", quant=Quant(0.05, 0))
    y = b.maxpool(x, (2, 2), strides=(2, 2), name="pool")
    flat = b.reshape(y, (4, 16), name="flat")
    w = b.const("w", rng.integers(-127, 128, (16, 8)).astype(np.int8),
                quant=Quant(tuple([0.003] * 8), (0,) * 8, 1))
    acc = b.qmatmul(flat, w, name="mm")
    out = b.requant(acc, Quant(0.1, 0), name="req")
    return b.build(outputs=[out])


@pytest.fixture(scope="module")
def compiled():
    return compile_model(_model(), CONFIG, optimized=True, fusion=False)


def _operands(compiled, step):
    from fusion.reference import executor

    graph = compiled.graph
    env = dict(graph.initializers)
    x = np.random.default_rng(1).integers(-128, 128, (1, 4, 8, 8)).astype(np.int8)
    env.update(executor.coerce_inputs(graph, {"x": x}))
    for s in compiled.steps:
        if s is step:
            break
        nodes = [s.node] if hasattr(s, "node") else [graph.node(n) for n in s.spec.nodes]
        for node in nodes:
            executor.evaluate_node(graph, node, env)
    return step.spec.operands(graph, env, compiled.config)


def test_every_kind_passes_its_own_dispatch_check(compiled):
    kinds = set()
    for step in compiled.kernels:
        check_dispatch(step, _operands(compiled, step))
        kinds.add(step.spec.kind.name)
    assert kinds == {"gemm", "pass", "max"}


def test_a_kernel_compiled_for_other_params_is_refused(compiled):
    step = next(k for k in compiled.kernels if k.spec.kind.name == "pass")
    ops = _operands(compiled, step)
    epilogue = step.spec.params.epilogue
    other = dataclasses.replace(step, spec=step.spec.with_params(dataclasses.replace(
        step.spec.params, epilogue=dataclasses.replace(epilogue, zp=epilogue.zp + 1))))
    with pytest.raises(GraphError, match=f"kernel '{step.name}' was compiled for quant "):
        check_dispatch(other, ops)
    with pytest.raises(GraphError, match=r"was compiled for operand src of shape"):
        check_dispatch(step, {**ops, "src": ops["src"][:1]})
    with pytest.raises(GraphError, match=r"was compiled for src as int32, not int8"):
        check_dispatch(step, {**ops, "src": ops["src"].astype(np.int8)})
    with pytest.raises(GraphError, match=r"no value for its operand 'src'"):
        check_dispatch(step, {})
