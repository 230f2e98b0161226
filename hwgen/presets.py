"""Named variants, defined once: those the simulation tests build and calibration sweeps, and
the small ones the compiler's tests use.

They are plain :class:`~hwgen.config.VariantConfig` values; equal configs have equal keys, so
every user of a preset shares its Verilator build and kernel cache entries.
"""

from __future__ import annotations

from hwgen.config import EPILOGUE_STAGES, VariantConfig

#: Every epilogue stage, in the hardware's order.
ALL_STAGES = EPILOGUE_STAGES

#: The variants the simulation tests build and ``sim.calibrate`` sweeps by default: square and
#: non-square arrays, 4- and 8-byte ports, port latencies 3, 4 and 6, and a port wider than a
#: scratchpad row (4x4 with 8 bytes), each with the whole epilogue chain; the 2x2 and the 4x8
#: share their epilogue's lanes (two and four cycles a row), the 4x4 does not.
SIM_VARIANTS = {
    "2x2": VariantConfig(rows=2, cols=2, port_bytes=4, port_latency=3, epilogue=ALL_STAGES,
                         spad_a_depth=512, spad_b_depth=512, spad_e_depth=128,
                         epilogue_share=2),
    "4x4": VariantConfig(rows=4, cols=4, epilogue=ALL_STAGES),
    "4x8": VariantConfig(rows=4, cols=8, port_bytes=8, port_latency=6, epilogue=ALL_STAGES,
                         epilogue_share=4),
}

#: A non-square array with small scratchpads (so that kernels tile a lot) and a deep
#: instruction memory (so that long tiled programs fit).
SMALL = VariantConfig(rows=4, cols=8, port_bytes=8, epilogue=ALL_STAGES, spad_a_depth=64,
                      spad_b_depth=64, spad_e_depth=64, imem_depth=4096)

#: A tall array with a 16-byte port: one memory word holds two bias rows.
WIDE = VariantConfig(rows=8, cols=2, port_bytes=16, epilogue=ALL_STAGES)

#: The variant the DRAM tests build on each platform: a 4x4 array with a 16-byte port (the
#: DDR3 controller's word; :func:`sim.memory.board_memory` refuses a narrower one) and a
#: 21-bit word address (what SDR's 32 MB hold in 16-byte words).
DRAM_TEST = VariantConfig(rows=4, cols=4, port_bytes=16, epilogue=ALL_STAGES, mem_addr_bits=21)
