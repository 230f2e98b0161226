"""Measure how the accelerator's loads and stores share one DRAM port, on the accelerator.

``sim.dram.characterize`` measures the port alone, one pattern a run, with a driver that
offers a command every cycle. A kernel is not that: its LOADs request at the load engine's
pace, and its stores cut into them (the memory adapter gives writes the port first,
``docs/memory.md``). How much that costs is a property of the controller *and* of how the
accelerator drives it, so it is measured here with small programs on a variant's own
simulation, like the ideal memory's micro-benchmarks (``tests/fusion/cost/test_machine.py``):

- ``read``: one LOAD of ``READ_WORDS`` consecutive words into the int32 epilogue rows (a word
  a cycle: the port's pace, not the engine's);
- ``read_chain``: the same words in LOADs of ``CHUNK`` words, each continuing the one before;
- ``read_paced``: ``PACED_LOADS`` chained LOADs of ``PACED_WORDS`` words into the A
  scratchpad, whose rows are narrower than a word: the engine requests a word every
  ``port_bytes / rows`` cycles, slower than the port (a refresh still holds it, and the engine
  never makes up the requests it lost: the whole span stretches);
- ``read_switch``, ``read_activate``: LOADs of ``CHUNK`` words taking turns between two
  regions, in rows already open in two banks, or in two rows of one bank (each turn opens
  its row again);
- ``read_wide``, ``read_narrow``, ``read_narrow_same``: ``read`` with one EPIPASS storing
  while it runs: int32 rows (a word or more a row: the writes stream), or int8 rows narrower
  than a word (the store unit packs several rows a word: the writes come one at a time), to
  another bank, or to another row of the bank being read;
- ``wide``: the int32 EPIPASS alone.

:func:`derive` turns the cycles into the figures :class:`hwgen.platform.PortFigures` records
for the analytical model (:mod:`fusion.cost.memory`): ``load_switch`` and ``load_activate``
(per turn, beyond a sequential read), ``write_turn`` (per run of stores cutting into reads,
beyond the writes), ``write_word`` and ``write_word_same`` (per word written one at a time,
beyond a write: measured on an 8x8 array, whose int8 rows pack two to a word, and as
``..._spaced`` on a 4x4, four to a word), and ``write_settle`` (the adapter's settling after
the last store). The figures recorded are those of the 8x8 variant of ``bench.platforms``
but for the spaced ones.

Run ``python -m sim.dram_interplay FOLDER [--json]`` on a folder ``hwgen generate --memory``
wrote; it prints each program's cycles next to what the analytical model predicts, and the
figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hwgen import isa
from hwgen.asm import assemble
from hwgen.config import VariantConfig
from hwgen.isa import Unit
from hwgen.platform import PlatformConfig, PortFigures

#: Words the long LOAD reads; the chained and alternating LOADs' size; the EPIPASS's rows.
READ_WORDS = 1024
CHUNK = 16
STORE_ROWS = 256
#: The paced LOADs: long enough together to span several refreshes (one every 782 cycles).
PACED_LOADS = 8
PACED_WORDS = 256


def _page(figures: PortFigures, bank: int, row: int) -> int:
    """Word address of the first word of ``row`` in ``bank`` (``ROW_BANK_COL``)."""
    return (row * figures.banks + bank) * figures.words_per_row


def programs(config: VariantConfig, figures: PortFigures) -> dict[str, str]:
    """Each micro-benchmark's assembly (without the final wait for every unit and halt)."""
    read_at, other, same = (_page(figures, 0, 0), _page(figures, 3, 40),
                            _page(figures, 0, 40))

    def setup(out: int, second: int) -> str:
        return f"li rd=r1, imm={read_at}\nli rd=r2, imm={out}\nli rd=r4, imm={second}\n"

    def load(words: int, reg: str = "r1") -> str:
        return f"load dst=e32, ext={reg}, spad=r0, stride=r0, count=1, len={words}\n"

    def step(reg: str) -> str:
        return load(CHUNK, reg) + f"addi rd={reg}, rs={reg}, imm={CHUNK}\n"

    def epipass(dt: str, rows: int = STORE_ROWS) -> str:
        return f"epipass src=r0, out=r2, bias=r0, res=r0, rows={rows}, mask=0, dt={dt}\n"

    turns = READ_WORDS // CHUNK // 2
    paced = (f"load dst=a, ext=r1, spad=r0, stride=r0, count=1, len={PACED_WORDS}\n"
             f"addi rd=r1, rs=r1, imm={PACED_WORDS}\n")
    return {
        "read": setup(other, other) + load(READ_WORDS),
        "read_chain": setup(other, other) + step("r1") * (2 * turns),
        "read_paced": setup(other, other) + paced * PACED_LOADS,
        "read_switch": setup(other, _page(figures, 3, 7)) + (step("r1") + step("r4")) * turns,
        "read_activate": setup(other, _page(figures, 0, 7)) + (step("r1") + step("r4")) * turns,
        "read_wide": setup(other, other) + load(READ_WORDS) + epipass("i32", STORE_ROWS // 4),
        "read_narrow": setup(other, other) + load(READ_WORDS) + epipass("i8"),
        "read_narrow_same": setup(same, same) + load(READ_WORDS) + epipass("i8"),
        "wide": setup(other, other) + epipass("i32", STORE_ROWS // 4),
    }


def _words(config: VariantConfig, rows: int, lane_bytes: int) -> float:
    return rows * config.cols * lane_bytes / config.port_bytes


def narrow_spacing(config: VariantConfig) -> int:
    """Cycles between the words of an int8 store: the rows (a cycle each) one word holds."""
    return max(1, config.port_bytes // config.cols)


def derive(config: VariantConfig, figures: PortFigures, cycles: dict[str, int],
           settle_from: int) -> dict[str, float]:
    """The interplay figures from the measured ``cycles`` of :func:`programs`.

    The per-word figures of narrow stores are named for the variant's spacing
    (:func:`narrow_spacing`): ``write_word`` and ``write_word_same`` at 2 cycles,
    ``write_word_spaced`` and ``write_word_same_spaced`` at 4 (an 8x8 and a 4x4 array on a
    16-byte port). ``settle_from`` is the cycle the analytical model's walk of ``wide`` makes
    its last store: the settling is what the measurement adds after it.

    Raises
    ------
    ValueError
        A variant whose int8 rows fill a word (no narrow stores to measure), or another
        spacing than 2 or 4.
    """
    spacing = narrow_spacing(config)
    if spacing not in (2, 4):
        raise ValueError(f"int8 stores of a {config.rows}x{config.cols} array on a "
                         f"{config.port_bytes}-byte port come a word every {spacing} cycles; "
                         f"the figures are measured at 2 and 4 (an 8x8 and a 4x4 array on a "
                         f"16-byte port)")
    turns = READ_WORDS // CHUNK
    base, write = cycles["read"], figures.write
    wide = _words(config, STORE_ROWS // 4, 4)
    narrow = _words(config, STORE_ROWS, 1)
    turn = cycles["read_wide"] - base - wide * write
    suffix = "" if spacing == 2 else "_spaced"
    return {
        "load_switch": (cycles["read_switch"] - cycles["read_chain"]) / turns,
        "load_activate": (cycles["read_activate"] - cycles["read_chain"]) / turns,
        "write_turn": turn,
        "write_word" + suffix: (cycles["read_narrow"] - base - turn) / narrow - write,
        "write_word_same" + suffix: (cycles["read_narrow_same"] - base - turn) / narrow - write,
        "write_settle": float(cycles["wide"] - settle_from),
    }


def _predict(config: VariantConfig, platform: PlatformConfig,
             words: list[int]) -> tuple[int, int]:
    """The analytical model's cycles of a program, and the cycle of its last store (which
    the settling after it does not move)."""
    from fusion.cost import analytical

    recorded: list = []
    token = analytical._RECORDING.set(recorded)
    try:
        cycles = analytical.estimate_program(config, [isa.decode(w) for w in words], platform)
    finally:
        analytical._RECORDING.reset(token)
    return cycles, recorded[0].last_write


def measure(folder: str | Path) -> dict:
    """Run the micro-benchmarks on a DRAM variant folder's simulation.

    Returns
    -------
    dict
        ``cycles`` and ``predicted`` by program, and ``figures`` (:func:`derive`).

    Raises
    ------
    ValueError
        The folder is not a variant, or its memory is ideal.
    """
    from hwgen.gateware.folder import open_variant
    from sim.build import build_folder
    from sim.run import Job, MemoryImage, run_programs

    variant = open_variant(folder)
    config, platform = variant.config, variant.platform
    if not platform.is_dram:
        raise ValueError(f"{folder} is on the ideal memory; measure a folder that "
                         f"'hwgen generate --memory ddr3|sdr' wrote")
    figures = platform.port_figures(config.port_bytes)
    texts = programs(config, figures)
    end = f"wait units={int(Unit.ALL)}\nhalt\n"
    words = {name: assemble(text + end) for name, text in texts.items()}
    memory = MemoryImage(writes=((0, bytes(config.port_bytes)),),
                         reads={"word": (0, config.port_bytes)})
    results = run_programs(config, [Job(program=w, memory=memory, name=n)
                                    for n, w in words.items()], build=build_folder(folder))
    cycles = {name: r.cycles for name, r in zip(words, results, strict=True)}
    predicted = {name: _predict(config, platform, w)[0] for name, w in words.items()}
    _, last = _predict(config, platform, words["wide"])
    return {"platform": platform.to_dict(), "cycles": cycles, "predicted": predicted,
            "figures": {k: round(v, 2) for k, v in
                        derive(config, figures, cycles, last).items()}}


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.dram_interplay FOLDER [--json]``."""
    parser = argparse.ArgumentParser(prog="python -m sim.dram_interplay",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a variant folder on a DRAM platform")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        out = measure(args.folder)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for name, cycles in out["cycles"].items():
        p = out["predicted"][name]
        print(f"{name:18s} {cycles:7d} cycles, predicted {p:7d} "
              f"({(p - cycles) / cycles * 100:+.1f}%)")
    print("figures: " + ", ".join(f"{k}={v}" for k, v in out["figures"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
