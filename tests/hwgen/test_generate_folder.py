"""Variant folders: the Verilog is checked against its descriptor on every read, a folder is
written atomically, and only variant folders are replaced."""

import json

import pytest

from hwgen.cli import main
from hwgen.config import VariantConfig
from hwgen.gateware.emit import generate
from hwgen.gateware.folder import open_variant, read_variant

#: Two tiny variants (a 1x1 array generates in well under a second).
ONE = VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=("relu",), imem_depth=16)
TWO = VariantConfig(rows=2, cols=2, port_bytes=4, epilogue=("bias",), imem_depth=16)


def test_a_fresh_folder_reads_back_with_its_verilog(tmp_path):
    descriptor = generate(ONE, tmp_path / "v")
    folder = open_variant(tmp_path / "v")
    assert folder.config == ONE and folder.verilog == tmp_path / "v" / "hwgen_accel.v"
    assert folder.verilog_sha256 == descriptor["verilog_sha256"]
    assert "module hwgen_accel" in folder.verilog_text()
    assert read_variant(tmp_path / "v" / "variant.json") == ONE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v"]  # no temporary folder left


@pytest.mark.parametrize("damage", ["garbage", "delete", "append"])
def test_verilog_that_is_not_the_recorded_file_is_refused_with_the_fix(tmp_path, damage):
    out = tmp_path / "v"
    generate(ONE, out)
    verilog = out / "hwgen_accel.v"
    if damage == "garbage":
        verilog.write_text("this is not verilog\n")
    elif damage == "delete":
        verilog.unlink()
    else:
        verilog.write_text(verilog.read_text() + "// edited\n")
    with pytest.raises(ValueError, match="regenerate it with 'hwgen generate --config "
                                         + str(out / "variant.json") + f" -o {out}'"):
        read_variant(out)


def test_the_cli_refuses_a_folder_with_garbage_verilog_in_one_line(tmp_path, capsys):
    out = tmp_path / "v"
    generate(ONE, out)
    (out / "hwgen_accel.v").write_text("garbage\n")
    capsys.readouterr()
    assert main(["gemm", "--variant", str(out), "--m", "1", "--k", "1", "--n", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hwgen: error: ")
    assert "is not the Verilog its descriptor records" in err
    # and the command it names repairs the folder
    assert main(["generate", "--config", str(out / "variant.json"), "-o", str(out)]) == 0
    assert read_variant(out) == ONE


def test_an_interrupted_regenerate_leaves_the_old_folder_whole(tmp_path, monkeypatch):
    # The crash of the report: killed between writing the Verilog and the descriptor, a
    # regenerate used to leave the new Verilog beside the old descriptor.
    out = tmp_path / "v"
    generate(ONE, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def crash(self, path, **extra):
        raise OSError("killed while writing the descriptor")

    monkeypatch.setattr(VariantConfig, "write_descriptor", crash)
    with pytest.raises(OSError, match="killed"):
        generate(TWO, out)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert read_variant(out) == ONE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v"]


def test_a_regenerate_replaces_the_whole_folder(tmp_path):
    out = tmp_path / "v"
    generate(ONE, out)
    (out / "isa.md").unlink()
    generate(TWO, out)
    assert read_variant(out) == TWO and (out / "isa.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v"]


def test_a_killed_generate_leaves_a_temporary_folder_the_next_one_removes(tmp_path):
    stale = tmp_path / ".v.tmp-999999999-abcd"  # no such process
    stale.mkdir()
    (stale / "hwgen_accel.v").write_text("half\n")
    generate(ONE, tmp_path / "v")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v"]


def test_a_folder_of_someone_elses_files_is_refused_untouched(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious\n")
    assert main(["generate", "--rows", "1", "--cols", "1", "--port-bytes", "1",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not an hwgen variant folder" in err
    assert "thesis.tex" in err
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_variant_folder_holding_the_users_files_is_refused_and_kept(tmp_path, capsys):
    """A variant folder is replaced whole only when it holds nothing but what hwgen writes
    there (generate's files, a library's FuseSoC core): a file of the user's beside them would
    be deleted with the old variant."""
    out = tmp_path / "v"
    generate(ONE, out)
    (out / "notes.txt").write_text("measured on the board: 12 MHz\n")
    assert main(["generate", "--rows", "2", "--cols", "2", "--port-bytes", "4",
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "notes.txt" in err and "hwgen did not write" in err
    assert (out / "notes.txt").read_text() == "measured on the board: 12 MHz\n"
    assert read_variant(out) == ONE
    (out / "notes.txt").unlink()
    (out / "v.core").write_text("CAPI=2:\n")  # a library's core: hwgen's own
    generate(TWO, out)
    assert read_variant(out) == TWO


def test_an_empty_folder_and_a_file_as_output(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    generate(ONE, tmp_path / "empty")
    assert read_variant(tmp_path / "empty") == ONE
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        generate(ONE, tmp_path / "file")


def test_an_out_of_order_chain_is_refused_at_generate_naming_the_order(tmp_path, capsys):
    # gemm used to refuse it afterwards, quoting the built-in order, not the variant's
    out = tmp_path / "v"
    assert main(["generate", "--rows", "1", "--cols", "1", "--port-bytes", "1",
                 "--epilogue", "relu,bias", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "epilogue relu,bias is out of order" in err and "use --epilogue bias,relu" in err
    assert not out.exists()


def test_a_folder_with_an_out_of_order_chain_is_refused_when_read(tmp_path):
    out = tmp_path / "v"
    generate(ONE, out)
    data = json.loads((out / "variant.json").read_text())
    config = VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=("relu", "bias"),
                           imem_depth=16)
    data.update(config=config.to_dict(), key=config.key())
    (out / "variant.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="use --epilogue bias,relu"):
        read_variant(out)


def test_gemm_refuses_stages_quoting_the_variants_chain(tmp_path, capsys):
    out = tmp_path / "v"
    generate(VariantConfig(rows=1, cols=1, port_bytes=1, epilogue=("bias", "relu"),
                           imem_depth=16), out)
    capsys.readouterr()
    assert main(["gemm", "--variant", str(out), "--m", "1", "--k", "1", "--n", "1",
                 "--epilogue", "relu,bias"]) == 2
    err = capsys.readouterr().err
    assert "['bias', 'relu']" in err and "requant" not in err
