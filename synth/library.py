"""A variant library: several variant folders on one platform, each with its synthesis figures,
its capabilities, its reconfiguration cost and a FuseSoC core (``hwgen variants build``).

``DIR/library.json`` lists the variants; ``DIR/<name>/`` is what ``hwgen generate`` writes
(:func:`hwgen.gateware.emit.generate`, read back by
:func:`hwgen.gateware.folder.open_variant`) with more fields in ``variant.json`` and
``<name>.core`` beside it. Every folder is written into a temporary sibling and renamed into
place once its figures are in, and ``library.json`` is replaced whole after them: building
into an existing library adds or replaces the variants built and leaves the others as they
were; an interrupted build leaves each folder old or new, never a mix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from fusion.kernels.capabilities import capabilities
from hwgen import ecp5
from hwgen.atomic import replacing, write_file
from hwgen.config import VariantConfig
from hwgen.gateware import folder
from hwgen.gateware.emit import TOP_NAME, generate
from hwgen.gateware.fusesoc import core_name, core_text
from hwgen.platform import PlatformConfig
from hwgen.specs import VariantSpec, parse_spec
from synth.cache import SynthesisCache
from synth.flow import SynthesisJob, synthesize

LIBRARY_FILE = "library.json"
LIBRARY_FORMAT, LIBRARY_VERSION = "hwgen-variant-library", 1


def read_specs(specs: Sequence[str], spec_file: str | None = None) -> list[VariantSpec]:
    """The specs given on the command line, then those of ``spec_file`` (a JSON list of the
    same strings), parsed.

    Raises
    ------
    ValueError
        No spec at all, a spec file that is missing or not a JSON list of strings, a bad spec
        (:func:`hwgen.specs.parse_spec`), or two specs naming the same variant.
    """
    texts = list(specs)
    if spec_file is not None:
        try:
            data = json.loads(Path(spec_file).read_text())
        except OSError as exc:
            raise ValueError(f"cannot read --spec {spec_file} ({exc.strerror}); give a JSON "
                             f"file holding a list of variant specs") from None
        except ValueError as exc:
            raise ValueError(f"--spec {spec_file} is not valid JSON ({exc}); give a list of "
                             f"variant specs such as [\"4x4:bias,requant,relu\"]") from None
        if not (isinstance(data, list) and all(isinstance(t, str) for t in data)):
            raise ValueError(f"--spec {spec_file} is not a JSON list of strings; give a list of "
                             f"variant specs such as [\"4x4:bias,requant,relu\"]")
        texts += data
    if not texts:
        raise ValueError("no variant spec given; name at least one, e.g. "
                         "'hwgen variants build -o DIR 4x4:bias,requant,relu'")
    parsed = [parse_spec(t) for t in texts]
    seen: dict[str, str] = {}
    for raw, spec in zip(texts, parsed, strict=True):
        if spec.name in seen:
            raise ValueError(f"variant specs {seen[spec.name]!r} and {raw!r} are the same "
                             f"variant ({spec.text}); give each once")
        seen[spec.name] = raw
    return parsed


def read_library(directory: str | Path) -> dict[str, Any]:
    """The ``library.json`` of ``directory``, checked.

    Raises
    ------
    ValueError
        If it is missing or is not a library file, naming the command that makes one.
    """
    path = Path(directory) / LIBRARY_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{directory} is not a variant library (no {LIBRARY_FILE}); build one "
                         f"with 'hwgen variants build -o {directory} SPEC...'") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} cannot be read ({exc}); rebuild the library with 'hwgen "
                         f"variants build -o {directory} SPEC...'") from None
    if not (isinstance(data, dict) and data.get("format") == LIBRARY_FORMAT
            and data.get("version") == LIBRARY_VERSION and isinstance(data.get("variants"), list)
            and isinstance(data.get("platform"), dict)
            and all(isinstance(v, dict) and isinstance(v.get("folder"), str)
                    and v["folder"] == Path(v["folder"]).name not in ("", ".", "..")
                    for v in data["variants"])):
        raise ValueError(f"{path} is not an hwgen variant library of version "
                         f"{LIBRARY_VERSION}; rebuild it with 'hwgen variants build -o "
                         f"{directory} SPEC...'")
    return data


def _existing(out_dir: Path, platform: PlatformConfig) -> list[dict[str, Any]]:
    """The variants an existing library at ``out_dir`` lists (none for a new or empty
    folder), after refusing a folder that is no library or a library of another platform."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"output {out_dir} is a file, not a folder; choose another -o")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return []
    if not (out_dir / LIBRARY_FILE).exists():
        raise ValueError(f"output folder {out_dir} is not empty and is not a variant library "
                         f"(no {LIBRARY_FILE}); choose a new or empty folder for -o")
    data = read_library(out_dir)
    if data["platform"] != platform.to_dict():
        raise ValueError(f"library {out_dir} is for platform {data['platform']}, not "
                         f"{platform.to_dict()}: a library has one platform; build into "
                         f"another folder, or give the library's --memory options")
    return data["variants"]


def build_library(out_dir: str | Path, specs: Sequence[VariantSpec], platform: PlatformConfig,
                  *, memory_files: Callable[[VariantConfig], Mapping[str, str]],
                  cache: SynthesisCache | None, pnr: bool = True,
                  pnr_timeout: float = 600.0, executor: Executor | None = None,
                  progress: bool = False,
                  notice: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Build the variants of ``specs`` into the library ``out_dir`` (module docstring).

    Parameters
    ----------
    out_dir : path
        A new or empty folder, or a library of the same ``platform``.
    specs : sequence of VariantSpec
        The variants (:func:`read_specs`).
    platform : PlatformConfig
        The board's memory, shared by every variant.
    memory_files : callable
        A variant's memory-system files on ``platform`` (those ``hwgen generate`` writes;
        none for the ideal memory); it refuses a variant that does not fit the platform.
    cache : SynthesisCache or None
        Where synthesis results are kept (None: always synthesize).
    pnr, pnr_timeout
        Place and route for Fmax, and its time limit in seconds.
    executor : Executor, optional
        Runs the synthesis jobs (here, one after another, when None).
    progress : bool
        Show a progress bar.
    notice : callable
        Gets one line for each unusable cache entry.

    Returns
    -------
    dict
        The library written (``library.json``), with ``"built"``: the descriptors of the
        variants built, each with ``"cached"`` (its synthesis came from the cache).
    """
    out_dir = Path(out_dir).resolve()
    kept = _existing(out_dir, platform)
    files = {s.name: dict(memory_files(s.config)) for s in specs}  # every misfit first
    checked = {spec.name: folder.check_replaceable(out_dir / spec.name) for spec in specs}
    built: list[dict[str, Any]] = []
    with ExitStack() as stack:
        tmps, jobs = [], []
        for spec in specs:
            tmp = stack.enter_context(replacing(out_dir / spec.name,
                                                checked=checked[spec.name]))
            descriptor = generate(spec.config, tmp, platform, files[spec.name])
            tmps.append(tmp)
            jobs.append(SynthesisJob(name=spec.name, verilog=(tmp / folder.VERILOG).read_text(),
                                     sha256=descriptor["verilog_sha256"], top=TOP_NAME,
                                     clock_hz=platform.clock_hz, pnr=pnr,
                                     pnr_timeout=pnr_timeout))
        results = synthesize(jobs, cache=cache, executor=executor, progress=progress,
                             notice=notice)
        for spec, tmp, result in zip(specs, tmps, results, strict=True):
            built.append(_finish(spec, tmp, result, platform))
    listed = {v.get("name", v["folder"]): v for v in kept if (out_dir / v["folder"]).is_dir()}
    for spec in specs:
        listed[spec.name] = {"name": spec.name, "folder": spec.name, "spec": spec.text}
    library = {"format": LIBRARY_FORMAT, "version": LIBRARY_VERSION,
               "platform": platform.to_dict(), "variants": sorted(listed.values(),
                                                                    key=lambda v: v["name"])}
    write_file(out_dir / LIBRARY_FILE, (json.dumps(library, indent=2) + "\n").encode())
    return {**library, "built": built}


def _finish(spec: VariantSpec, tmp: Path, result: dict[str, Any],
            platform: PlatformConfig) -> dict[str, Any]:
    """Add the library's fields to a generated folder: the descriptor's ``name``, ``spec``,
    ``capabilities``, ``synthesis``, ``reconfiguration``, ``fusesoc_core``, and the core."""
    path = tmp / folder.DESCRIPTOR
    descriptor = json.loads(path.read_text())
    synthesis = {k: v for k, v in result.items() if k != "cached"}
    core_file = f"{spec.name}.core"
    if result["part"] is None:
        reconfiguration = {"part": None, "cycles": None, "seconds": None,
                           "reason": result["part_reason"], "source": ecp5.SOURCE}
    else:
        reconfiguration = ecp5.reconfiguration(ecp5.part(result["part"]), platform.clock_hz)
    descriptor.update({
        "name": spec.name,
        "spec": spec.text,
        "capabilities": capabilities(spec.config),
        "synthesis": synthesis,
        "reconfiguration": reconfiguration,
        "fusesoc_core": {"file": core_file, "name": core_name(spec.name)},
    })
    path.write_text(json.dumps(descriptor, indent=2) + "\n")
    (tmp / core_file).write_text(core_text(spec.name, spec.config, descriptor["verilog"],
                                           descriptor["verilog_sha256"], descriptor["top"]))
    return {**descriptor, "cached": result["cached"]}


def summary_row(descriptor: dict[str, Any]) -> dict[str, Any]:
    """What ``hwgen variants list`` shows of a built variant's descriptor: name, spec, array,
    epilogue, window, LUT, FF, DSP, BRAM, part, Fmax (and why none), reconfiguration cycles
    and seconds, the Verilog's sha256."""
    config, synthesis = descriptor["config"], descriptor["synthesis"]
    reconfig = descriptor["reconfiguration"]
    return {"name": descriptor["name"], "spec": descriptor["spec"],
            "array": f"{config['rows']}x{config['cols']}",
            "epilogue": ",".join(config["epilogue"]) or "none",
            "window": bool(config.get("window_unit", False)),
            **{k: (synthesis["resources"] or {}).get(k) for k in ("LUT", "FF", "DSP", "BRAM")},
            "synthesis_error": synthesis["error"],
            "part": synthesis["part"], "fmax_mhz": synthesis["fmax_mhz"],
            "fmax_reason": synthesis["fmax_reason"],
            "reconfig_cycles": reconfig["cycles"], "reconfig_seconds": reconfig["seconds"],
            "verilog_sha256": descriptor["verilog_sha256"]}
