"""Well-known third-party CNNs end to end (issue 32): kernels, host work, cycles, utilization.

The full-size models of :mod:`examples.build_zoo_models` (SqueezeNet 1.0, Inception-v1 and
-v2, ResNet-50, ShuffleNet v1, DenseNet-121 at 32 to 64 pixels; QDQ, and QOperator for
SqueezeNet and ShuffleNet; and ResNet-50 and DenseNet-121 again at 64 pixels,
:data:`SIDED`) are built and quantized by onnxruntime into ``build/zoo`` (once: delete the
folder to rebuild), compiled for the 8x8 all-stage variant with the window unit of
:mod:`bench.real_models` (with four accumulator banks: :data:`VARIANT`), run on the simulator
with every kernel shadow-checked, and their outputs compared with the exact reference of the
imported graph (the 1-LSB bound; a model outside it makes the benchmark exit 1) and, for the
QDQ forms, with onnxruntime's float path (optimizations off), which is reported, not judged:
its float32 sums resolve near-halves otherwise.

Per model: kernels, host ops by op (compute the host does: Softmax and LRN are there by
design, :data:`fusion.compiler.lower.HOST_BY_DESIGN`), layout host steps, repacks (kernel
inputs the host rewrites from an earlier kernel's output in another layout:
:mod:`fusion.compiler.repack`), cycles (the kernels', measured), the host steps' and repacks'
predicted time in accelerator cycles (``host cyc``: the host cost model's, which the engine
weighs against a kernel's cycles), the MACs
the model asks for, utilization (MACs / 64 over the kernels' cycles), the most any plan of
those kernels could reach (``bound``: :attr:`fusion.runtime.run_report.RunReport.
bound_utilization`, each kernel at least its MACs on every PE and its weights streamed once;
at batch 1 the late layers of ResNet-50 and DenseNet are weight-bound), the bytes the host
writes into the accelerator's memory (``host KB``: the model's input, what host steps made,
and the repacks), compile and run wall
seconds.

``python -m bench.zoo_models [MODEL ...]`` prints them and writes ``build/bench_zoo_models.json``;
``make bench`` runs it.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import onnx

from bench.output import verdict, write_results
from bench.real_models import VARIANT as TINY_VARIANT
from bench.real_models import measure
from examples.build_zoo_models import BUILDERS, FORMATS, build
from examples.real_check import lsb_errors, output_scale, within_one_lsb

OUT = Path("build") / "zoo"
#: The MLPerf Tiny benchmark's 8x8 variant with four accumulator banks: the zoo's deep
#: reductions at small planes (3x3 convolutions of 128 to 512 channels at 4x4 down to 1x1)
#: are chunked, and the banks let a chunk serve several output tiles.
VARIANT = dataclasses.replace(TINY_VARIANT, acc_banks=4)
#: Models at another input side than their :data:`examples.build_zoo_models.SIDES` one:
#: ResNet-50 and DenseNet-121 at 64 pixels, where their late layers are no longer bound by
#: streaming their weights for one pixel or four (at 32 pixels no ResNet-50 plan exceeds 0.43
#: of the array, and DenseNet's 3x3 convolutions of 128 channels at 8x8 to 1x1 wait on the
#: memory port with four accumulator banks).
SIDED = {"resnet50_qdq_64px": ("resnet50", "qdq", 64),
         "densenet121_qdq_64px": ("densenet121", "qdq", 64)}
NAMES = [f"{name}_{fmt}" for name in BUILDERS for fmt in FORMATS[name]] + list(SIDED)


def _model(name: str) -> Path:
    path = OUT / f"{name}.onnx"
    if not path.is_file() or not path.with_suffix(".npz").is_file():
        base, fmt, side = SIDED.get(name, (*name.rsplit("_", 1), None))
        build(base, fmt, OUT, full=True, side=side)
    return path


def _float_path(path: Path, x: np.ndarray, got: np.ndarray) -> str:
    """hwgen's output against onnxruntime's float path, in words (QDQ models only)."""
    if path.stem.endswith("_qop"):
        return "n/a (QOperator: onnxruntime runs integer kernels, not a reference)"
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (want,) = session.run(["y"], {"x": x})
    errors = lsb_errors(got, want, output_scale(onnx.load(str(path)), "y"))
    return within_one_lsb(errors, "vs onnxruntime's float path", integer=False)[1]


def main(argv: list[str] | None = None) -> int:
    names = list(argv if argv is not None else sys.argv[1:]) or NAMES
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        print(f"bench.zoo_models: no model {', '.join(unknown)}; the models are "
              f"{', '.join(NAMES)}", file=sys.stderr)
        return 2
    print(f"Model zoo on {VARIANT.rows}x{VARIANT.cols}, all stages, window unit, "
          f"{VARIANT.acc_banks} accumulator banks (every kernel "
          f"shadow-checked, outputs against the exact reference) ...", flush=True)
    print(f"  {'model':<18} {'kernels':>7} {'layout':>6} {'repack':>6} {'cycles':>10} "
          f"{'host cyc':>9} "
          f"{'MACs':>11} {'util':>5} {'bound':>5} {'host KB':>7} {'compile s':>9} "
          f"{'run s':>7}  host ops")
    rows = []
    for name in names:
        path = _model(name)
        with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
            x, want = data["x"], data["y"]
        row = measure(path, x, want, variant=VARIANT)
        row["float_path"] = _float_path(path, x, row.pop("output"))
        rows.append(row)
        print(f"  {name:<18} {row['kernels']:>7} {row['layout_host_steps']:>6} "
              f"{row['repacks']:>6} "
              f"{row['cycles']:>10,} {row['host_cycles']:>9,} {row['macs']:>11,} "
              f"{row['utilization']:>5.2f} "
              f"{row['bound_utilization']:>5.2f} {row['host_written_bytes'] / 1024:>7.0f} "
              f"{row['compile_seconds']:>9.1f} {row['wall_seconds']:>7.1f}  "
              f"{row['host_ops_by_op']}", flush=True)
        print(f"  {'':<18} {row['reference']}; {row['float_path']}", flush=True)
    write_results("bench_zoo_models.json", {"variant": VARIANT.to_dict(), "runs": rows})
    return verdict([r["model"] for r in rows if not r["within_bound"]])


if __name__ == "__main__":
    sys.exit(main())
