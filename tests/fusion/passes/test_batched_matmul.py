"""fusion/passes/batched_matmul.py: a batched qmatmul with a constant weight as one 2-D GEMM.

MatMulInteger models (exact integer outputs) with a constant ``[*batch, K, N]`` weight, int8
and uint8, with per-tensor and per-column weight zero points, a batched and a shared
(2-D) activation: the legalized graph has one 2-D ``qmatmul`` and runs bit for bit like
``onnx.reference`` (hypothesis draws the shapes, the zero points and the values).
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

from fusion.frontend import import_onnx
from fusion.passes import batched_matmul
from fusion.passes.driver import optimize
from fusion.reference import executor
from tests.fusion.passes.test_qdq_fold_onnx import model, node

TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def matmul_integer(a_shape, w, wz, az):
    inits = {"w": w, "az": az, "wz": wz}
    y_shape = np.matmul(np.zeros(a_shape), np.zeros(w.shape)).shape
    return model([node("MatMulInteger", ["x", "w", "az", "wz"], "y")], inits, a_shape, y_shape,
                 TensorProto.INT8, TensorProto.INT32)


@settings(max_examples=25, deadline=None)
@given(batch=st.sampled_from([(2,), (3,), (2, 2)]), m=st.integers(1, 3), k=st.integers(1, 5),
       n=st.integers(1, 4), dtype=st.sampled_from(["int8", "uint8"]),
       per_column=st.booleans(), shared=st.booleans(), seed=st.integers(0, 2**16))
def test_batched_matmul_matches_onnx(batch, m, k, n, dtype, per_column, shared, seed):
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    w = rng.integers(lo, hi, (*batch, k, n)).astype(dtype)
    wz = (rng.integers(lo, hi, n) if per_column else np.array(rng.integers(lo, hi))).astype(dtype)
    a_shape = (m, k) if shared else (*batch, m, k)
    proto = matmul_integer(a_shape, w, wz, np.int8(rng.integers(-128, 128)))
    graph = optimize(import_onnx(proto))
    gemms = [nd for nd in graph.nodes if nd.op == "qmatmul"]
    assert len(gemms) == 1 and len(graph.tensors[gemms[0].inputs[1]].shape) == 2
    assert graph.tensors[gemms[0].inputs[1]].dtype == "int8"
    x = rng.integers(-128, 128, a_shape).astype(np.int8)
    want = ReferenceEvaluator(proto).run(None, {"x": x})[0]
    got = executor.run(graph, {"x": x})["y"]
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_block_diagonal_weight_fills_with_zero_points():
    w = np.arange(12, dtype=np.int64).reshape(2, 2, 3)
    out = batched_matmul.batched_weight(w, np.array([7, 8, 9]), shared=False)
    assert out.shape == (4, 6)
    assert np.array_equal(out[:2, :3], w[0]) and np.array_equal(out[2:, 3:], w[1])
    assert np.array_equal(out[:2, 3:], [[7, 8, 9]] * 2)
    assert np.array_equal(out[2:, :3], [[7, 8, 9]] * 2)
    side = batched_matmul.batched_weight(w, np.zeros(3), shared=True)
    assert np.array_equal(side, np.concatenate([w[0], w[1]], axis=1))


def test_other_batch_forms_are_left_for_lowering():
    """An activation whose batch axes differ from the weight's is not rewritten."""
    w = np.ones((2, 3, 4), np.int8)
    proto = matmul_integer((1, 2, 5, 3), w, np.int8(0), np.int8(0))
    graph = import_onnx(proto)
    assert batched_matmul.run(graph) == (graph, False)
