"""The compiler's window convolutions: an ``im2col`` and the GEMM reading it are one chain,
which the engine runs as one window-convolution kernel (the load engine gathers the windows)
where the variant can, and otherwise as the host's im2col and a GEMM, saying why."""

from pathlib import Path

from fusion.compiler.plan import HostStep, compile_model
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from hwgen.config import VariantConfig
from hwgen.presets import ALL_STAGES, SIM_VARIANTS

ROOT = Path(__file__).resolve().parents[3]
V8 = VariantConfig(rows=8, cols=8, epilogue=ALL_STAGES, mem_addr_bits=24)


def _compile(path, config, **options):
    return compile_model(load_model(path), config, cache=KernelCache(disk=False), **options)


def test_resnet8_runs_every_convolution_as_a_window_convolution():
    compiled = _compile(ROOT / "examples/real/resnet8_qdq.onnx", V8)
    kernels = [s for s in compiled.steps if not isinstance(s, HostStep)]
    convs = [k for k in kernels if k.spec.kind.name == "conv"]
    assert len(convs) == 9  # every 3x3 and strided 1x1 convolution of the network
    assert not any(s.node.op == "im2col" for s in compiled.steps if isinstance(s, HostStep))
    # a convolution whose input only convolutions read takes it where its producer stored it
    in_place = [k for k in convs if "x" in compiled.memory.in_place(k.name)]
    assert len(in_place) >= 6
    for k in in_place:
        producer = next(p for p in kernels if p.spec.output == k.spec.inputs[0])
        assert producer.spec.params.kmajor_out
        assert producer.compiled.regions["out"].addr == k.compiled.regions["x"].addr


def test_without_window_loads_the_host_gathers_the_windows_even_without_fallback():
    compiled = _compile(ROOT / "examples/qdq_cnn.onnx", SIM_VARIANTS["4x4"],
                        host_fallback=False)
    im2cols = [s for s in compiled.steps if isinstance(s, HostStep) and s.node.op == "im2col"]
    assert im2cols and all(s.role == "layout" for s in im2cols)
    assert not any(s.spec.kind.name == "conv" for s in compiled.steps
                   if not isinstance(s, HostStep))
    reasons = [s.reason for s in im2cols]  # each names why its window convolution is not
    assert all(r.startswith(("the window convolution is refused: ",
                             "the depthwise convolution on the window unit is refused: "))
               for r in reasons), reasons
    assert any("window loads need an A row of one memory word" in r for r in reasons)
    assert any("the variant has no window unit" in r for r in reasons)


def test_compiled_without_a_technique_stays_without_it(tmp_path):
    """--without: each technique off gives the plan it would without it, and the plan folder
    reads back with the same options (and refuses an unknown one)."""
    import json

    import pytest

    from fusion.compiler.options import CompileOptions
    from fusion.compiler.plan_folder import PlanError, plan_digest, write_plan
    from fusion.compiler.plan_reader import read_plan

    model = ROOT / "examples/real/resnet8_qdq.onnx"
    plain = _compile(model, V8, options=CompileOptions.without("window_conv,kmajor_store"))
    assert not any(s.spec.kind.name == "conv" for s in plain.kernels)
    assert not any(getattr(s.spec.params, "kmajor_out", False) for s in plain.kernels)
    assert sum(s.node.op == "im2col" for s in plain.host) == 9
    write_plan(plain, tmp_path / "p", source=model)
    back = read_plan(tmp_path / "p", V8)
    assert back.options == plain.options and back.memory.to_dict() == plain.memory.to_dict()
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    plan["options"]["winograd"] = True
    plan["digest"] = plan_digest(plan)
    (tmp_path / "p" / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(PlanError, match="unknown compile option 'winograd'"):
        read_plan(tmp_path / "p", V8)
    with pytest.raises(ValueError, match="unknown compile option 'fast'"):
        CompileOptions.without("fast")


def test_hwgen_compile_without_names_the_unknown_technique(variant_dir, tmp_path, capsys):
    import pytest

    from hwgen.cli import main

    model = str(ROOT / "examples/qdq_cnn.onnx")
    with pytest.raises(SystemExit) as exit_:  # argparse: usage, then one line
        main(["compile", model, "--variant", str(variant_dir), "-o", str(tmp_path / "p"),
              "--without", "winograd"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "unknown compile option 'winograd'" in err[-1]
    assert main(["compile", model, "--variant", str(variant_dir), "-o", str(tmp_path / "q"),
                 "--without", "grouped_gemm", "--json"]) == 0
    import json

    plan = json.loads((tmp_path / "q" / "plan.json").read_text())
    assert plan["options"] == {"window_conv": True, "kmajor_store": True, "grouped_gemm": False,
                               "window_unit": True, "relayout": True,
                               "sparse_weights": True, "zero_skip": True}
