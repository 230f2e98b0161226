"""An output of hwgen against a reference: the 1-LSB bound, and the bundled real models' I/O.

The bound hwgen is held to: an integer output exact; a dequantized float output within 1 LSB
of its output scale, with at least 99% of elements exact. The test suite
(``tests/fusion/references.py``) and ``make demo`` both apply it from here.

``make demo`` runs a bundled model (``examples/real/<name>.onnx``) on the simulator with the
input checked in beside it, then checks hwgen's output against the checked-in one (the exact
reference's, :mod:`examples.exact_reference`)::

    python -m examples.real_check input resnet8_qdq build/resnet8_qdq_x.npy
    hwgen run examples/real/resnet8_qdq.onnx --variant DIR --input x=build/resnet8_qdq_x.npy \\
        --output y=build/resnet8_qdq_y.npy
    python -m examples.real_check output resnet8_qdq build/resnet8_qdq_y.npy

``output`` prints the figures and exits 1 outside the bound (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from fusion.runtime.whole_model import MAX_LSB, MIN_EXACT  # the bound, defined once

REAL = Path(__file__).resolve().parent / "real"


def output_scale(model: onnx.ModelProto, output: str) -> float | None:
    """The scale of the ``DequantizeLinear`` that produces ``output`` (through Identity), or
    None for an output that is not a dequantized tensor."""
    producers = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: i for i in model.graph.initializer}
    node = producers.get(output)
    while node is not None and node.op_type == "Identity":
        node = producers.get(node.input[0])
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in inits:
        return None
    scale = numpy_helper.to_array(inits[node.input[1]])
    return float(scale) if scale.size == 1 else None


def lsb_errors(got: np.ndarray, want: np.ndarray, scale: float | None) -> np.ndarray:
    """``got - want`` in output LSBs, flattened: integers as they are, a dequantized float
    output in units of its ``scale``.

    Raises
    ------
    ValueError
        If the shapes or integer dtypes differ, or a float output has no scale.
    """
    if got.shape != want.shape:
        raise ValueError(f"shape {got.shape}, the reference's {want.shape}")
    if want.dtype.kind in "iu":
        if got.dtype != want.dtype:
            raise ValueError(f"dtype {got.dtype}, the reference's {want.dtype}")
        return (got.astype(np.int64) - want.astype(np.int64)).ravel()
    if scale is None:
        raise ValueError("a float output that is not dequantized: no LSB to count in")
    return np.rint((got.astype(np.float64) - want.astype(np.float64)) / scale).ravel()


def within_one_lsb(errors: np.ndarray, label: str, *, integer: bool) -> tuple[bool, str]:
    """Whether ``errors`` (from :func:`lsb_errors`) meet the bound, and the figures."""
    worst = int(np.abs(errors).max()) if errors.size else 0
    exact = float(np.mean(errors == 0)) if errors.size else 1.0
    figures = (f"{label}: {errors.size} elements, max |diff| {worst} LSB, "
               f"{100 * exact:.2f}% exact")
    ok = worst == 0 if integer else worst <= MAX_LSB and exact >= MIN_EXACT
    return ok, figures


def _bundled(name: str) -> tuple[Path, np.ndarray, np.ndarray]:
    path = REAL / f"{name}.onnx"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in REAL.glob("*.onnx")))
        raise ValueError(f"no bundled model {name!r}; the bundled models are {names}")
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
        return path, data["x"], data["y"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.real_check", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("what", choices=("input", "output"),
                        help="input: write the bundled input to FILE; output: check FILE "
                             "(hwgen's output) against the bundled reference output")
    parser.add_argument("name", help="a bundled model, as examples/real/NAME.onnx")
    parser.add_argument("file", help="a .npy file")
    args = parser.parse_args(argv)
    try:
        path, x, y = _bundled(args.name)
        if args.what == "input":
            np.save(args.file, x, allow_pickle=False)
            return 0
        try:
            got = np.load(args.file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read {args.file}: {exc}") from None
        errors = lsb_errors(got, y, output_scale(onnx.load(str(path)), "y"))
    except ValueError as exc:
        print(f"real_check: {exc}", file=sys.stderr)
        return 2
    ok, figures = within_one_lsb(errors, f"{args.name}: hwgen vs the reference (bundled output)",
                                 integer=y.dtype.kind in "iu")
    print(f"{figures}: {'within' if ok else 'OUTSIDE'} the bound (1 LSB, >= 99% exact)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
