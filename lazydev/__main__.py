"""`python -m lazydev <command>`: the command-line entry point.

Each command is a module with `add_arguments(parser)` and `main(args) -> exit status`, listed
in COMMANDS. Adding one (e.g. `coverage`, `cache`) is a new module plus one line here.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module under lazydev, one-line help).
COMMANDS = {
    "demo": ("demo", "train an MLP and a transformer on wse and on CPU, compare the losses"),
    "coverage": ("coverage", "run PyTorch's OpInfo samples on wse vs CPU; report native / "
                 "fallback / fail per op (rich table, --json)"),
    "cache": ("cache_cli", "look into the on-disk compile cache: ls, show KEY, clear, stats"),
}


def _command(name: str):
    return importlib.import_module(f"lazydev.{COMMANDS[name][0]}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lazydev",
                                     description="lazydev: a lazy-tensor PyTorch device (wse).")
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        _command(name).add_arguments(p)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return _command(args.command).main(args)


if __name__ == "__main__":
    sys.exit(main())
