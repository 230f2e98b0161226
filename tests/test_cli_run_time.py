"""``hwgen run`` reports time, not only cycles: latency and inferences per second at the lower
of the variant's routed Fmax and the platform's clock (:mod:`fusion.runtime.clock`)."""

import json
import shutil
from pathlib import Path

import pytest

from hwgen.cli import main

CNN = str(Path(__file__).resolve().parents[1] / "examples" / "qdq_cnn.onnx")


def _with_fmax(variant_dir: Path, folder: Path, fmax) -> Path:
    shutil.copytree(variant_dir, folder)
    descriptor = json.loads((folder / "variant.json").read_text())
    descriptor["synthesis"] = {"fmax_mhz": fmax}
    (folder / "variant.json").write_text(json.dumps(descriptor))
    return folder


@pytest.mark.slow
def test_run_reports_latency_at_the_clock_the_variant_can_run_at(variant_dir, tmp_path, capsys):
    run = ["run", CNN, "--shadow-inputs", "0"]
    assert main([*run, "--variant", str(variant_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    time = report["time"]
    assert time["clock"] == "platform (no routed Fmax)" and time["clock_mhz"] == 100.0
    assert time["latency_us"] == round(report["total_cycles"] / 100, 3)

    slow = _with_fmax(variant_dir, tmp_path / "slow", 25.0)
    assert main([*run, "--variant", str(slow), "--json"]) == 0
    routed = json.loads(capsys.readouterr().out)
    assert routed["total_cycles"] == report["total_cycles"]
    assert (routed["time"]["clock"], routed["time"]["latency_us"]) == (
        "fmax", round(report["total_cycles"] / 25, 3))
    assert main([*run, "--variant", str(slow)]) == 0
    assert "at 25 MHz (the routed Fmax, below the platform's 100 MHz clock" in \
        capsys.readouterr().out

    broken = _with_fmax(variant_dir, tmp_path / "broken", -1)
    assert main([*run, "--variant", str(broken)]) == 2
    assert "records an Fmax of -1 MHz, not a positive number" in capsys.readouterr().err
