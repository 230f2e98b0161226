"""The cases of the bad-input campaign (:mod:`bench.bad_inputs`): the good artifacts they
start from (:class:`Workspace`) and, per case, the files it spoils and its command line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
VARIANT = ["--rows", "2", "--cols", "2", "--port-bytes", "4", "--port-latency", "3",
           "--spad-a-depth", "512", "--spad-b-depth", "512", "--spad-e-depth", "128"]
GEMM = ["--m", "4", "--k", "8", "--n", "4"]

@dataclass
class Case:
    """One bad input: ``argv(ws, d)`` makes its files in the folder ``d`` and returns the
    command line; ``match`` is a pattern the error line must contain."""

    name: str
    argv: Callable[[Workspace, Path], list[str]]
    match: str = ""
    heal: bool = False  # exit 0 is right: a cache that rebuilds itself
    answer: bool = False  # exit 0 is right: a valid input at the edge, answered in time
    process: bool = False  # run in a child process (with a timeout)
    env: dict[str, str] = field(default_factory=dict)


class Workspace:
    """The good artifacts the cases start from: a variant, models, inputs, a plan, a cache."""

    def __init__(self, root: Path) -> None:
        from fusion.compiler.plan import compile_model
        from fusion.compiler.plan_folder import write_plan
        from fusion.frontend.json_format import save_json, to_dict
        from fusion.ir.synthetic import mlp
        from fusion.kernels.cache import KernelCache

        self.root = root
        self.variant = root / "variant"
        self.cache = root / "cache"
        os.environ["HWGEN_KERNEL_CACHE"] = str(self.cache)
        config = variant_folder(self.variant, VARIANT)
        graph = mlp(layers=1, width=8, batch=4)
        self.graph = to_dict(graph)
        self.json = root / "mlp.json"
        save_json(graph, self.json)
        self.onnx = root / "qop_mlp.onnx"
        shutil.copy(ROOT / "examples" / "qop_mlp.onnx", self.onnx)
        self.x = root / "x.npy"
        np.save(self.x, np.zeros((8, 64), np.float32))
        self.plan = root / "plan"
        write_plan(compile_model(graph, config, cache=KernelCache(self.cache)), self.plan)

    def graph_file(self, d: Path, edit: Callable[[dict], object]) -> str:
        """The base JSON graph with ``edit`` applied (it changes the dict in place)."""
        data = json.loads(json.dumps(self.graph))
        edit(data)
        path = d / "g.json"
        path.write_text(json.dumps(data))
        return str(path)

    def variant_copy(self, d: Path, edit: Callable[[Path], object]) -> str:
        folder = d / "variant"
        shutil.copytree(self.variant, folder)
        edit(folder)
        return str(folder)

    def plan_copy(self, d: Path, edit: Callable[[Path], object]) -> str:
        folder = d / "plan"
        shutil.copytree(self.plan, folder)
        edit(folder)
        return str(folder)

    def cache_copy(self, d: Path, edit: Callable[[list[Path]], object]) -> str:
        folder = d / "cache"
        shutil.copytree(self.cache, folder)
        edit(sorted(folder.rglob("*.json")))
        return str(folder)

    def build_copy(self, d: Path, edit: Callable[[Path], object]) -> dict[str, str]:
        """A private build cache holding a copy of the variant's shared build, edited."""
        from hwgen.gateware.folder import read_variant
        from sim.build import default_root

        key = read_variant(self.variant).key()
        shared = default_root()
        builds = d / "builds"
        builds.mkdir()
        for folder in sorted(shared.glob(f"{key}-*")):
            if folder.is_dir():
                shutil.copytree(folder, builds / folder.name, symlinks=True)
                edit(builds / folder.name)
        return {"HWGEN_BUILD_DIR": str(builds)}


def write(path: Path, data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return str(path)


def npy(d: Path, value: np.ndarray, name: str = "in.npy") -> str:
    np.save(d / name, value, allow_pickle=True)
    return str(d / name)


def json_file(d: Path, value: object, name: str = "c.json") -> str:
    return write(d / name, json.dumps(value))


# -- the cases -----------------------------------------------------------------------------

def _generate(*opts: str) -> Callable[[Workspace, Path], list[str]]:
    return lambda ws, d: ["generate", *VARIANT, *opts, "-o", str(d / "v")]


def _gemm(*opts: str) -> Callable[[Workspace, Path], list[str]]:
    return lambda ws, d: ["gemm", "--variant", str(ws.variant), *GEMM, *opts]


def _model_cmd(cmd: str, model: Callable[[Workspace, Path], str], *opts: str
               ) -> Callable[[Workspace, Path], list[str]]:
    def argv(ws: Workspace, d: Path) -> list[str]:
        path = model(ws, d)
        if cmd == "inspect":
            return ["inspect", path, *opts]
        extra = ["-o", str(d / "plan")] if cmd == "compile" else []
        return [cmd, path, "--variant", str(ws.variant), *extra, *opts]
    return argv


def _graph(edit: Callable[[dict], object]) -> Callable[[Workspace, Path], str]:
    return lambda ws, d: ws.graph_file(d, edit)


def _onnx(ws: Workspace, d: Path) -> str:
    return str(ws.onnx)


def _json(ws: Workspace, d: Path) -> str:
    return str(ws.json)


def _run_input(make: Callable[[Workspace, Path], str], *opts: str
               ) -> Callable[[Workspace, Path], list[str]]:
    return lambda ws, d: ["run", str(ws.onnx), "--variant", str(ws.variant),
                          "--input", make(ws, d), *opts]


def _nodes(data: dict) -> list[dict]:
    return data["nodes"]


def _set(obj: dict, key: str, value: object) -> None:
    obj[key] = value


def _big_batch(ws: Workspace, d: Path) -> str:
    from fusion.frontend.json_format import save_json
    from fusion.ir.synthetic import mlp

    save_json(mlp(layers=2, width=8, batch=10**12), d / "big.json")
    return str(d / "big.json")


def _cycle(data: dict) -> None:
    # the matmul reads the relu's output: a loop
    data["nodes"][0]["inputs"][0] = data["nodes"][3]["outputs"][0]


def _onnx_without_outputs(ws: Workspace, d: Path) -> str:
    import onnx

    model = onnx.load(ws.onnx)
    del model.graph.output[:]
    onnx.save(model, d / "m.onnx")
    return str(d / "m.onnx")


def _onnx_no_nodes(ws: Workspace, d: Path) -> str:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    onnx.save(helper.make_model(helper.make_graph([], "g", [x], [x])), d / "m.onnx")
    return str(d / "m.onnx")


def _flip_bin(plan: Path) -> None:
    binary = next((plan / "kernels").glob("*.bin"))
    data = bytearray(binary.read_bytes())
    data[0] ^= 1
    binary.write_bytes(bytes(data))


def _edit_descriptor(key: str, value: object) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        data = json.loads((folder / "variant.json").read_text())
        data["config"][key] = value
        (folder / "variant.json").write_text(json.dumps(data))
    return edit


def _tamper_verilog(folder: Path) -> None:
    path = folder / "hwgen_accel.v"
    path.write_text(path.read_text().replace("module ", "module  ", 1) + "// edited\n")


def _corrupt_entries(text: str) -> Callable[[list[Path]], None]:
    def edit(files: list[Path]) -> None:
        for f in files:
            f.write_text(text if text != "truncate" else f.read_text()[: len(f.read_text()) // 2])
    return edit


def _binary(edit: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda folder: edit(folder / "obj" / "hwgen_tb_top")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:4096])


def _build_case(name: str, edit: Callable[[Path], None], match: str = "", *,
                heal: bool = True) -> Case:
    # The env is filled in when the case runs (the copy is made in its folder).
    case = Case(name, lambda ws, d: [], match, heal=heal, process=True)

    def argv(ws: Workspace, d: Path) -> list[str]:
        case.env = ws.build_copy(d, edit)
        return ["gemm", "--variant", str(ws.variant), *GEMM]
    case.argv = argv
    return case


def cases() -> list[Case]:  # noqa: PLR0915 - a flat list reads best
    bad_counts = [("0", "at least 1"), ("-5", "at least 1"), ("nan", ""), ("abc", ""),
                  ("1.5", "")]
    out = [
        Case("no command", lambda ws, d: []),
        Case("unknown command", lambda ws, d: ["frobnicate"]),
        Case("unknown option", _gemm("--frobnicate")),
        Case("missing required option", lambda ws, d: ["gemm", "--m", "4"]),
        Case("option without its value", _gemm("--seed")),
    ]
    # generate: every size option, through VariantConfig's validation
    for opt in ("--rows", "--cols", "--port-bytes", "--port-latency", "--spad-a-depth",
                "--spad-e-depth", "--imem-depth", "--mem-addr-bits"):
        for value in ("0", "-1", "nan", "1000000000000"):
            out.append(Case(f"generate {opt} {value}", _generate(opt, value)))
    out += [
        Case("generate --rows 3 (not a power of two)", _generate("--rows", "3")),
        Case("generate --port-bytes 3", _generate("--port-bytes", "3")),
        Case("generate unknown stage", _generate("--epilogue", "bias,frob")),
        Case("generate stage order gemm refuses", _generate("--epilogue", "relu,bias"),
             "order"),
        Case("generate --config missing", lambda ws, d: ["generate", "--config",
                                                         str(d / "no.json"), "-o", str(d)]),
        Case("generate --config garbage", lambda ws, d: [
            "generate", "--config", write(d / "c.json", b"\x00\xff{"), "-o", str(d / "v")]),
        Case("generate --config a list", lambda ws, d: [
            "generate", "--config", json_file(d, [1, 2]), "-o", str(d / "v")]),
        Case("generate --config rows a string", lambda ws, d: [
            "generate", "--config", json_file(d, {"rows": "x"}), "-o", str(d / "v")]),
        Case("generate --config unknown field", lambda ws, d: [
            "generate", "--config", json_file(d, {"frob": 1}), "-o", str(d / "v")]),
        Case("generate --config rows 2.5", lambda ws, d: [
            "generate", "--config", json_file(d, {"rows": 2.5}), "-o", str(d / "v")]),
        Case("generate -o onto a file", lambda ws, d: [
            "generate", *VARIANT, "-o", write(d / "file", "x")]),
    ]
    # gemm: counts, tiling, seeds, stages
    for opt in ("--m", "--k", "--n", "--tm", "--tn", "--kt"):
        for value, match in bad_counts:
            out.append(Case(f"gemm {opt} {value}", _gemm(opt, value), match))
    out += [
        Case("gemm --m 10**12", _gemm("--m", "1000000000000")),
        Case("gemm --k 10**12", _gemm("--k", "1000000000000")),
        Case("gemm --tm too large for the scratchpad", _gemm("--m", "64", "--k", "512",
                                                             "--tm", "8")),
        Case("gemm --kt not a multiple of k_align", _gemm("--k", "64", "--kt", "3")),
        Case("gemm --kt with --tm 2", _gemm("--m", "16", "--k", "64", "--kt", "8",
                                           "--tm", "2")),
        Case("gemm --loop-order bad", _gemm("--loop-order", "km")),
        Case("gemm --seed -1", _gemm("--seed", "-1")),
        Case("gemm --seed nan", _gemm("--seed", "nan")),
        Case("gemm --seed 2**80", _gemm("--seed", str(2**80))),
        Case("gemm unknown stage", _gemm("--epilogue", "frob")),
        Case("gemm stages out of order", _gemm("--epilogue", "relu,bias")),
        Case("gemm --variant missing", lambda ws, d: ["gemm", "--variant", str(d / "no"),
                                                      *GEMM]),
        Case("gemm --variant a file", lambda ws, d: ["gemm", "--variant", write(d / "f", "x"),
                                                     *GEMM]),
    ]
    # variant folders
    out += [
        Case("variant.json garbage", lambda ws, d: ["gemm", "--variant", ws.variant_copy(
            d, lambda f: write(f / "variant.json", b"\xff\x00")), *GEMM]),
        Case("variant.json a list", lambda ws, d: ["gemm", "--variant", ws.variant_copy(
            d, lambda f: write(f / "variant.json", "[1, 2]")), *GEMM]),
        Case("descriptor rows edited", lambda ws, d: ["gemm", "--variant", ws.variant_copy(
            d, _edit_descriptor("rows", 4)), *GEMM], "regenerate"),
        Case("descriptor rows invalid", lambda ws, d: ["gemm", "--variant", ws.variant_copy(
            d, _edit_descriptor("rows", -2)), *GEMM]),
        Case("Verilog deleted", lambda ws, d: ["gemm", "--variant", ws.variant_copy(
            d, lambda f: (f / "hwgen_accel.v").unlink()), *GEMM], "hwgen generate"),
        Case("Verilog replaced by garbage", lambda ws, d: ["gemm", "--variant", ws.variant_copy(
            d, lambda f: write(f / "hwgen_accel.v", "garbage\n")), *GEMM], "hwgen generate"),
        Case("Verilog edited", lambda ws, d: ["gemm", "--variant", ws.variant_copy(
            d, _tamper_verilog), *GEMM], "hwgen generate"),
        Case("Verilog deleted (run)", lambda ws, d: ["run", str(ws.json), "--variant",
                                                     ws.variant_copy(
            d, lambda f: (f / "hwgen_accel.v").unlink())], "hwgen generate"),
    ]
    # the build cache, private copies
    out += [
        _build_case("build.json {}", lambda f: write(f / "build.json", "{}")),
        _build_case("build.json [1,2]", lambda f: write(f / "build.json", "[1, 2]")),
        _build_case("simulator binary truncated", _binary(_truncate)),
        _build_case("simulator binary deleted", _binary(lambda p: p.unlink())),
    ]
    # models: files
    for cmd in ("inspect", "compile", "run"):
        out += [
            Case(f"{cmd} missing model", _model_cmd(cmd, lambda ws, d: str(d / "no.onnx"))),
            Case(f"{cmd} wrong extension", _model_cmd(cmd, lambda ws, d: write(d / "m.txt",
                                                                               "x"))),
            Case(f"{cmd} 0-byte .onnx", _model_cmd(cmd, lambda ws, d: write(d / "m.onnx",
                                                                            b""))),
            Case(f"{cmd} garbage .onnx", _model_cmd(cmd, lambda ws, d: write(
                d / "m.onnx", bytes(range(256)) * 4))),
            Case(f"{cmd} 0-byte .json", _model_cmd(cmd, lambda ws, d: write(d / "m.json",
                                                                            b""))),
            Case(f"{cmd} required input ''", _model_cmd(cmd, _graph(
                lambda g: _nodes(g)[0]["inputs"].__setitem__(0, "")))),
        ]
    out += [
        Case("onnx without outputs", _model_cmd("compile", _onnx_without_outputs)),
        Case("onnx without nodes", _model_cmd("compile", _onnx_no_nodes)),
        Case("a folder as the model", _model_cmd("inspect", lambda ws, d: str(d) + ".json")),
    ]
    # JSON graphs: every field
    graph_edits: list[tuple[str, Callable[[dict], object]]] = [
        ("top level a list", lambda g: g.clear()),
        ("no format", lambda g: g.pop("format")),
        ("version 99", lambda g: _set(g, "version", 99)),
        ("version a string", lambda g: _set(g, "version", "1")),
        ("inputs not a list", lambda g: _set(g, "inputs", "x")),
        ("graph input ''", lambda g: _set(g, "inputs", [""])),
        ("graph output ''", lambda g: _set(g, "outputs", [""])),
        ("no outputs", lambda g: _set(g, "outputs", [])),
        ("no nodes", lambda g: (_set(g, "nodes", []), _set(g, "outputs", ["x"]))),
        ("unknown input tensor", lambda g: _set(g, "inputs", ["nope"])),
        ("unknown output tensor", lambda g: _set(g, "outputs", ["nope"])),
        ("output is an input", lambda g: _set(g, "outputs", ["x"])),
        ("input listed twice", lambda g: _set(g, "inputs", ["x", "x"])),
        ("tensors a list", lambda g: _set(g, "tensors", [])),
        ("tensor shape negative", lambda g: _set(g["tensors"]["x"], "shape", [-2, 8])),
        ("tensor shape floats", lambda g: _set(g["tensors"]["x"], "shape", [2.0, 8])),
        ("tensor dtype unknown", lambda g: _set(g["tensors"]["x"], "dtype", "int7")),
        ("tensor missing", lambda g: g["tensors"].pop("fc0/bias_add")),
        ("quant scale negative", lambda g: _set(g["tensors"]["x"]["quant"], "scale", [-1.0])),
        ("quant scale zero", lambda g: _set(g["tensors"]["x"]["quant"], "scale", [0])),
        ("quant zero point out of range", lambda g: _set(g["tensors"]["x"]["quant"],
                                                         "zero_point", [300])),
        ("quant axis out of range", lambda g: _set(g["tensors"]["w0"]["quant"], "axis", 5)),
        ("node not an object", lambda g: _nodes(g).__setitem__(0, "qmatmul")),
        ("node op missing", lambda g: _nodes(g)[0].pop("op")),
        ("node op unknown", lambda g: _set(_nodes(g)[0], "op", "frob")),
        ("node name duplicated", lambda g: _set(_nodes(g)[1], "name", "fc0/qmatmul")),
        ("two producers of a tensor", lambda g: _set(_nodes(g)[1], "outputs",
                                                     ["fc0/qmatmul"])),
        ("node input unknown", lambda g: _set(_nodes(g)[1], "inputs", ["fc0/qmatmul", "zz"])),
        ("node input a number", lambda g: _set(_nodes(g)[1], "inputs", ["fc0/qmatmul", 7])),
        ("too many inputs", lambda g: _nodes(g)[0]["inputs"].append("b0")),
        ("too few inputs", lambda g: _nodes(g)[0]["inputs"].pop()),
        ("too many outputs", lambda g: _nodes(g)[3]["outputs"].append("extra")),
        ("no outputs on a node", lambda g: _set(_nodes(g)[3], "outputs", [])),
        ("a cycle", _cycle),
        ("attrs a list", lambda g: _set(_nodes(g)[2], "attrs", [])),
        ("attr of the wrong type", lambda g: _set(_nodes(g)[2]["attrs"], "shift", "big")),
        ("attr unknown", lambda g: _set(_nodes(g)[3]["attrs"], "frob", 1)),
        ("attr out of range", lambda g: _set(_nodes(g)[2]["attrs"], "shift",
                                             [99, 99, 99, 99])),
        ("initializer bad base64", lambda g: _set(g["initializers"]["w0"], "data", "@@@")),
        ("initializer wrong size", lambda g: _set(g["initializers"]["w0"], "shape", [9, 9])),
        ("initializer missing", lambda g: g["initializers"].pop("w0")),
        ("initializer dtype unknown", lambda g: _set(g["initializers"]["w0"], "dtype", "x")),
        ("weights float", lambda g: (_set(g["initializers"]["w0"], "dtype", "float32"),
                                     _set(g["initializers"]["w0"], "shape", [2, 4]))),
    ]
    out += [Case(f"json: {name}", _model_cmd("compile", _graph(edit)))
            for name, edit in graph_edits]
    # options of the model commands
    out += [
        Case("compile --min-gain nan", _model_cmd("compile", _json, "--min-gain", "nan")),
        Case("compile --min-gain -5", _model_cmd("compile", _json, "--min-gain", "-5")),
        Case("compile --min-gain 2", _model_cmd("compile", _json, "--min-gain", "2")),
        Case("run --shadow-inputs -1", _model_cmd("run", _json, "--shadow-inputs", "-1")),
        Case("run --shadow-inputs many", _model_cmd("run", _json, "--shadow-inputs", "10**6")),
        Case("run with neither model nor --plan", lambda ws, d: [
            "run", "--variant", str(ws.variant)], "give a MODEL"),
        Case("run --plan with --no-fusion", lambda ws, d: [
            "run", "--plan", str(ws.plan), "--variant", str(ws.variant), "--no-fusion"],
            "cannot change a compiled plan"),
        Case("compile --input-shape for JSON", _model_cmd("compile", _json, "--input-shape",
                                                          "x=4,8")),
        Case("inspect --input-shape x=a", _model_cmd("inspect", _onnx, "--input-shape", "x=a")),
        Case("inspect --input-shape x=-1", _model_cmd("inspect", _onnx,
                                                      "--input-shape", "x=-1,64")),
        Case("inspect --input-shape unknown input", _model_cmd("inspect", _onnx,
                                                              "--input-shape", "y=8,64")),
        Case("inspect --input-shape twice", _model_cmd("inspect", _onnx, "--input-shape",
                                                       "x=8,64", "--input-shape", "x=8,64")),
        Case("compile batch 10**12", _model_cmd("compile", _big_batch), "mem-addr-bits"),
        Case("compile -o onto a file", lambda ws, d: [
            "compile", str(ws.json), "--variant", str(ws.variant), "-o", write(d / "f", "x")]),
        Case("compile -o a folder that is not a plan", lambda ws, d: [
            "compile", str(ws.json), "--variant", str(ws.variant), "-o",
            str(Path(write(d / "mine.txt", "keep me")).parent)]),
        Case("compile --cache a file", lambda ws, d: [
            "compile", str(ws.json), "--variant", str(ws.variant), "-o", str(d / "p"),
            "--cache", write(d / "f", "x")]),
        Case("run --seed -1", _model_cmd("run", _json, "--seed", "-1")),
        Case("run --seed nan", _model_cmd("run", _json, "--seed", "nan")),
        Case("run --output unknown name", _model_cmd("run", _json, "--output", "zz=o.npy")),
        Case("run --output into a missing folder", lambda ws, d: [
            "run", str(ws.json), "--variant", str(ws.variant), "--output",
            str(d / "no" / "o.npy")]),
    ]
    # kernel cache corruption: a cache that fails its checks is rebuilt (exit 0 is right)
    for what, text in (("garbage", "\x00garbage"), ("truncated", "truncate"), ("{}", "{}"),
                       ("[]", "[]")):
        out.append(Case(f"kernel cache entries {what}", lambda ws, d, text=text: [
            "compile", str(ws.json), "--variant", str(ws.variant), "-o", str(d / "p"),
            "--cache", ws.cache_copy(d, _corrupt_entries(text))], heal=True))
    # input files
    out += [
        Case("--input missing file", _run_input(lambda ws, d: str(d / "no.npy"))),
        Case("--input not a .npy", _run_input(lambda ws, d: write(d / "x.npy", "hello"))),
        Case("--input wrong shape", _run_input(lambda ws, d: npy(d, np.zeros((3, 64),
                                                                              np.float32)))),
        Case("--input wrong rank", _run_input(lambda ws, d: npy(d, np.zeros(512, np.float32)))),
        Case("--input wrong dtype", _run_input(lambda ws, d: npy(d, np.zeros((8, 64),
                                                                              np.complex64)))),
        Case("--input strings", _run_input(lambda ws, d: npy(d, np.full((8, 64), "a")))),
        Case("--input object array (pickle)", _run_input(lambda ws, d: npy(
            d, np.array([{"a": 1}] * 512, dtype=object).reshape(8, 64)))),
        Case("--input NaN", _run_input(lambda ws, d: npy(d, np.full((8, 64), np.nan,
                                                                     np.float32))), "NaN|finite"),
        Case("--input inf", _run_input(lambda ws, d: npy(d, np.full((8, 64), np.inf,
                                                                     np.float32))), "finite"),
        Case("--input unknown name", _run_input(lambda ws, d: "zz=" + str(ws.x))),
        Case("--input int8 out of range for a JSON graph", lambda ws, d: [
            "run", str(ws.json), "--variant", str(ws.variant), "--input",
            npy(d, np.full((4, 8), 1000, np.int64))]),
        Case("--input a folder", _run_input(lambda ws, d: str(d))),
    ]
    # plan folders (hwgen run --plan)
    out += [
        Case("plan .bin tampered", lambda ws, d: ["run", "--plan", ws.plan_copy(d, _flip_bin),
                                                  "--variant", str(ws.variant)], "SHA-256"),
        Case("plan.json garbage", lambda ws, d: ["run", "--plan", ws.plan_copy(
            d, lambda p: write(p / "plan.json", "{")), "--variant", str(ws.variant)],
             "plan.json is not valid JSON"),
        Case("plan for another variant", lambda ws, d: [
            "run", "--plan", str(ws.plan), "--variant", _other_variant(ws, d)], "variant"),
        Case("plan .bin deleted", lambda ws, d: ["run", "--plan", ws.plan_copy(
            d, lambda p: next((p / "kernels").glob("*.bin")).unlink()),
            "--variant", str(ws.variant)], ".bin is missing"),
    ]
    return out


def _other_variant(ws: Workspace, d: Path) -> str:
    variant_folder(d / "v4", ["--rows", "4", "--cols", "4"])
    return str(d / "v4")


def variant_folder(folder: Path, options: list[str]) -> object:
    """Generate a variant folder from ``hwgen generate``-style options; its config."""
    from hwgen.config import VariantConfig
    from hwgen.gateware.emit import generate

    pairs = dict(zip(options[::2], options[1::2], strict=True))
    config = VariantConfig(**{k.lstrip("-").replace("-", "_"): int(v) for k, v in pairs.items()})
    with contextlib.redirect_stdout(io.StringIO()):
        generate(config, folder)
    return config
