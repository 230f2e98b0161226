"""Output folders of ``hwgen generate``, ``compile`` and ``train``: what is not hwgen's is
never deleted or overwritten (issue 29's probe)."""

from pathlib import Path

import pytest

from hwgen.cli import main
from tests.helpers.cli import one_error_line

ROOT = Path(__file__).resolve().parent.parent
VARIANT = ["--rows", "2", "--cols", "2", "--port-bytes", "4", "--spad-a-depth", "512",
           "--spad-b-depth", "512", "--spad-e-depth", "128"]


@pytest.fixture(scope="module")
def variant(tmp_path_factory):
    out = tmp_path_factory.mktemp("v") / "v"
    assert main(["generate", *VARIANT, "-o", str(out)]) == 0
    return out


def test_a_file_put_into_generates_folder_while_it_runs_is_kept(tmp_path, capsys,
                                                                 monkeypatch):
    import hwgen.gateware.emit as emit

    out = tmp_path / "v"
    assert main(["generate", *VARIANT, "-o", str(out)]) == 0
    before = sorted(p.name for p in out.iterdir())
    real = emit.accelerator_verilog

    def meanwhile(config):
        (out / "notes.txt").write_text("mine")  # the user, while the Verilog is made
        return real(config)

    monkeypatch.setattr(emit, "accelerator_verilog", meanwhile)
    capsys.readouterr()
    assert main(["generate", *VARIANT, "--epilogue", "relu", "-o", str(out)]) == 2
    line = one_error_line(capsys)
    assert f"{out} changed while hwgen was writing its replacement (notes.txt was added)" \
        in line
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == sorted([*before, "notes.txt"])


def test_a_file_put_into_compiles_folder_while_it_runs_is_kept(tmp_path, capsys, variant,
                                                                monkeypatch):
    import hwgen.cli.compile as compile_cli

    model = ROOT / "examples" / "qop_mlp.onnx"
    out = tmp_path / "plan"
    argv = ["compile", str(model), "--variant", str(variant), "-o", str(out)]
    assert main(argv) == 0
    plan = (out / "plan.json").read_bytes()
    real = compile_cli.compile_args

    def meanwhile(args):
        (out / "kernels" / "mine.bin").write_bytes(b"mine")  # the user, during the compile
        return real(args)

    monkeypatch.setattr(compile_cli, "compile_args", meanwhile)
    capsys.readouterr()
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert "changed while hwgen was writing its replacement (kernels/mine.bin was added)" \
        in line
    assert (out / "kernels" / "mine.bin").read_bytes() == b"mine"
    assert (out / "plan.json").read_bytes() == plan
