"""Settings shared by every test."""

import pytest
from hypothesis import HealthCheck, settings

# Tests check behaviour, not time: Hypothesis's per-example deadline fails a property test
# when another xdist worker is compiling Verilator next to it. Speed is `make bench`'s job.
settings.register_profile("hwgen", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hwgen")


@pytest.fixture(scope="session")
def variant_dir(tmp_path_factory):
    """A 4x4 variant folder with every epilogue stage, generated once per session (per xdist
    worker) by the real ``hwgen generate``: what the CLI tests compile and run models on."""
    from hwgen.cli import main

    out = tmp_path_factory.mktemp("variant") / "v4x4"
    assert main(["generate", "--rows", "4", "--cols", "4", "--epilogue",
                 "bias,requant,relu,clamp,residual", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def dense_mlp(tmp_path_factory):
    """The 256-256-256-64 MLP of ``examples/build_pruned_models.py``, unpruned, quantized by
    onnxruntime (QDQ, per channel): what the sparsity tests run dense or on sparse data."""
    from examples.build_pruned_models import mlp, sample
    from examples.build_real_models import quantize

    path = tmp_path_factory.mktemp("dense") / "mlp.onnx"
    quantize("mlp", mlp(), "qdq", path, sample=lambda seed: sample("mlp", seed))
    return path
