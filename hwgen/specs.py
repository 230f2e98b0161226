"""Variant specs: the short strings ``hwgen variants build`` takes, one variant each.

Grammar (``docs/variants.md``)::

    SPEC    := SHAPE [ ":" STAGES ] { "+" OPTION }
    SHAPE   := ROWS "x" COLS                 e.g. 8x8, 4x8 (powers of two)
    STAGES  := "none" | STAGE { "," STAGE }  in the hardware's order: bias,requant,relu,
                                             clamp,residual (no ":" means the default chain,
                                             bias,requant,relu, as for 'hwgen generate')
    OPTION  := "window"                      the window unit (needs port_bytes = rows = cols)
             | "port" N                      port_bytes = N (default: rows with +window, else
                                             8, or a whole output tile when that is smaller)
             | "addr" N                      mem_addr_bits = N
             | "share" N                     epilogue_share = N (the epilogue's stages have
                                             cols / N lanes, N cycles a row)
             | "banks" N                     acc_banks = N (accumulators per PE)

Every other field is :class:`~hwgen.config.VariantConfig`'s default. A spec is normalised:
stages always written, options in the order window, port, addr, share, banks and only where
they differ from the default (``4x4+addr18+window`` becomes
``4x4:bias,requant,relu+window+addr18``).
Its name, a folder name and a FuseSoC core name, is that spec in letters, digits and
underscores (``4x4_bias_requant_relu_window_addr18``).

Not gateware: :mod:`hwgen.gateware.sources` leaves this module out of the build digest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hwgen.config import EPILOGUE_STAGES, VariantConfig

#: What a bad spec's message points at.
GRAMMAR = ("RxC[:stage,stage,...|:none][+window][+portN][+addrN][+shareN][+banksN], e.g. "
           "8x8:bias,requant,relu+port16")

_SHAPE = re.compile(r"(\d+)x(\d+)")
_OPTION = re.compile(r"(window)|(port|addr|share|banks)(\d+)")
_FIELDS = {"port": "port_bytes", "addr": "mem_addr_bits", "share": "epilogue_share",
           "banks": "acc_banks"}


@dataclass(frozen=True)
class VariantSpec:
    """A parsed spec: its normalised text, its name and its config."""

    text: str
    name: str
    config: VariantConfig


def parse_spec(text: str) -> VariantSpec:
    """Parse one spec (module docstring).

    Raises
    ------
    ValueError
        One line naming the spec, what is wrong with it and the grammar, or the config's own
        refusal (a window unit on a non-square array, a port that does not divide a tile...).
    """
    if not isinstance(text, str):
        raise ValueError(f"variant spec {text!r} is not a string; write {GRAMMAR}")
    head, *options = text.strip().split("+")
    shape, sep, stage_text = head.partition(":")
    match = _SHAPE.fullmatch(shape)
    if match is None:
        raise ValueError(f"variant spec {text!r}: {shape!r} is not a shape ROWSxCOLS; write "
                         f"{GRAMMAR}")
    fields: dict = {"rows": int(match[1]), "cols": int(match[2])}
    if sep:
        fields["epilogue"] = _stages(text, stage_text)
    seen: set[str] = set()
    for option in options:
        m = _OPTION.fullmatch(option)
        if m is None:
            raise ValueError(f"variant spec {text!r}: unknown option {option!r}; the options "
                             f"are +window, +portN, +addrN, +shareN, +banksN ({GRAMMAR})")
        what = m[1] or m[2]
        if what in seen:
            raise ValueError(f"variant spec {text!r} gives +{what} twice; give it once")
        seen.add(what)
        if m[1]:
            fields["window_unit"] = True
        else:
            fields[_FIELDS[what]] = int(m[3])
    if "port_bytes" not in fields:
        fields["port_bytes"] = _implied_port(fields["rows"], fields["cols"],
                                             fields.get("window_unit", False))
    try:
        config = VariantConfig(**fields)
        config.check_chain_order()
    except ValueError as exc:
        raise ValueError(f"variant spec {text!r}: {exc}") from None
    normal = normal_text(config)
    return VariantSpec(text=normal, name=spec_name(normal), config=config)


def _stages(text: str, stage_text: str) -> tuple[str, ...]:
    if stage_text.strip().lower() == "none":
        return ()
    stages = tuple(s.strip() for s in stage_text.split(","))
    for stage in stages:
        if stage not in EPILOGUE_STAGES:
            raise ValueError(f"variant spec {text!r}: unknown epilogue stage {stage!r}; the "
                             f"stages are {','.join(EPILOGUE_STAGES)} (or none)")
    return stages


def normal_text(config: VariantConfig) -> str:
    """The spec of ``config`` in normal form: the stages always (``none`` for none), then the
    options in the order window, port, addr, share, banks, each only where it differs from what
    a spec without it gets."""
    default = VariantConfig()
    out = f"{config.rows}x{config.cols}:{','.join(config.epilogue) or 'none'}"
    if config.window_unit:
        out += "+window"
    if config.port_bytes != _implied_port(config.rows, config.cols, config.window_unit):
        out += f"+port{config.port_bytes}"
    if config.mem_addr_bits != default.mem_addr_bits:
        out += f"+addr{config.mem_addr_bits}"
    if config.epilogue_share != default.epilogue_share:
        out += f"+share{config.epilogue_share}"
    if config.acc_banks != default.acc_banks:
        out += f"+banks{config.acc_banks}"
    return out


def _implied_port(rows: int, cols: int, window: bool) -> int:
    """The port a spec without ``+portN`` gets: one pixel's channels with the window unit
    (what it reads a word), else the default, or a whole output tile when that is smaller."""
    return rows if window else min(VariantConfig().port_bytes, rows * cols)


def spec_name(text: str) -> str:
    """The name of a normalised spec: its words joined by underscores."""
    return "_".join(w for w in re.split(r"[^A-Za-z0-9]+", text) if w)

