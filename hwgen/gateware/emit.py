"""Turning a :class:`~hwgen.config.VariantConfig` into Verilog and a descriptor."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from amaranth.back import verilog

from hwgen.config import VariantConfig
from hwgen.gateware import folder
from hwgen.gateware.accelerator import Accelerator
from hwgen.gateware.sources import gateware_digest
from hwgen.isa import isa_markdown
from hwgen.platform import PlatformConfig
from hwgen.regmap import regmap_markdown

TOP_NAME = "hwgen_accel"

def accelerator_verilog(config: VariantConfig) -> str:
    """The Verilog of the variant's accelerator, top module ``hwgen_accel``."""
    return verilog.convert(Accelerator(config), name=TOP_NAME, emit_src=False)


def generate(config: VariantConfig, out_dir: Path,
             platform: PlatformConfig | None = None,
             memory_files: Mapping[str, str] | None = None,
             describe: Callable[[str], Mapping[str, Any]] | None = None) -> dict:
    """Write ``hwgen_accel.v``, ``variant.json``, ``isa.md`` and ``regmap.md`` into
    ``out_dir``, atomically, with the platform in the descriptor; for a DRAM ``platform``
    also its memory system, ``memory_files`` (:data:`folder.MEMORY_FILES`: LiteDRAM's
    Verilog and ``dram.json``, the adapter's Verilog;
    :meth:`sim.memory.BoardMemory.folder_files` makes them: the gateware does not import the
    simulation side).

    The files are written into a temporary sibling folder that then replaces ``out_dir``
    (:func:`hwgen.gateware.folder.writing_folder`): an interrupted generate leaves the old
    folder or the new one, never the Verilog of one variant beside the descriptor of another.

    ``describe``, given the Verilog text, returns more descriptor fields (``hwgen generate
    --fit`` adds its synthesis figures); what it raises leaves nothing written.

    Returns
    -------
    dict
        The descriptor that was written.

    Raises
    ------
    ValueError
        If the epilogue chain is out of order, or ``out_dir`` is a non-empty folder that is
        not a variant folder (or ``describe`` refuses the variant); nothing is written then.
    """
    config.check_chain_order()
    platform = PlatformConfig() if platform is None else platform
    memory_files = dict(memory_files or {})
    if platform.is_dram and set(memory_files) != set(folder.MEMORY_FILES):
        raise ValueError(f"a {platform.memory} variant folder needs its memory system's files "
                         f"{', '.join(folder.MEMORY_FILES)}, not {sorted(memory_files)}")
    with folder.writing_folder(out_dir) as tmp:
        started = time.perf_counter()
        verilog_bytes = accelerator_verilog(config).encode()
        seconds = time.perf_counter() - started
        (tmp / folder.VERILOG).write_bytes(verilog_bytes)
        (tmp / folder.ISA_DOC).write_text(isa_markdown())
        (tmp / folder.REGMAP_DOC).write_text(regmap_markdown())
        for name, text in memory_files.items():
            (tmp / name).write_text(text)
        more = dict(describe(verilog_bytes.decode())) if describe is not None else {}
        config.write_descriptor(
            tmp / folder.DESCRIPTOR,
            platform=platform.to_dict(),
            platform_key=platform.key(),
            top=TOP_NAME,
            verilog=folder.VERILOG,
            verilog_sha256=folder.sha256_of(verilog_bytes),
            gateware_digest=gateware_digest(),
            generate_seconds=round(seconds, 3),
            **more,
        )
        descriptor = json.loads((tmp / folder.DESCRIPTOR).read_text())
    return descriptor
