"""Turning a :class:`~hwgen.config.VariantConfig` into Verilog and a descriptor."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from amaranth.back import verilog

from hwgen.config import VariantConfig
from hwgen.gateware.accelerator import Accelerator
from hwgen.gateware.sources import gateware_digest
from hwgen.isa import isa_markdown

TOP_NAME = "hwgen_accel"

def accelerator_verilog(config: VariantConfig) -> str:
    """The Verilog of the variant's accelerator, top module ``hwgen_accel``."""
    return verilog.convert(Accelerator(config), name=TOP_NAME, emit_src=False)


def generate(config: VariantConfig, out_dir: Path) -> dict:
    """Write ``hwgen_accel.v``, ``variant.json`` and ``isa.md`` into ``out_dir``.

    Returns
    -------
    dict
        The descriptor that was written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    text = accelerator_verilog(config)
    seconds = time.perf_counter() - started
    (out_dir / f"{TOP_NAME}.v").write_text(text)
    (out_dir / "isa.md").write_text(isa_markdown())
    extra = {
        "top": TOP_NAME,
        "verilog": f"{TOP_NAME}.v",
        "verilog_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "gateware_digest": gateware_digest(),
        "generate_seconds": round(seconds, 3),
    }
    config.write_descriptor(out_dir / "variant.json", **extra)
    return json.loads((out_dir / "variant.json").read_text())
