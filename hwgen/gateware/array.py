"""The rows x cols output-stationary systolic PE array."""

from __future__ import annotations

from amaranth import Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hwgen.config import VariantConfig
from hwgen.gateware.pe import ProcessingElement


class SystolicArray(wiring.Component):
    """Output-stationary systolic array of :class:`ProcessingElement`.

    Each cycle the feeder presents one k-slice: ``a[i] = A[i, k]`` for the array rows and
    ``b[j] = B[k, j]`` for the columns, unskewed; the array delays row ``i`` by ``i`` cycles
    and column ``j`` by ``j`` so that the operands of the same k meet in every cell. Zeros
    are bubbles. ``last`` marks the tile's final k-slice; with accumulator banks
    (``acc_banks`` > 1), ``bank`` names the bank the slice sums into, and travels with it.
    Every operand is registered as it enters (the feeder presents a block RAM's output,
    whose clock-to-output time would otherwise run on into the first cells' multipliers).
    Finished results leave through ``top`` (row 0 first) while ``shift`` is high. A tile's
    result is complete :func:`hwgen.timing.array_latency` cycles after its last operands
    were presented.
    """

    def __init__(self, config: VariantConfig):
        self._config = config
        op, acc = signed(config.operand_bits), signed(config.acc_bits)
        # A operands are one bit wider: the feeder subtracts the A zero point (9 bits)
        a_op = signed(config.operand_bits + 1)
        banks = {"bank": In(ceil_log2(config.acc_banks))} if config.acc_banks > 1 else {}
        super().__init__({
            "a": In(data.ArrayLayout(a_op, config.rows)),
            "b": In(data.ArrayLayout(op, config.cols)),
            "last": In(1),
            "shift": In(1),
            "top": Out(data.ArrayLayout(acc, config.cols)),
            **banks,
        })

    def _delay(self, m: Module, value, cycles: int, name: str):
        for n in range(cycles):
            reg = Signal.like(value, name=f"{name}_d{n}")
            m.d.sync += reg.eq(value)
            value = reg
        return value

    def elaborate(self, platform):
        m = Module()
        rows, cols = self._config.rows, self._config.cols
        banked = self._config.acc_banks > 1
        pes = [[ProcessingElement(self._config) for _ in range(cols)] for _ in range(rows)]
        for i in range(rows):
            for j in range(cols):
                m.submodules[f"pe_{i}_{j}"] = pe = pes[i][j]
                if j == 0:
                    m.d.comb += [
                        pe.a_in.eq(self._delay(m, self.a[i], i + 1, f"a{i}")),
                        pe.last_in.eq(self._delay(m, self.last, i + 1, f"last{i}")),
                    ]
                    if banked:
                        m.d.comb += pe.bank_in.eq(self._delay(m, self.bank, i + 1, f"bank{i}"))
                else:
                    m.d.comb += [pe.a_in.eq(pes[i][j - 1].a_out),
                                 pe.last_in.eq(pes[i][j - 1].last_out)]
                    if banked:
                        m.d.comb += pe.bank_in.eq(pes[i][j - 1].bank_out)
                if i == 0:
                    m.d.comb += pe.b_in.eq(self._delay(m, self.b[j], j + 1, f"b{j}"))
                else:
                    m.d.comb += pe.b_in.eq(pes[i - 1][j].b_out)
                m.d.comb += pe.shift.eq(self.shift)
                if i + 1 < rows:
                    m.d.comb += pe.res_in.eq(pes[i + 1][j].res)
            # row 0 leaves the array
        for j in range(cols):
            m.d.comb += self.top[j].eq(pes[0][j].res)
        return m
