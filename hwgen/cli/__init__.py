"""The ``hwgen`` command line: the one place where arguments become calls.

User errors (a bad config, a missing descriptor, a shape that cannot fit, a missing
toolchain) print one ``hwgen: error: ...`` line that names the problem and the fix, and exit
with status 2; a result that does not match the reference exits with status 1.
"""

from __future__ import annotations

import argparse
import gc
import sys
from typing import NoReturn

from hwgen.cli import (
    build,
    calibrate,
    compile,
    doctor,
    gemm,
    generate,
    inspect,
    profile,
    report,
    run,
    train,
    variants,
)

#: The commands, in the order ``hwgen --help`` lists them. Each module owns its options
#: (``add_arguments``), its one-line ``HELP`` and its ``run(args) -> exit status``.
COMMANDS = {"doctor": doctor, "generate": generate, "build": build, "gemm": gemm,
            "inspect": inspect, "compile": compile, "run": run, "calibrate": calibrate,
            "profile": profile, "train": train, "report": report, "variants": variants}


class Parser(argparse.ArgumentParser):
    """argparse, with its errors in hwgen's form: one ``hwgen: error:`` line (not the usage
    block, then ``hwgen gemm: error:``) that says where the help is, and exit status 2."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("hwgen").strip()
        self.exit(2, f"hwgen: error: {message} (see 'hwgen {command + ' ' if command else ''}"
                     f"--help')\n")


def build_parser() -> Parser:
    parser = Parser(prog="hwgen", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    parser.set_defaults(commands={})
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(func=module.run)
        parser.get_default("commands")[name] = p
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's parser says so, pointing at the command's help
        args.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
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
    except MemoryError as exc:
        # a size no check caught before the work began: still the user's to shrink
        print(f"hwgen: error: out of memory ({exc}); the problem is too large for this "
              f"machine: use smaller sizes", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError, OSError) as exc:
        # User-facing errors carry their own fix; a bug elsewhere still shows a traceback.
        print(f"hwgen: error: {exc}", file=sys.stderr)
        return 2
    finally:
        # what the command set up for itself ends with it: the store of derived facts beside
        # its kernel cache (kernel_cache), its Dask clients (--scheduler); a caller calling
        # main again, or the library, starts without them
        from fusion.kernels import derived

        derived.use(None)
        gc.unfreeze()  # what the command froze (compile_args) is collected as before
        if "fusion.compiler.scheduler" in sys.modules:
            sys.modules["fusion.compiler.scheduler"].close_clients()
