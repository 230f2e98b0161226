"""The ``hwgen`` command line: the one place where arguments become calls.

User errors (a bad config, a missing descriptor, a shape that cannot fit, a missing
toolchain) print one ``hwgen: error: ...`` line that names the problem and the fix, and exit
with status 2; a result that does not match the reference exits with status 1.
"""

from __future__ import annotations

import argparse
import sys

from hwgen.cli import compile, doctor, gemm, generate, inspect, run

#: The commands, in the order ``hwgen --help`` lists them. Each module owns its options
#: (``add_arguments``), its one-line ``HELP`` and its ``run(args) -> exit status``.
COMMANDS = {"doctor": doctor, "generate": generate, "gemm": gemm, "inspect": inspect,
            "compile": compile, "run": run}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hwgen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        # Builds and simulations clean up after themselves; the user asked to stop.
        print("hwgen: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `hwgen inspect ... | head`: the reader left; that is not an error of ours.
        sys.stderr.close()
        return 0
    except (ValueError, RuntimeError, OSError) as exc:
        # User-facing errors carry their own fix; a bug elsewhere still shows a traceback.
        print(f"hwgen: error: {exc}", file=sys.stderr)
        return 2
