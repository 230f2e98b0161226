"""The host's register map: one description for the gateware, the testbench, hosts and docs.

A host (a soft CPU, a UART-to-bus bridge on a board, or the simulation testbench) reaches
the accelerator only through its Wishbone bus (:mod:`hwgen.gateware.host`): 32-bit data,
word addresses, every access a whole word. The low words hold the control and status
registers of :data:`CSRS` and the performance counters (two words each, :func:`counter_word`);
the upper half of the address space is the instruction memory, two bus words per 64-bit
instruction (:func:`imem_base_word`). ``docs/regmap.md`` is generated from this module
(:func:`regmap_markdown`), so the gateware, the host code and the document cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwgen.perf import COUNTER_BITS, COUNTERS

#: Bits of bus data.
DATA_BITS = 32
#: What ``ID`` reads: "HWG1" in ASCII, so a host can tell it found the accelerator.
MAGIC = 0x48574731
#: The first word of the counters, two words each (low 32 bits, then the high bits).
COUNTER_BASE = 16


@dataclass(frozen=True)
class Field:
    """Bits ``lo`` .. ``lo + width - 1`` of a register."""

    name: str
    lo: int
    width: int
    doc: str


@dataclass(frozen=True)
class Register:
    """A 32-bit control or status register at word ``word`` (byte offset ``4 * word``).

    ``access``: ``r`` (reads; writes are ignored), ``w`` (writes act; reads give 0), ``rw``,
    or ``rw1c`` (reads; writing 1 to a bit clears it).
    """

    name: str
    word: int
    access: str
    doc: str
    fields: tuple[Field, ...] = ()

    def field(self, name: str) -> Field:
        """The field ``name`` (KeyError naming the register if it has none)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name}")


CSRS: tuple[Register, ...] = (
    Register("ID", 0, "r", f"the constant {MAGIC:#010x} (\"HWG1\")"),
    Register("BUILD", 1, "r", "the first 8 hex digits of the variant's key "
             "(`VariantConfig.key()`, the descriptor's `key`): which design this is"),
    Register("CTRL", 2, "w", "starts the program", (
        Field("START", 0, 1, "write 1: clear the counters and run the program from "
              "instruction 0 with every register zero (ignored while it runs)"),)),
    Register("STATUS", 3, "r", "where the program is", (
        Field("RUNNING", 0, 1, "started, and not yet done"),
        Field("DONE", 1, 1, "the program halted, every unit is idle and its stores are in "
              "memory; until the next START"),)),
    Register("IRQ_ENABLE", 4, "rw", "which pending events raise the `irq` line", (
        Field("DONE", 0, 1, "the program finished"),)),
    Register("IRQ_PENDING", 5, "rw1c", "events since last cleared; `irq` is high while "
             "`IRQ_PENDING & IRQ_ENABLE` is not zero", (
                 Field("DONE", 0, 1, "set when DONE rises"),)),
    Register("IMEM_DEPTH", 6, "r", "instructions the instruction memory holds"),
)
_BY_NAME = {r.name: r for r in CSRS}


def csr(name: str) -> Register:
    """The register called ``name``."""
    return _BY_NAME[name]


def counter_word(name: str) -> int:
    """The word of counter ``name``'s low 32 bits; its high bits are at the next word.

    Reading the low word captures the high bits, so low-then-high reads one consistent value
    even while the counter runs.
    """
    return COUNTER_BASE + 2 * COUNTERS.index(name)


def imem_base_word(imem_depth: int) -> int:
    """The first bus word of the instruction memory: instruction ``i`` is words
    ``base + 2i`` (bits 31:0) and ``base + 2i + 1`` (bits 63:32); the write of either half
    lands at once. The base is the smallest power of two above both the registers and
    ``2 * imem_depth``, so that one address bit tells the two regions apart."""
    span = max(2 * imem_depth, COUNTER_BASE + 2 * len(COUNTERS))
    return 1 << (span - 1).bit_length()


def bus_addr_bits(imem_depth: int) -> int:
    """Bits of the bus's word address."""
    return imem_base_word(imem_depth).bit_length()


def regmap_markdown() -> str:
    """The register map (``docs/regmap.md``), generated from this module."""
    lines = [
        "# hwgen host register map",
        "",
        "Generated from `hwgen/regmap.py`; do not edit by hand (`tests/hwgen/test_regmap.py` "
        "checks it).",
        "",
        "The accelerator's only way in is a Wishbone B4 classic target (`bus__*` ports of "
        "`hwgen_accel`): 32-bit data, word addresses (`bus__adr`; byte offset = 4 x word), "
        "`ack` the cycle after `cyc & stb`, read data with it. `sel` is ignored: every access "
        "is a whole word. Words that no register uses read 0 and ignore writes. The `irq` "
        "port is high while an enabled event is pending.",
        "",
        "## Control and status",
        "",
        "| word | byte | name | access | meaning |",
        "|---|---|---|---|---|",
    ]
    for r in CSRS:
        lines.append(f"| {r.word} | {4 * r.word:#06x} | {r.name} | {r.access} | {r.doc} |")
    lines += ["", "| register | field | bits | meaning |", "|---|---|---|---|"]
    for r in CSRS:
        for f in r.fields:
            bits = str(f.lo) if f.width == 1 else f"{f.lo + f.width - 1}:{f.lo}"
            lines.append(f"| {r.name} | {f.name} | {bits} | {f.doc} |")
    lines += [
        "",
        f"## Performance counters ({COUNTER_BITS} bits, read-only; names: `hwgen/perf.py`)",
        "",
        "Each counter is two words: its low 32 bits, then its high bits. Reading the low word "
        "captures the high bits, so read low then high for one consistent value while it "
        "runs. `CTRL.START` clears them; they hold their values after DONE.",
        "",
        "| counter | word (low) | byte (low) |",
        "|---|---|---|",
    ]
    for name in COUNTERS:
        w = counter_word(name)
        lines.append(f"| {name} | {w} | {4 * w:#06x} |")
    example = 2048
    base = imem_base_word(example)
    lines += [
        "",
        "## Instruction memory (write-only)",
        "",
        "Instruction `i` (64 bits, `docs/isa.md`) is the words `IMEM + 2i` (bits 31:0) and "
        "`IMEM + 2i + 1` (bits 63:32). `IMEM` is the smallest power of two at least "
        f"`2 x imem_depth` (and above the counters): word {base} (byte {4 * base:#07x}) for "
        f"the default depth of {example}. The sequencer owns the memory's read port, so the "
        "bus cannot read the program back; write it while no program runs.",
        "",
    ]
    return "\n".join(lines)
