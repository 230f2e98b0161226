"""Run the passes on a model and describe the result (what ``hwgen inspect`` prints).

:func:`inspect_model` does the work and returns a JSON-able report; :func:`render` turns it into
the text the CLI prints. Kept out of the CLI so that the CLI stays the place where arguments
become calls, and so that the report can be tested and reused (``--explain`` later).
"""

from __future__ import annotations

from typing import Any

from fusion.ir.graph import Graph, Quant, Tensor
from fusion.passes.driver import PassLog, optimize

#: Attribute tuples longer than this are summarized (per-channel multipliers can be long).
MAX_ATTR_ITEMS = 8


def _quant(quant: Quant | None) -> dict[str, Any] | None:
    if quant is None:
        return None
    return {"scale": list(quant.scale), "zero_point": list(quant.zero_point), "axis": quant.axis}


def _tensor(t: Tensor) -> dict[str, Any]:
    return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "quant": _quant(t.quant)}


def _attr(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def inspect_model(graph: Graph, *, legalize: bool = True) -> dict[str, Any]:
    """Run the passes on ``graph`` and describe the result.

    Parameters
    ----------
    graph : Graph
        As imported.
    legalize : bool
        Also put convolutions into GEMM form.

    Returns
    -------
    dict
        ``name``, ``signature``, ``inputs``/``outputs`` (tensors), ``nodes`` (topological
        order, each with its output tensors), ``initializers`` (tensors), ``passes`` (those
        that changed the graph), ``not_folded`` (why ops were left as they are), and
        ``imported_nodes`` (the node count before the passes).
    """
    from fusion.passes import conv_legalize, qdq_fold

    log = PassLog()
    out = optimize(graph, legalize=legalize, log=log)
    tensors = out.tensors
    not_folded = qdq_fold.explain(out) + (conv_legalize.explain(out) if legalize else [])
    return {
        "name": out.name,
        "signature": out.signature(),
        "imported_nodes": len(graph.nodes),
        "passes": log.changed_by(),
        "inputs": [_tensor(tensors[n]) for n in out.inputs],
        "outputs": [_tensor(tensors[n]) for n in out.outputs],
        "nodes": [{"name": n.name, "op": n.op, "inputs": list(n.inputs),
                   "outputs": [_tensor(tensors[o]) for o in n.outputs],
                   "attrs": {k: _attr(v) for k, v in n.attrs}}
                  for n in out.topo_order()],
        "initializers": [_tensor(tensors[n]) for n in sorted(out.initializers)],
        "not_folded": not_folded,
    }


# -- text ---------------------------------------------------------------------------------


def _quant_text(q: dict[str, Any] | None) -> str:
    if q is None:
        return ""
    if q["axis"] is None:
        return f"scale={q['scale'][0]:.6g} zp={q['zero_point'][0]}"
    n = len(q["scale"])
    lo, hi = min(q["scale"]), max(q["scale"])
    zps = sorted(set(q["zero_point"]))
    zp = str(zps[0]) if len(zps) == 1 else f"{zps[0]}..{zps[-1]}"
    return f"per-channel axis={q['axis']} ({n}) scale={lo:.4g}..{hi:.4g} zp={zp}"


def _type_text(t: dict[str, Any]) -> str:
    shape = "x".join(str(d) for d in t["shape"]) or "scalar"
    return f"{t['dtype']}[{shape}]"


def _attr_text(value: Any) -> str:
    if isinstance(value, list):
        if len(value) > MAX_ATTR_ITEMS:
            return f"[{', '.join(map(str, value[:3]))}, ... {len(value)} values]"
        return f"[{', '.join(map(str, value))}]"
    return repr(value) if isinstance(value, str) else str(value)


def _table(rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def _splits(nodes: list[dict[str, Any]]) -> list[str]:
    """The GEMMs whose weights, minus their zero points, were split into int8 parts along K
    (:mod:`fusion.passes.weight_zero_point`): their input goes through a ``repeat``."""
    lines = []
    for n in nodes:
        if n["op"] != "repeat" or not n["name"].endswith("/split_k"):
            continue
        times, out = n["attrs"]["times"], n["outputs"][0]
        k = out["shape"][-1] // times
        users = [u["name"] for u in nodes if out["name"] in u["inputs"]]
        lines.append(f"  {', '.join(users)}: {times} int8 parts, K {k} -> {k * times} "
                     f"(input repeated by {n['name']})")
    return lines


def render(report: dict[str, Any]) -> str:
    """The report as the text ``hwgen inspect`` prints."""
    lines = [f"graph {report['name']}: {len(report['nodes'])} nodes after the passes "
             f"({report['imported_nodes']} imported), signature {report['signature']}",
             f"passes that changed it: {', '.join(report['passes']) or 'none'}", "", "inputs:"]
    lines += _table([[t["name"], _type_text(t), _quant_text(t["quant"])]
                     for t in report["inputs"]])
    lines += ["", "nodes:"]
    rows = []
    for n in report["nodes"]:
        for out in n["outputs"]:
            rows.append([n["name"], n["op"], ", ".join(i or "-" for i in n["inputs"]),
                         f"-> {out['name']}", _type_text(out), _quant_text(out["quant"])])
    lines += _table(rows)
    attrs = [(n["name"], n["attrs"]) for n in report["nodes"] if n["attrs"]]
    if attrs:
        lines += ["", "attributes:"]
        lines += _table([[name, " ".join(f"{k}={_attr_text(v)}" for k, v in a.items())]
                         for name, a in attrs])
    if report["initializers"]:
        lines += ["", "initializers:"]
        lines += _table([[t["name"], _type_text(t), _quant_text(t["quant"])]
                         for t in report["initializers"]])
    lines += ["", "outputs:"]
    lines += _table([[t["name"], _type_text(t), _quant_text(t["quant"])]
                     for t in report["outputs"]])
    split = _splits(report["nodes"])
    if split:
        lines += ["", "weights split along K (weight zero points folded):"] + split
    if report["not_folded"]:
        lines += ["", "not folded:"] + [f"  {why}" for why in report["not_folded"]]
    return "\n".join(lines)
