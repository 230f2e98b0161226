"""``hwgen doctor``: versions of the toolchain, and what to fix."""

from __future__ import annotations

import argparse

HELP = "check Python, Amaranth, cocotb and Verilator"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``hwgen doctor`` takes no options."""


def run(args: argparse.Namespace) -> int:
    from sim.toolchain import doctor

    lines, ok = doctor()
    for line in lines:
        print(line)
    return 0 if ok else 2
