"""The plan folder: written whole (no stale kernels, never over a user's folder) and read back
only after every check (hashes, sizes, variant, shape of plan.json)."""

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fusion.compiler import plan_folder
from fusion.compiler.plan import PLAN_FORMAT, CompiledModel, HostStep, compile_model
from fusion.compiler.plan_folder import (
    PlanError,
    check_output_folder,
    plan_digest,
    write_plan,
)
from fusion.compiler.plan_reader import read_plan
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from hwgen import atomic
from hwgen.presets import SIM_VARIANTS

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
V4X4 = SIM_VARIANTS["4x4"]


def _compile(name: str, **options) -> CompiledModel:
    return compile_model(load_model(EXAMPLES / name), V4X4, cache=KernelCache(disk=False),
                         **options)


@pytest.fixture(scope="module")
def cnn() -> CompiledModel:
    return _compile("qdq_cnn.onnx")


@pytest.fixture
def plan_dir(cnn, tmp_path) -> Path:
    out = tmp_path / "plan"
    write_plan(cnn, out, source=EXAMPLES / "qdq_cnn.onnx")
    return out


def _kernel_files(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "kernels").iterdir())


def _edit(folder: Path, change) -> None:
    """Change plan.json and record a matching digest (what a determined editor would do)."""
    path = folder / "plan.json"
    plan = json.loads(path.read_text())
    change(plan)
    plan["digest"] = plan_digest(plan)
    path.write_text(json.dumps(plan))


def _refused(folder: Path, *words: str, config=V4X4, **options) -> str:
    with pytest.raises(PlanError) as info:
        read_plan(folder, config, **options)
    message = str(info.value)
    assert "\n" not in message and "recompile it with 'hwgen compile" in message
    for word in words:
        assert word in message
    return message


# -- reading back ------------------------------------------------------------------------------


@pytest.mark.parametrize("name, fusion", [("qdq_cnn.onnx", True), ("qdq_cnn.onnx", False),
                                          ("qdq_mlp_residual.onnx", True),
                                          ("qop_mlp.onnx", True)])
def test_read_plan_rebuilds_the_compiled_model(name, fusion, tmp_path):
    compiled = _compile(name, fusion=fusion)
    write_plan(compiled, tmp_path / "p", source=EXAMPLES / name)
    got = read_plan(tmp_path / "p", V4X4, model=EXAMPLES / name)
    assert got.graph == compiled.graph and got.fusion == fusion
    assert got.memory.to_dict() == compiled.memory.to_dict()
    assert [s.name for s in got.steps] == [s.name for s in compiled.steps]
    for a, b in zip(got.steps, compiled.steps, strict=True):
        if isinstance(b, HostStep):
            assert a.node == b.node
            continue
        assert a.spec.params == b.spec.params and a.spec.nodes == b.spec.nodes
        assert a.spec.inputs == b.spec.inputs and a.spec.output == b.spec.output
        assert a.spec.consts.keys() == b.spec.consts.keys()
        for key, value in b.spec.consts.items():
            np.testing.assert_array_equal(a.spec.consts[key], value)
        assert a.compiled.program == b.compiled.program
        assert a.compiled.meta == b.compiled.meta and a.compiled.source == b.compiled.source
        assert type(a.compiled) is type(b.compiled)
        assert a.predicted_cycles == round(b.predicted_cycles) and a.note == b.note


def test_a_tampered_binary_is_refused(plan_dir):
    binary = sorted((plan_dir / "kernels").glob("*.bin"))[1]
    data = bytearray(binary.read_bytes())
    data[3] ^= 0x10
    binary.write_bytes(bytes(data))
    _refused(plan_dir, str(binary), "SHA-256", "hwgen compile")


def test_a_missing_binary_is_refused(plan_dir):
    binary = sorted((plan_dir / "kernels").glob("*.bin"))[0]
    binary.unlink()
    _refused(plan_dir, str(binary), "is missing")


def test_a_truncated_binary_is_refused_before_it_is_read(plan_dir):
    binary = sorted((plan_dir / "kernels").glob("*.bin"))[0]
    binary.write_bytes(binary.read_bytes()[:-8])
    _refused(plan_dir, str(binary), "the plan records", "truncated")


def test_a_tampered_graph_is_refused(plan_dir):
    graph = plan_dir / "graph.json"
    graph.write_text(graph.read_text().replace('"relu"', '"relu" '))
    _refused(plan_dir, "graph.json")


def test_a_plan_for_another_variant_is_refused(plan_dir):
    other = dataclasses.replace(V4X4, port_latency=V4X4.port_latency + 1)
    _refused(plan_dir, f"compiled for variant {V4X4.key()}", other.key(), config=other)


def test_a_plan_from_other_gateware_is_refused(plan_dir):
    _edit(plan_dir, lambda p: p.update(gateware_digest="0" * 16))
    _refused(plan_dir, "gateware 0000000000000000")


def test_the_source_model_is_checked_when_given(plan_dir):
    read_plan(plan_dir, V4X4, model=EXAMPLES / "qdq_cnn.onnx")
    _refused(plan_dir, "qop_mlp.onnx is not the model", model=EXAMPLES / "qop_mlp.onnx")


@pytest.mark.parametrize("content", [b"", b'{"format": "hwgen-plan", "ver', b"\xff\xfe garbage",
                                     b"NaN", b"{}", b"[1, 2]", b"null", b'"plan"',
                                     b"[" * 100_000])
def test_garbage_or_a_wrong_shape_of_plan_json_is_refused(plan_dir, content):
    (plan_dir / "plan.json").write_bytes(content)
    _refused(plan_dir, "plan.json")


def test_a_missing_plan_json_is_refused(tmp_path):
    _refused(tmp_path, "plan.json is missing")


def test_a_hand_edited_plan_json_is_refused(plan_dir):
    path = plan_dir / "plan.json"
    plan = json.loads(path.read_text())
    plan["peak_memory_bytes"] += 1
    path.write_text(json.dumps(plan))
    _refused(plan_dir, "digest")


def test_an_older_plan_format_is_refused(plan_dir):
    _edit(plan_dir, lambda p: p.update(version=PLAN_FORMAT - 1))
    _refused(plan_dir, f"plan format {PLAN_FORMAT - 1}", f"reads format {PLAN_FORMAT}")


def _first_kernel(plan: dict) -> dict:
    return next(s for s in plan["steps"] if s["kind"] == "kernel")


@pytest.mark.parametrize("change, words", [
    (lambda p: p.update(steps="x"), ["steps is missing or not a list"]),
    (lambda p: p["steps"].append(7), ["is not an object"]),
    (lambda p: p["steps"].pop(), ["do not cover the graph"]),
    (lambda p: p["steps"].append(p["steps"][0]), ["two steps"]),
    (lambda p: p["steps"].insert(3, p["steps"].pop(4)), ["not in the order"]),
    (lambda p: p.update(files={}), ["no record of graph.json"]),
    (lambda p: p["files"].update({"../../etc/passwd": {"bytes": 1, "sha256": ""}}),
     ["no file of this plan"]),
    (lambda p: _first_kernel(p).update(binary="/etc/passwd"), ["binary is '/etc/passwd'"]),
    (lambda p: _first_kernel(p)["params"].update(shape=[1, 2, 3]), ["params are none"]),
    (lambda p: _first_kernel(p)["params"]["tiling"].update(tm=99), ["params are none"]),
    (lambda p: _first_kernel(p)["placement"].update(a=8), ["placement"]),
    (lambda p: _first_kernel(p)["metadata"]["regions"]["out"].__setitem__(1, 1 << 40),
     ["metadata 'regions'"]),
    (lambda p: _first_kernel(p)["metadata"].update(bytes_loaded=-1), ["bytes_loaded"]),
    (lambda p: _first_kernel(p)["metadata"].update(bytes_loaded=10 ** 30), ["loads read"]),
    (lambda p: _first_kernel(p)["params"]["tiling"].update(tm=True), ["params are none"]),
    (lambda p: _first_kernel(p)["metadata"].update(chosen=None), ["chosen"]),
    (lambda p: _first_kernel(p).update(program_words=10 ** 12), ["program_words"]),
    (lambda p: _first_kernel(p).update(ops=["nosuch"]), ["ops"]),
    (lambda p: _first_kernel(p).update(predicted_cycles=True), ["predicted_cycles"]),
    (lambda p: _first_kernel(p).update(predicted_cycles=-1), ["predicted_cycles"]),
    (lambda p: p["memory"]["buffers"][0].update(bytes=1), ["memory plan"]),
    (lambda p: p.update(fusion="yes"), ["fusion"]),
])
def test_an_edited_plan_with_a_matching_digest_is_still_checked(plan_dir, change, words):
    _edit(plan_dir, change)
    _refused(plan_dir, *words)


def test_sizes_are_bounded_before_a_file_is_read(plan_dir):
    # a .bin longer than the instruction memory, recorded with its true size and hash
    big = bytes(8 * (V4X4.imem_depth + 1))
    name = _first_kernel(json.loads((plan_dir / "plan.json").read_text()))["binary"]
    (plan_dir / name).write_bytes(big)
    _edit(plan_dir, lambda p: p["files"][name].update(
        bytes=len(big), sha256=hashlib.sha256(big).hexdigest()))
    _refused(plan_dir, "more than this variant could use")


def test_a_binary_that_does_not_decode_is_refused(plan_dir):
    # garbage of the right length, recorded with its hash: the words must still be a program
    name = _first_kernel(json.loads((plan_dir / "plan.json").read_text()))["binary"]
    junk = b"\xff" * (plan_dir / name).stat().st_size
    (plan_dir / name).write_bytes(junk)
    _edit(plan_dir, lambda p: p["files"][name].update(sha256=hashlib.sha256(junk).hexdigest()))
    _refused(plan_dir, "its program does not decode", "unknown opcode")


# -- writing -----------------------------------------------------------------------------------


def test_a_second_model_leaves_no_stale_kernels(cnn, tmp_path):
    out = tmp_path / "plan"
    write_plan(cnn, out)
    mlp = _compile("qop_mlp.onnx")
    write_plan(mlp, out)
    listed = sorted(Path(k["binary"]).name for k in
                    json.loads((out / "plan.json").read_text())["steps"] if k["kind"] == "kernel")
    assert [f for f in _kernel_files(out) if f.endswith(".bin")] == listed
    assert not [p for p in tmp_path.iterdir() if p.name != "plan"]  # no temporary folder left
    read_plan(out, V4X4)


def test_a_folder_that_is_not_a_plan_is_refused_and_kept(cnn, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(PlanError, match="holds no plan.json, so it is not an hwgen plan"):
        write_plan(cnn, out)
    assert (out / "notes.txt").read_text() == "keep me" and len(list(out.iterdir())) == 1


def test_a_plan_folder_with_a_user_file_is_refused_and_kept(plan_dir, cnn):
    (plan_dir / "kernels" / "mine.py").write_text("x = 1")
    with pytest.raises(PlanError, match="holds kernels/mine.py"):
        write_plan(cnn, plan_dir)
    assert (plan_dir / "kernels" / "mine.py").exists()
    read_plan(plan_dir, V4X4)


@pytest.mark.parametrize("content", [b"{}", b"[1, 2]", b"trunc"])
def test_a_folder_whose_plan_json_is_no_plan_is_refused(cnn, tmp_path, content):
    (tmp_path / "plan.json").write_bytes(content)
    with pytest.raises(PlanError, match="not an hwgen plan"):
        check_output_folder(tmp_path)


def test_a_file_is_refused_as_the_folder(cnn, tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(PlanError, match="is a file"):
        write_plan(cnn, tmp_path / "f")


def test_an_empty_folder_and_an_old_format_plan_are_replaced(cnn, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    write_plan(cnn, empty)
    read_plan(empty, V4X4)
    old = tmp_path / "old"  # what hwgen wrote before plan format 3, stale kernel included
    (old / "kernels").mkdir(parents=True)
    (old / "plan.json").write_text(json.dumps({"format": 2, "steps": []}))
    (old / "kernels" / "07_stale.bin").write_bytes(b"\0" * 8)
    write_plan(cnn, old)
    assert "07_stale.bin" not in _kernel_files(old)
    read_plan(old, V4X4)


def test_an_interrupted_write_leaves_the_old_plan(plan_dir, monkeypatch):
    before = {p: p.read_bytes() for p in plan_dir.rglob("*") if p.is_file()}
    written = []

    def fail_midway(path, data):
        written.append(path)
        if len(written) == 3:
            raise KeyboardInterrupt
        path.write_bytes(data)

    monkeypatch.setattr(plan_folder, "_write_synced", fail_midway)
    with pytest.raises(KeyboardInterrupt):
        write_plan(_compile("qop_mlp.onnx"), plan_dir)
    assert {p: p.read_bytes() for p in plan_dir.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in plan_dir.parent.iterdir()) == ["plan"]
    read_plan(plan_dir, V4X4)


def test_the_replacement_works_without_an_atomic_exchange(plan_dir, monkeypatch):
    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    write_plan(_compile("qop_mlp.onnx"), plan_dir)
    assert len(read_plan(plan_dir, V4X4).kernels) == 2
    assert sorted(p.name for p in plan_dir.parent.iterdir()) == ["plan"]


def test_a_symbolic_link_to_a_plan_keeps_pointing_at_the_new_plan(cnn, tmp_path):
    real = tmp_path / "real"
    write_plan(cnn, real)
    link = tmp_path / "link"
    link.symlink_to(real)
    write_plan(_compile("qop_mlp.onnx"), link)
    assert link.is_symlink() and len(read_plan(link, V4X4).kernels) == 2


def test_the_plan_names_its_files_with_sizes_and_hashes(plan_dir):
    plan = json.loads((plan_dir / "plan.json").read_text())
    assert plan["format"] == "hwgen-plan" and plan["version"] == PLAN_FORMAT
    on_disk = sorted(p.relative_to(plan_dir).as_posix() for p in plan_dir.rglob("*")
                     if p.is_file() and p.name != "plan.json")
    assert sorted(plan["files"]) == on_disk
    for name, record in plan["files"].items():
        data = (plan_dir / name).read_bytes()
        assert record == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert plan["source"]["sha256"] == hashlib.sha256(
        (EXAMPLES / "qdq_cnn.onnx").read_bytes()).hexdigest()


def test_a_copied_plan_folder_reads_anywhere(plan_dir, tmp_path):
    copy = tmp_path / "elsewhere" / "p"
    shutil.copytree(plan_dir, copy)
    assert len(read_plan(copy, V4X4).kernels) == 4


KILLED_WRITER = """
import sys, time
from pathlib import Path
from fusion.compiler import plan_folder
from hwgen import atomic
from fusion.compiler.plan import compile_model
from fusion.frontend.load import load_model
from fusion.kernels.cache import KernelCache
from hwgen.presets import SIM_VARIANTS

compiled = compile_model(load_model(sys.argv[1]), SIM_VARIANTS["4x4"],
                         cache=KernelCache(disk=False))
write = plan_folder._write_synced

def slow(path, data):
    write(path, data)
    Path(sys.argv[3]).touch()  # a file of the new plan is written: kill me now
    time.sleep(60)

plan_folder._write_synced = slow
plan_folder.write_plan(compiled, sys.argv[2])
"""


def test_a_killed_compile_leaves_the_old_plan(plan_dir, tmp_path):
    import subprocess
    import sys
    import time

    before = {p: p.read_bytes() for p in plan_dir.rglob("*") if p.is_file()}
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER,
                              str(EXAMPLES / "qop_mlp.onnx"), str(plan_dir), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()
    finally:
        child.kill()
        child.wait()
    assert {p: p.read_bytes() for p in plan_dir.rglob("*") if p.is_file()} == before
    assert len(read_plan(plan_dir, V4X4).kernels) == 4
    # the killed writer's temporary folder is hidden beside the plan, never inside it
    assert all(p.name.startswith(".plan.tmp-") for p in plan_dir.parent.iterdir()
               if p.name not in ("plan", "ready"))
