"""The graph IR: structure queries, identity, immutability and its errors."""

import numpy as np
import pytest

from fusion.ir.graph import Graph, GraphError, Node, Quant, Tensor


def chain(order=(0, 1, 2), weight=1):
    t = {"x": Tensor("x", (2, 3), "int8", Quant((0.5,), (0,))),
         "w": Tensor("w", (3, 4), "int8", Quant((0.25,), (0,))),
         "y": Tensor("y", (2, 4), "int32"), "z": Tensor("z", (2, 4), "int32"),
         "u": Tensor("u", (2, 4), "int32")}
    nodes = [Node("mm", "qmatmul", ("x", "w"), ("y",)), Node("r", "relu", ("y",), ("z",)),
             Node("c", "clamp", ("z",), ("u",), {"lo": 0, "hi": 9})]
    return Graph(nodes=[nodes[i] for i in order], tensors=t, inputs=("x",), outputs=("u",),
                 initializers={"w": np.full((3, 4), weight, np.int8)}, name="g")


def test_topological_order_producers_and_consumers():
    g = chain(order=(2, 0, 1))
    assert [n.name for n in g.topo_order()] == ["mm", "r", "c"]
    assert g.producer("y").name == "mm" and g.producer("x") is None
    assert [n.name for n in g.consumers("y")] == ["r"]
    assert g.node("c").attr("hi") == 9 and g.node("c").attr("missing", 5) == 5


def test_structural_equality_and_signature_ignore_stored_order_only():
    a, b = chain(), chain(order=(1, 2, 0))
    assert a == b and a.signature() == b.signature()
    c = chain(weight=2)  # same structure, other constant values
    assert a != c and a.signature() != c.signature()
    d = a.replace(name="other")  # the name is not part of the identity
    assert d.signature() == a.signature()


def test_graph_is_immutable():
    g = chain()
    with pytest.raises(ValueError):
        g.initializers["w"][0, 0] = 3


def test_initializers_are_copied_once_and_shared_by_graphs_made_from_them():
    source = np.full((3, 4), 1, np.int8)
    g = chain().replace(initializers={"w": source})
    source[0, 0] = 7  # a writable array given is copied: the graph does not see this
    assert g.initializers["w"][0, 0] == 1 and not g.initializers["w"].flags.writeable
    h = g.replace(name="edited")  # an edit's graph shares the frozen arrays, never copies
    assert h.initializers["w"] is g.initializers["w"]
    base = np.full((6, 4), 1, np.int8)
    view = base[:3]
    view.setflags(write=False)  # read-only, but a view of a writable array: copied
    k = chain().replace(initializers={"w": view})
    base[0, 0] = 9
    assert k.initializers["w"][0, 0] == 1
    with pytest.raises(TypeError):
        g.tensors["q"] = Tensor("q", (1,), "int8")
    with pytest.raises(AttributeError):
        g.nodes = ()


@pytest.mark.parametrize(("change", "message"), [
    (lambda n: n + [Node("mm2", "relu", ("y",), ("z",))], "produced by both 'r' and 'mm2'"),
    (lambda n: n + [Node("mm", "relu", ("u",), ("v",))], "two nodes are named 'mm'"),
    (lambda n: [Node("mm", "qmatmul", ("x", "b"), ("y",))] + n[1:],
     "reads 'b'.*missing initializer"),
])
def test_malformed_graphs_are_refused(change, message):
    g = chain()
    tensors = dict(g.tensors) | {"v": Tensor("v", (2, 4), "int32"),
                                 "b": Tensor("b", (3, 4), "int8")}
    with pytest.raises(GraphError, match=message):
        Graph(nodes=change(list(g.nodes)), tensors=tensors, inputs=g.inputs, outputs=g.outputs,
              initializers=g.initializers)


def test_bad_tensors_and_quantization_are_refused():
    with pytest.raises(GraphError, match="dtype 'float64'"):
        Tensor("t", (1,), "float64")
    with pytest.raises(GraphError, match="positive and finite"):
        Quant((0.0,), (0,))
    with pytest.raises(GraphError, match="give `axis` for per-channel"):
        Quant((1.0, 2.0), (0, 0))
    for bad in (float("nan"), float("inf"), -0.5):
        with pytest.raises(GraphError, match="positive and finite"):
            Quant((1.0, bad), (0, 0), axis=0)


def test_quantization_holds_python_numbers_whatever_it_is_given():
    # converted as arrays (the passes make hundreds), to the values element by element gives
    scale = np.array([0.5, 0.1, 1 / 3], dtype=np.float32)
    for zero in (np.array([1, -2, 3], dtype=np.int8), [1, -2, 3], np.array([1.0, -2.0, 3.7])):
        q = Quant(scale, zero, axis=0)
        assert q.scale == tuple(float(s) for s in scale)
        assert q.zero_point == (1, -2, 3)
        assert all(type(v) is float for v in q.scale)
        assert all(type(z) is int for z in q.zero_point)
    assert Quant(0.25, np.int64(4)) == Quant((0.25,), (4,))


def test_node_attributes_are_frozen_to_python_values():
    node = Node("n", "op", ("a",), ("b",), {"k": [1, 2], "f": np.array([1.5]),
                                            "i": np.int32(3), "nested": [[1, np.int8(2)]]})
    assert node.attr_dict == {"k": (1, 2), "f": (1.5,), "i": 3, "nested": ((1, 2),)}
    assert type(node.attr("nested")[0][1]) is int
