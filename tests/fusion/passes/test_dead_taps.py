"""fusion/passes/dead_taps.py: the taps of a convolution that read only padding are dropped,
and the convolution computes the same integers (the executor's ``qconv2d`` before and after,
on full-range data with nonzero zero points, so a padding tap would add ``x_zp`` terms if it
were not exactly the zero point)."""

import itertools

import numpy as np
import pytest

from fusion.ir.builder import GraphBuilder
from fusion.ir.graph import Quant
from fusion.passes import dead_taps
from fusion.reference import executor


def _conv(h, w, k, stride, pads, *, cin=3, cout=4, group=1, seed=0):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("conv")
    x = b.input("x", (2, cin, h, w), "int8", quant=Quant(0.05, -7))
    weights = rng.integers(-128, 128, (cout, cin // group, *k)).astype(np.int8)
    wq = b.const("w", weights, quant=Quant(tuple([0.01] * cout), tuple(range(-2, cout - 2)), 0))
    y = b.qconv2d(x, wq, strides=stride, pads=pads, group=group, name="conv")
    feeds = {"x": rng.integers(-128, 128, (2, cin, h, w)).astype(np.int8)}
    return b.build(outputs=[y]), feeds


def _kernel(graph):
    node = graph.node("conv")
    return graph.initializers[node.inputs[1]].shape[2:], node.attr("pads")


def test_a_3x3_on_a_1x1_plane_is_its_centre_tap():
    """ResNet-50's res5 at a 32-pixel input: one pixel, padding 1, so eight of the nine taps
    read padding for the one output."""
    graph, feeds = _conv(1, 1, (3, 3), (1, 1), (1, 1, 1, 1), cin=8, cout=8)
    after, changed = dead_taps.run(graph)
    assert changed and _kernel(after) == ((1, 1), (0, 0, 0, 0))
    np.testing.assert_array_equal(executor.run(after, feeds)["conv"],
                                  executor.run(graph, feeds)["conv"])


def test_every_tap_reading_the_input_is_left_alone():
    graph, _ = _conv(2, 2, (3, 3), (1, 1), (1, 1, 1, 1))
    assert dead_taps.run(graph) == (graph, False)


#: Planes, kernels, strides and paddings (one less at the end) whose window fits.
SHAPES = [(h, w, k, s, p) for h, w, k, s, p in itertools.product(
    (1, 2, 3), (1, 2, 4), (1, 3, 5), (1, 2, 3), (0, 1, 2))
    if p < k and min(h, w) + p + max(0, p - 1) >= k]


@pytest.mark.parametrize("h, w, k, s, p", SHAPES)
def test_the_result_is_the_same_for_every_small_plane(h, w, k, s, p):
    graph, feeds = _conv(h, w, (k, k), (s, s), (p, p, p, max(0, p - 1)), seed=h * 100 + w)
    after, changed = dead_taps.run(graph)
    np.testing.assert_array_equal(executor.run(after, feeds)["conv"],
                                  executor.run(graph, feeds)["conv"])
    if changed:
        (kh, kw), pads = _kernel(after)
        assert kh * kw < k * k and min(pads) >= 0


def test_a_grouped_convolution_keeps_its_groups():
    graph, feeds = _conv(1, 2, (3, 3), (1, 1), (1, 1, 1, 1), cin=4, cout=4, group=4)
    after, changed = dead_taps.run(graph)
    assert changed and _kernel(after)[0] == (1, 3) and after.node("conv").attr("group") == 4
    np.testing.assert_array_equal(executor.run(after, feeds)["conv"],
                                  executor.run(graph, feeds)["conv"])
