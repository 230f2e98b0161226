"""The bad-input campaign's cases of issue 29's probe that hwgen once answered wrongly with exit
status 0 or far too slowly: a plan whose weights were changed with every hash recomputed (run
with its model, it must be refused), a plan that claims another model's SHA-256, and a
20,000-node chain of QuantizeLinear/DequantizeLinear pairs (``hwgen inspect`` must answer,
exit 0, within the campaign's timeout; it took minutes for 4,000 nodes).

:func:`forge_weights` and :func:`forge_source` are what a determined editor does to a plan
folder; the tests use them too (``tests/test_cli_plan_run.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.bad_input_cases import Case, Workspace

#: Nodes of the Q/DQ chain case: the length the issue asks to inspect "in seconds".
CHAIN_NODES = 20_000


def _reseal(folder: Path, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to ``plan.json``, then record the graph file's size, SHA-256 and
    signature and the plan's digest again, so that every hash matches the edited plan."""
    from fusion.compiler.plan_folder import GRAPH_FILE, PLAN_FILE, plan_digest
    from fusion.frontend.json_format import from_dict

    plan = json.loads((folder / PLAN_FILE).read_text())
    change(plan)
    blob = (folder / GRAPH_FILE).read_bytes()
    plan["files"][GRAPH_FILE] = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    plan["signature"] = from_dict(json.loads(blob)).signature()
    plan["digest"] = plan_digest(plan)
    (folder / PLAN_FILE).write_text(json.dumps(plan, indent=1))


def forge_weights(folder: Path) -> str:
    """Change the first element of the plan's largest 8-bit initializer in ``graph.json`` and
    reseal the plan (hashes, signature, digest); the name of the initializer changed."""
    from fusion.compiler.plan_folder import GRAPH_FILE
    from fusion.frontend.json_format import from_dict, to_dict

    path = folder / GRAPH_FILE
    graph = from_dict(json.loads(path.read_text()))
    name = max((k for k, v in graph.initializers.items() if v.dtype.itemsize == 1),
               key=lambda k: graph.initializers[k].size)
    value = graph.initializers[name].copy()
    value.flat[0] = value.flat[0] + 1 if value.flat[0] < 100 else value.flat[0] - 1
    data = to_dict(graph.replace(initializers={**graph.initializers, name: value}))
    path.write_text(json.dumps(data, indent=1) + "\n")
    _reseal(folder, lambda plan: None)
    return name


def forge_source(folder: Path, model: Path) -> None:
    """Record ``model`` (path and SHA-256) as the plan's source model, and reseal the plan."""
    from fusion.compiler.plan_folder import file_sha256

    def claim(plan: dict) -> None:
        plan["source"] = {"path": str(model), "sha256": file_sha256(model)}
    _reseal(folder, claim)


def qdq_chain(nodes: int, path: Path) -> Path:
    """An ONNX model of ``nodes`` nodes: ``x -> Q -> DQ -> Q -> DQ ...`` (one scale and zero
    point for all), which the Q/DQ folding reduces to one quantize and one dequantize."""
    import onnx
    from onnx import TensorProto, helper

    made, prev = [], "x"
    for i in range(nodes // 2):
        made.append(helper.make_node("QuantizeLinear", [prev, "s", "z"], [f"q{i}"],
                                     name=f"Q{i}"))
        made.append(helper.make_node("DequantizeLinear", [f"q{i}", "s", "z"], [f"d{i}"],
                                     name=f"DQ{i}"))
        prev = f"d{i}"
    graph = helper.make_graph(
        made, "qdq_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
         helper.make_tensor("z", TensorProto.INT8, [], [0])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _model_plan(ws: Workspace, d: Path) -> Path:
    """A plan folder in ``d`` compiled from the workspace's JSON graph (its source recorded)."""
    from fusion.compiler.plan import compile_model
    from fusion.compiler.plan_folder import write_plan
    from fusion.frontend.load import load_model
    from fusion.kernels.cache import KernelCache
    from hwgen.gateware.folder import read_variant

    folder = d / "plan"
    write_plan(compile_model(load_model(ws.json), read_variant(ws.variant),
                             cache=KernelCache(ws.cache)), folder, source=ws.json)
    return folder


def _forged_run(forge: Callable[[Workspace, Path, Path], object], model: Callable[
        [Workspace, Path], Path]) -> Callable[[Workspace, Path], list[str]]:
    """``hwgen run MODEL --plan P`` of a plan compiled from the workspace's graph, forged."""
    def argv(ws: Workspace, d: Path) -> list[str]:
        folder = _model_plan(ws, d)
        forge(ws, d, folder)
        return ["run", str(model(ws, d)), "--plan", str(folder), "--variant", str(ws.variant)]
    return argv


def _other_graph(ws: Workspace, d: Path) -> Path:
    """The workspace's graph with other weights: a model the plan was not compiled from."""
    data = json.loads(Path(ws.json).read_text())
    for array in (data["initializers"][k] for k in sorted(data["initializers"])):
        if array["dtype"] == "int8":
            raw = np.frombuffer(base64.b64decode(array["data"]), np.int8)
            array["data"] = base64.b64encode((raw // 2).tobytes()).decode()
            break
    path = d / "other.json"
    path.write_text(json.dumps(data))
    return path


def probe_cases() -> list[Case]:
    """The cases (names start with ``probe:``)."""
    return [
        Case("probe: run MODEL --plan, the plan's weights changed and every hash resealed",
             _forged_run(lambda ws, d, p: forge_weights(p), lambda ws, d: Path(ws.json)),
             "is not what hwgen compile makes of"),
        Case("probe: run MODEL --plan, the plan claiming MODEL's SHA-256",
             _forged_run(lambda ws, d, p: forge_source(p, _other_graph(ws, d)),
                         lambda ws, d: d / "other.json"),
             "is not what hwgen compile makes of"),
        Case(f"probe: inspect a chain of {CHAIN_NODES:,} Q/DQ nodes",
             lambda ws, d: ["inspect", str(qdq_chain(CHAIN_NODES, d / "chain.onnx"))],
             answer=True, process=True),
    ]
