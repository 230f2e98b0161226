""":func:`read_plan`: a plan folder back to the :class:`~fusion.compiler.plan.CompiledModel`
that :func:`fusion.runtime.run.run_compiled` runs, without recompiling.

Nothing is used before it is checked, in this order:

1. ``plan.json``: its size, JSON, shape (``{}`` or ``[1, 2]`` are refused by name), format tag
   and version, and its own digest;
2. the plan's variant key and gateware digest against the variant it is to run on, and the
   source model's SHA-256 when a model is given;
3. every file ``plan.json`` lists (exactly the graph, the explanation and each kernel's
   ``.bin`` and ``.asm``): its size against the record and a bound before it is read, then
   its SHA-256;
4. the graph (``graph.json``) against the plan's graph signature; with a model, against the
   graph the compile of that model gives: the model imported with the plan's batch and input
   shapes and run through the passes with its options (no candidate is priced), compared
   node by node, tensor by tensor and constant by constant;
5. the steps: each host step is a host node of the graph (or a node of a chain the host may
   run instead, :data:`fusion.compiler.lower.HOST_ALTERNATIVES`), each kernel the segment of
   a chain the lowering finds, with its kind and params; together they cover every node once, in the
   order a compile gives them;
6. the memory plan, recomputed from those steps, against every recorded placement;
7. each kernel's metadata against what its kind, params and placement give
   (:func:`fusion.kernels.program.restore_kernel`).

The digest and the SHA-256s are unkeyed: they catch accidents (a truncated or damaged file, a
plan for another variant or gateware, files of two compiles mixed), not a deliberate edit,
since whoever changes a file can compute them again. Only a model given with the plan (step
4) tells that the graph is the model's; without one, a plan is as trustworthy as the place it
came from.

What is not recomputed is what a compile chooses (the cover of each chain, a GEMM's tiling:
taken from the plan and checked to be one the kind offers) and builds (the programs: taken
from the ``.bin`` files, whose hashes were checked).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from fusion.compiler import relayout
from fusion.compiler.kernels import KernelSpec, spec_for
from fusion.compiler.lower import HOST_ALTERNATIVES, Chain, chains
from fusion.compiler.options import CompileOptions
from fusion.compiler.plan import (
    PLAN_FORMAT,
    PLAN_TAG,
    CompiledModel,
    HostStep,
    KernelStep,
    after_passes,
    host_step,
    order_and_place,
    tensor_shapes,
)
from fusion.compiler.plan_folder import (
    EXPLAIN_FILE,
    GRAPH_FILE,
    KERNELS_DIR,
    MAX_PLAN_BYTES,
    PLAN_FILE,
    PlanError,
    file_sha256,
    file_stem,
    is_plan,
    load_plan_json,
    plan_digest,
)
from fusion.compiler.store_layout import kmajor_producers
from fusion.cost.host import HostCostModel
from fusion.frontend.json_format import from_dict as graph_from_dict
from fusion.frontend.load import load_model
from fusion.ir.compare import first_difference
from fusion.ir.graph import Graph, GraphError, Node
from fusion.kernels.cache import CacheEntry
from fusion.kernels.program import restore_kernel
from fusion.kernels.protocol import Refusal
from hwgen.config import VariantConfig
from hwgen.files import check_regular, read_bytes
from hwgen.gateware.sources import gateware_digest

#: Bytes of ``graph.json`` allowed beyond four times the variant's external memory (base64
#: constants take 4/3 of their bytes; a graph whose constants cannot fit the memory cannot
#: run, so a larger file is refused before it is read).
GRAPH_SLACK_BYTES = 16 << 20


def read_plan(folder: Path | str, config: VariantConfig, *, model: Path | str | None = None,
              variant: str | None = None) -> CompiledModel:
    """The compiled model of a plan folder, checked (see the module docstring).

    Parameters
    ----------
    folder : path
        Written by :func:`fusion.compiler.plan_folder.write_plan` (``hwgen compile -o``).
    config : VariantConfig
        The variant it is to run on; the plan must have been compiled for it.
    model : path, optional
        The model file it is said to come from; refused unless its SHA-256 is the one the
        plan recorded and the graph its compile gives (import and passes) is the plan's.
    variant : str, optional
        The variant folder, named in the fix of an error message.

    Returns
    -------
    CompiledModel
        As :func:`fusion.compiler.plan.compile_model` made it, without its decisions (the
        explanation is the folder's ``explain.txt``) or kernel-cache statistics.

    Raises
    ------
    PlanError
        A ``ValueError`` naming the file, what is wrong and the fix (recompile the plan).
    """
    return _Reader(Path(folder), config, variant).read(model)


class _Reader:
    def __init__(self, folder: Path, config: VariantConfig, variant: str | None) -> None:
        self.folder, self.config = folder, config
        self.plan_path = folder / PLAN_FILE
        self.variant = variant or "VARIANT"
        self.model = "MODEL"
        self.options = CompileOptions()

    @property
    def fix(self) -> str:
        return (f"recompile it with 'hwgen compile {self.model} --variant {self.variant} "
                f"-o {self.folder}'")

    def fail(self, message: str) -> PlanError:
        return PlanError(f"{message}; {self.fix}")

    def get(self, obj: dict[str, Any], key: str, kind: type | tuple[type, ...],
            where: str) -> Any:
        """``obj[key]``, refused unless of ``kind`` (never a bool for a number)."""
        value = obj.get(key)
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else
                                                     (kind,)):
            value = None
        if not isinstance(value, kind):
            raise self.fail(f"{self.plan_path}: {where}{key} is missing or not "
                            f"{_kind_name(kind)}")
        return value

    # -- 1 to 3: plan.json, the variant, the files ------------------------------------------

    def read(self, model: Path | str | None) -> CompiledModel:
        try:
            data = load_plan_json(self.plan_path)
        except PlanError as exc:
            raise self.fail(str(exc)) from None
        if not is_plan(data):
            raise self.fail(f"{self.plan_path} is not an hwgen plan (it is JSON, but not a "
                            f"plan object)")
        if data.get("format") != PLAN_TAG or data.get("version") != PLAN_FORMAT:
            found = data.get("version") if data.get("format") == PLAN_TAG else data["format"]
            raise self.fail(f"{self.plan_path} has plan format {found!r}; this hwgen reads "
                            f"format {PLAN_FORMAT}")
        source = data.get("source")
        if source is not None and not (isinstance(source, dict) and set(source) == {
                "path", "sha256"} and all(isinstance(v, str) for v in source.values())):
            raise self.fail(f"{self.plan_path}: source must be null or the model's path and "
                            f"sha256")
        self.model = source["path"] if source is not None else self.model
        if data.get("digest") != plan_digest(data):
            raise self.fail(f"{self.plan_path} does not match its recorded digest: it was "
                            f"edited or damaged after hwgen compile wrote it")
        self.check_variant(data)
        if model is not None:
            self.model = str(model)
            self.check_source(data, Path(model))
        files = self.read_files(data)
        graph = self.read_graph(data, files[GRAPH_FILE])
        if model is not None:
            self.derive(data, graph, Path(model))
        return self.rebuild(data, graph, files)

    def check_variant(self, data: dict[str, Any]) -> None:
        recorded, key = self.get(data, "variant", str, ""), self.config.key()
        if recorded != key:
            raise self.fail(f"plan {self.folder} was compiled for variant {recorded}, not "
                            f"{key} (the variant it is to run on)")
        recorded, current = self.get(data, "gateware_digest", str, ""), gateware_digest()
        if recorded != current:
            raise self.fail(f"plan {self.folder} was compiled for gateware {recorded}, not "
                            f"this hwgen's {current}")

    def check_source(self, data: dict[str, Any], model: Path) -> None:
        check_regular(model, "MODEL")  # a FIFO would block the hash below
        source = data.get("source")
        if not isinstance(source, dict) or not isinstance(source.get("sha256"), str):
            raise self.fail(f"plan {self.folder} records no source model to check {model} "
                            f"against")
        if not model.is_file():
            raise PlanError(f"no model at {model}")
        if file_sha256(model) != source["sha256"]:
            raise self.fail(f"{model} is not the model plan {self.folder} was compiled from "
                            f"({source.get('path')}, SHA-256 {source['sha256'][:16]}...)")

    def derive(self, data: dict[str, Any], graph: Graph, model: Path) -> None:
        """Refuse ``graph`` unless it is what the compile of ``model`` makes of it, with the
        plan's batch, input shapes and options: import and passes, no pricing. The hashes
        only tell a plan from a damaged copy of itself; anyone can recompute them."""
        options, batch = self.options_of(data), self.batch_of(data)
        # --input-shape gives shapes at batch 1; a JSON graph takes none (its shapes are static)
        shapes = ({name: (1, *graph.tensors[name].shape[1:]) if batch != 1 else
                   graph.tensors[name].shape for name in graph.inputs}
                  if model.suffix.lower() == ".onnx" else None)
        try:
            derived = after_passes(load_model(model, shapes, batch), self.config, options)
            # the copies the compile inserted after pricing (fusion.compiler.relayout)
            derived = relayout.apply(derived, self.relayouts_of(data))
        except ValueError as exc:  # GraphError, CompileError, a relayout not of this graph
            raise self.fail(f"{model} is not the model plan {self.folder} was compiled from "
                            f"(imported with the plan's batch {batch} and input shapes: {exc})"
                            ) from None
        why = first_difference(derived, graph)
        if why:
            raise self.fail(f"plan {self.folder} is not what hwgen compile makes of {model}: "
                            f"in its {GRAPH_FILE}, {why}")

    def relayouts_of(self, data: dict[str, Any]) -> list[relayout.Relayout]:
        copies = data.get("relayouts", [])  # plans written before copies had none
        try:
            if not isinstance(copies, list):
                raise ValueError(f"relayouts must be a list, not {copies!r}")
            return [relayout.Relayout.from_dict(c) for c in copies]
        except ValueError as exc:
            raise self.fail(f"{self.plan_path}: {exc}") from None

    def options_of(self, data: dict[str, Any]) -> CompileOptions:
        try:  # plans written before the options had every technique
            return CompileOptions.from_dict(data.get("options", {}))
        except ValueError as exc:
            raise self.fail(f"{self.plan_path}: {exc}") from None

    def batch_of(self, data: dict[str, Any]) -> int:
        batch = data.get("batch", 1)  # plans written before batches ran one inference
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise self.fail(f"{self.plan_path}: batch must be a whole number of at least 1, "
                            f"not {batch!r}")
        return batch

    def expected_files(self, data: dict[str, Any]) -> list[str]:
        steps = self.get(data, "steps", list, "")
        names = [GRAPH_FILE, EXPLAIN_FILE]
        for i, step in enumerate(steps):
            where = f"steps[{i}]."
            if not isinstance(step, dict):
                raise self.fail(f"{self.plan_path}: steps[{i}] is not an object")
            if self.get(step, "kind", str, where) == "kernel":
                stem = f"{KERNELS_DIR}/{file_stem(i, self.get(step, 'name', str, where))}"
                names += [f"{stem}.bin", f"{stem}.asm"]
                for key, ext in (("binary", ".bin"), ("listing", ".asm")):
                    if step.get(key) != stem + ext:
                        raise self.fail(f"{self.plan_path}: {where}{key} is "
                                        f"{step.get(key)!r}, not {stem + ext!r}")
        return names

    def limit(self, name: str) -> int:
        if name == GRAPH_FILE:
            return GRAPH_SLACK_BYTES + 4 * self.config.mem_bytes
        if name.endswith(".bin"):
            return 8 * self.config.imem_depth
        return MAX_PLAN_BYTES

    def read_files(self, data: dict[str, Any]) -> dict[str, bytes]:
        """Every file the plan lists, checked for size then SHA-256 before it is used."""
        records = self.get(data, "files", dict, "")
        names = self.expected_files(data)
        unexpected = sorted(set(records) - set(names))
        if unexpected:
            raise self.fail(f"{self.plan_path}: files lists {unexpected[0]!r}, which is no "
                            f"file of this plan")
        out = {}
        for name in names:
            record = records.get(name)
            if not isinstance(record, dict):
                raise self.fail(f"{self.plan_path}: files has no record of {name}")
            size = self.get(record, "bytes", int, f"files[{name!r}].")
            digest = self.get(record, "sha256", str, f"files[{name!r}].")
            path = self.folder / name
            if not path.is_symlink():
                check_regular(path, "plan file")  # named as such, not as missing
            if path.is_symlink() or not path.is_file():
                raise self.fail(f"{path} is missing")
            actual = path.stat().st_size
            if actual != size:
                raise self.fail(f"{path} has {actual:,} bytes, the plan records {size:,}: it "
                                f"was changed or truncated")
            if size > self.limit(name):
                raise self.fail(f"{path} has {size:,} bytes, more than this variant could "
                                f"use ({self.limit(name):,})")
            blob = read_bytes(path, "plan file")
            if hashlib.sha256(blob).hexdigest() != digest:
                raise self.fail(f"{path} does not match its SHA-256 in {PLAN_FILE}: it was "
                                f"changed after hwgen compile wrote it")
            out[name] = blob
        return out

    def read_graph(self, data: dict[str, Any], blob: bytes) -> Graph:
        path = self.folder / GRAPH_FILE
        try:
            graph = graph_from_dict(json.loads(blob.decode("utf-8")), str(path))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # GraphError too
            raise self.fail(f"{path} is not a readable graph: {exc}") from None
        if graph.signature() != self.get(data, "signature", str, ""):
            raise self.fail(f"{path} is not the graph the plan was compiled from (signature "
                            f"{graph.signature()}, the plan records {data['signature']})")
        return graph

    # -- 5 to 7: the steps, the memory plan, the kernels ------------------------------------

    def rebuild(self, data: dict[str, Any], graph: Graph,
                files: dict[str, bytes]) -> CompiledModel:
        options = self.options = self.options_of(data)
        found, host_nodes = chains(graph)
        host = {n.name: n for n in host_nodes}
        # the engine may have put these on the host (cheaper, or refused by the accelerator)
        host.update({n.name: n for c in found for n in c.nodes if n.op in HOST_ALTERNATIVES})
        segments = {n.name: (c, i) for c in found for i, n in enumerate(c.nodes)}
        entries = data["steps"]
        specs: dict[str, KernelSpec] = {}
        covered: list[str] = []
        on_host: list[Node] = []
        for i, step in enumerate(entries):
            where = f"steps[{i}]."
            if step["kind"] == "host":
                node = self.host_step(step, host, where)
                covered.append(node.name)
                on_host.append(node)
            elif step["kind"] == "kernel":
                spec = self.kernel_spec(graph, step, segments, where)
                specs[spec.name] = spec
                covered += spec.nodes
            else:
                raise self.fail(f"{self.plan_path}: {where}kind is {step['kind']!r}, not "
                                f"'host' or 'kernel'")
        # a node in no step is one whose outputs nothing reads: a layout chain the kernel
        # after it reads through (plan._order drops those)
        needed = set(graph.outputs).union(*(spec.inputs for spec in specs.values()),
                                          *(n.inputs for n in on_host))
        missing = [n.name for n in graph.nodes
                   if n.name not in covered and needed.intersection(n.outputs)]
        if missing or len(covered) != len(set(covered)):
            what = (f"node {missing[0]!r} is in no step" if missing else
                    "a node is in two steps")
            raise self.fail(f"{self.plan_path}: the steps do not cover the graph: {what}")
        flagged = {n for n, sp in specs.items() if getattr(sp.params, "kmajor_out", False)}
        plain = [sp.with_params(dataclasses.replace(sp.params, kmajor_out=False))
                 if n in flagged else sp for n, sp in specs.items()]
        kmajor = (kmajor_producers(self.config, plain, tensor_shapes(graph))
                  if options.kmajor_store else set())
        if kmajor != flagged:
            raise self.fail(f"{self.plan_path}: the kernels' output layouts (kmajor_out) are "
                            f"not the ones the compiler chooses for these steps")
        try:
            order, memory = order_and_place(graph, self.config, list(specs.values()),
                                            on_host)
        except ValueError as exc:
            raise self.fail(f"{self.plan_path}: {exc}") from None
        if [s.name for s in order] != [s["name"] for s in entries]:
            raise self.fail(f"{self.plan_path}: the steps are not in the order the graph "
                            f"runs them")
        if not _same(self.get(data, "memory", dict, ""), memory.to_dict()) or \
                self.get(data, "peak_memory_bytes", int, "") != memory.peak_bytes:
            raise self.fail(f"{self.plan_path}: memory is not the memory plan of its steps")
        if self.get(data, "model", str, "") != graph.name:
            raise self.fail(f"{self.plan_path}: model is not the name of its graph")
        self.get(data, "cache", dict, "")  # what the compile's kernel cache did: shown only
        if self.get(data, "predicted_cycles", (int, float), "") < 0:
            raise self.fail(f"{self.plan_path}: predicted_cycles is negative")
        steps: list[KernelStep | HostStep] = []
        for i, (step, entry) in enumerate(zip(order, entries, strict=True)):
            if isinstance(step, Node):
                reason = entry.get("reason", "")
                if not isinstance(reason, str):
                    raise self.fail(f"{self.plan_path}: steps[{i}].reason is not a string")
                steps.append(host_step(graph, step, HostCostModel(), reason))
                continue
            placement = memory.placements[step.name]
            steps.append(self.kernel_step(step, entry, placement, files, i))
        fusion = self.get(data, "fusion", bool, "")
        return CompiledModel(graph, self.config, steps, memory, [], fusion, {},
                             self.batch_of(data), options, relayouts=self.relayouts_of(data))

    def host_step(self, step: dict[str, Any], host: dict[str, Node], where: str) -> Node:
        name = self.get(step, "name", str, where)
        node = host.get(name)
        if node is None:
            raise self.fail(f"{self.plan_path}: {where}name {name!r} is no host step of the "
                            f"graph")
        recorded = (step.get("op"), step.get("inputs"), step.get("outputs"))
        if not _same(recorded, (node.op, node.inputs, node.outputs)):
            raise self.fail(f"{self.plan_path}: {where} does not match node {name!r} of the "
                            f"graph")
        return node

    def kernel_spec(self, graph: Graph, step: dict[str, Any],
                    segments: dict[str, tuple[Chain, int]], where: str) -> KernelSpec:
        ops = self.get(step, "ops", list, where)
        if not ops or not all(isinstance(op, str) for op in ops) or ops[0] not in segments:
            raise self.fail(f"{self.plan_path}: {where}ops does not start at a node of a "
                            f"kernel chain")
        chain, start = segments[ops[0]]
        stop = start + len(ops)
        if [n.name for n in chain.nodes[start:stop]] != ops:
            raise self.fail(f"{self.plan_path}: {where}ops {ops} is not a run of one chain")
        try:  # what the compile did before pricing: lower the segment, check its legality
            base = spec_for(graph, self.config, chain, start, stop, self.options)
            refusal = base if isinstance(base, Refusal) else base.kind.legality(self.config,
                                                                                base.params)
            if refusal is not None:
                raise ValueError(refusal)
            offered = [base.params, *base.kind.variants(self.config, base.params)]
            # a variant a data profile chose (the compile knew the inputs; the reader not)
            offered += base.kind.data_variants(self.config, base.params)
            if hasattr(base.params, "kmajor_out"):  # chosen across kernels: checked after
                offered += [dataclasses.replace(p, kmajor_out=True) for p in offered]
        except ValueError as exc:  # CompileError and KernelRefused are ValueErrors
            raise self.fail(f"{self.plan_path}: {where} cannot run on this variant: "
                            f"{exc}") from None
        recorded = self.get(step, "params", dict, where)
        kind = base.kind
        for params in offered:
            if _same(kind.key_params(params), recorded):
                break
        else:
            raise self.fail(f"{self.plan_path}: {where}params are none the "
                            f"{kind.name} kind offers for {ops}")
        spec = base.with_params(params)
        recorded = (step.get("name"), step.get("form"), step.get("inputs"), step.get("output"),
                    step.get("describe"))
        if not _same(recorded, (spec.name, kind.name, spec.inputs, spec.output,
                                spec.describe())):
            raise self.fail(f"{self.plan_path}: {where} name, form, inputs, output or describe "
                            f"do not match its nodes")
        return spec

    def kernel_step(self, spec: KernelSpec, entry: dict[str, Any], placement: dict[str, int],
                    files: dict[str, bytes], index: int) -> KernelStep:
        where = f"steps[{index}]."
        if not _same(entry.get("placement"), placement):
            raise self.fail(f"{self.plan_path}: {where}placement is not the memory plan's")
        blob = files[entry["binary"]]
        if len(blob) % 8:
            raise self.fail(f"{self.folder / entry['binary']} is not whole 64-bit words")
        words = np.frombuffer(blob, dtype="<u8").tolist()
        if self.get(entry, "program_words", int, where) != len(words):
            raise self.fail(f"{self.plan_path}: {where}program_words is not the length of "
                            f"{entry['binary']}")
        try:
            source = files[entry["listing"]].decode("utf-8")
            kernel_entry = CacheEntry.create(words, source,
                                             self.get(entry, "metadata", dict, where))
            kernel = restore_kernel(spec.kind, self.config, spec.params, kernel_entry,
                                    placement=placement,
                                    what=f"{self.plan_path}: kernel {spec.name!r}")
        except (UnicodeDecodeError, ValueError, GraphError) as exc:
            raise self.fail(str(exc)) from None
        cycles = self.get(entry, "predicted_cycles", (int, float), where)
        if cycles < 0:
            raise self.fail(f"{self.plan_path}: {where}predicted_cycles is negative")
        note = self.get(entry, "note", str, where)
        return KernelStep(spec, kernel, float(cycles), note)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON: ``true`` is not ``1`` and ``1.0`` is not ``1`` (Python's ``==`` says
    they are), and a tuple is the list it is written as."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer",
             float: "a number", bool: "a boolean"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)
