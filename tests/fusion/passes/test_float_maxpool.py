"""``X -> MaxPool -> Q`` of a float ``X`` (Inception-v1's pool after LRN, a host op) becomes
``Q(X) -> maxpool`` on the integers: exact, since quantizing is monotone."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from examples.exact_reference import reference_session
from fusion.frontend import import_onnx
from fusion.passes import driver
from fusion.reference import executor


@pytest.mark.parametrize("pads, ceil", [((0, 0, 0, 0), 0), ((1, 1, 1, 1), 0), ((0, 0, 0, 0), 1)])
def test_the_pool_runs_on_the_quantized_values(pads, ceil):
    x = np.random.default_rng(7).normal(0, 2, (1, 3, 9, 9)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),  # a float op before the pool
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=list(pads), ceil_mode=ceil),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    out = (1, 3, 5, 5) if pads[0] or ceil else (1, 3, 4, 4)
    graph = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(np.array(0.031, np.float32), "s"),
         numpy_helper.from_array(np.array(-20, np.int8), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    optimized = driver.optimize(import_onnx(model), legalize=False)
    assert [n.op for n in optimized.nodes].count("maxpool") == 1
    assert "MaxPool" not in [n.op for n in optimized.nodes]
    want = reference_session(model).run(["y"], {"x": x})[0]
    np.testing.assert_array_equal(executor.run(optimized, {"x": x})["y"], want.astype(np.float32))
