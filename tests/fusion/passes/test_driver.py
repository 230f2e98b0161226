"""The pass driver: fixed point, the round limit and its error, the default pipelines."""

import numpy as np
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import dce, identity
from fusion.passes.driver import PassError, PassLog, optimize, run_to_fixed_point
from tests.helpers.pass_testing import assert_graphs_equal


def small_graph():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3), "int32")
    t = b.op("Identity", x, name="id")
    b.relu(x, name="dead")
    return b.build([b.clamp(t, 0, 9, name="c")])


def test_runs_until_a_round_changes_nothing():
    log = PassLog()
    got = run_to_fixed_point(small_graph(), [identity.run, dce.run], log=log)
    e = GraphBuilder("g")
    x = e.input("x", (2, 3), "int32")
    assert_graphs_equal(got, e.build([e.clamp(x, 0, 9, name="c")]))
    assert log.rows == [(1, "identity", True), (1, "dce", True),
                        (2, "identity", False), (2, "dce", False)]
    assert log.changed_by() == ["identity", "dce"] and log.rounds == 2


def test_a_pass_that_never_settles_hits_the_limit_and_is_named():
    def churn(graph):
        return graph, True
    churn.pass_name = "churn"
    with pytest.raises(PassError, match=r"passes did not reach a fixed point in 3 rounds: "
                                        r"'churn' still changed the graph in the last round"):
        run_to_fixed_point(small_graph(), [dce.run, churn], max_rounds=3)


def test_two_passes_undoing_each_other_are_both_named():
    def add_relu(graph):
        b = [n for n in graph.nodes if n.op == "relu"]
        if b:
            return graph, False
        from fusion.ir.graph import Node, Tensor
        t = graph.tensors[graph.outputs[0]]
        node = Node("extra", "relu", (t.name,), ("extra",))
        return graph.replace(nodes=graph.nodes + (node,),
                             tensors={**graph.tensors, "extra": Tensor("extra", t.shape,
                                                                       t.dtype)}), True
    with pytest.raises(PassError, match=r"'add_relu', 'dce' still changed"):
        run_to_fixed_point(small_graph(), [add_relu, dce.run], max_rounds=4)


def test_a_pass_must_return_a_graph_and_a_flag():
    def broken(graph):
        return graph
    with pytest.raises(PassError, match=r"pass 'broken' returned Graph; a pass returns a "
                                        r"\(Graph, changed\) pair"):
        run_to_fixed_point(small_graph(), [broken])
    with pytest.raises(ValueError, match=r"max_rounds must be at least 1, not 0"):
        run_to_fixed_point(small_graph(), [dce.run], max_rounds=0)


def test_optimize_prunes_folds_and_legalizes():
    b = GraphBuilder("cnn")
    x = b.input("x", (1, 2, 4, 4), "int8", quant=Quant(0.5, 0))
    w = b.const("w", np.ones((3, 2, 3, 3), np.int8), quant=Quant(0.25, 0))
    acc = b.qconv2d(x, w, pads=(1, 1, 1, 1), name="conv")
    y = b.requant(acc, Quant(1.0, 0), name="rq", axis=1)
    g = b.build([b.op("Identity", y, name="id")])
    got = optimize(g)
    assert [n.op for n in got.topo_order()] == ["im2col", "qmatmul", "requant", "transpose",
                                                "reshape"]
    assert optimize(g, legalize=False).node("conv").op == "qconv2d"
