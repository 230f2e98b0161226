"""The ECP5 PLL (``EHXPLLL``) settings for one output frequency.

The PLL multiplies its input by ``CLKFB_DIV / CLKI_DIV`` with the feedback taken from the
output (``FEEDBK_PATH="CLKOP"``): the VCO runs at ``out * CLKOP_DIV``. The limits are the
ECP5 data sheet's (FPGA-DS-02012, sysCLOCK PLL timing): input 8-400 MHz, phase detector
3.125-400 MHz, VCO 400-800 MHz, output 3.125-400 MHz. Of the settings within them, the
exact one (or the nearest) with the fastest phase detector and a VCO nearest 600 MHz is
chosen: a faster comparison clock jitters less.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

PFD_RANGE = (3_125_000, 400_000_000)
VCO_RANGE = (400_000_000, 800_000_000)
OUT_RANGE = (3_125_000, 400_000_000)
IN_RANGE = (8_000_000, 400_000_000)


@dataclass(frozen=True)
class PllSettings:
    """The dividers of one ``EHXPLLL`` and what they give."""

    clki_div: int
    clkfb_div: int
    clkop_div: int
    input_hz: int
    output_hz: Fraction

    @property
    def vco_hz(self) -> Fraction:
        return self.output_hz * self.clkop_div

    def parameters(self) -> dict[str, object]:
        """The instance's parameters and attributes (``p_``/``a_`` names for Amaranth)."""
        return {
            "p_PLLRST_ENA": "DISABLED", "p_INTFB_WAKE": "DISABLED",
            "p_STDBY_ENABLE": "DISABLED", "p_DPHASE_SOURCE": "DISABLED",
            "p_OUTDIVIDER_MUXA": "DIVA", "p_CLKOP_ENABLE": "ENABLED",
            "p_CLKI_DIV": self.clki_div, "p_CLKFB_DIV": self.clkfb_div,
            "p_CLKOP_DIV": self.clkop_div, "p_CLKOP_CPHASE": self.clkop_div - 1,
            "p_CLKOP_FPHASE": 0, "p_FEEDBK_PATH": "CLKOP",
            "a_FREQUENCY_PIN_CLKI": f"{self.input_hz / 1e6:g}",
            "a_FREQUENCY_PIN_CLKOP": f"{float(self.output_hz) / 1e6:g}",
            "a_ICP_CURRENT": "12", "a_LPF_RESISTOR": "8",
            "a_MFG_ENABLE_FILTEROPAMP": "1", "a_MFG_GMCREF_SEL": "2",
        }


def solve(input_hz: int, output_hz: int, *, tolerance: float = 0.0) -> PllSettings:
    """The PLL settings that make ``output_hz`` from ``input_hz``.

    Parameters
    ----------
    tolerance : float
        The relative error accepted; 0 asks for the exact frequency.

    Raises
    ------
    ValueError
        If the frequencies are out of the PLL's range or no setting comes within
        ``tolerance``, naming the nearest one.
    """
    for what, hz, (lo, hi) in (("input", input_hz, IN_RANGE), ("output", output_hz, OUT_RANGE)):
        if not lo <= hz <= hi:
            raise ValueError(f"the PLL's {what} must be from {lo / 1e6:g} to {hi / 1e6:g} MHz, "
                             f"not {hz / 1e6:g} MHz")
    best, best_key = None, None
    for clki_div in range(1, 129):
        pfd = Fraction(input_hz, clki_div)
        if not PFD_RANGE[0] <= pfd <= PFD_RANGE[1]:
            continue
        for clkop_div in range(1, 129):
            vco_target = output_hz * clkop_div
            if not VCO_RANGE[0] <= vco_target <= VCO_RANGE[1]:
                continue
            for clkfb_div in range(1, 129):
                out = pfd * clkfb_div
                vco = out * clkop_div
                if not VCO_RANGE[0] <= vco <= VCO_RANGE[1]:
                    continue
                error = abs(out - output_hz) / output_hz
                key = (error, -pfd, abs(vco - 600_000_000))
                if best_key is None or key < best_key:
                    best_key = key
                    best = PllSettings(clki_div, clkfb_div, clkop_div, input_hz, out)
    if best is None or best_key[0] > tolerance:
        near = "" if best is None else f"; the nearest is {float(best.output_hz) / 1e6:.4f} MHz"
        raise ValueError(f"the ECP5 PLL cannot make {output_hz / 1e6:g} MHz from "
                         f"{input_hz / 1e6:g} MHz exactly{near}: choose another --clock-mhz")
    return best
