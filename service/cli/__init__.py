"""The ``aucstream`` command line.  Each module of this package not named ``_*`` is a subcommand:
its ``register(commands)`` adds its parser (:func:`add_command`) and sets ``handler``, a function
of the parsed arguments returning the exit status; :func:`build_parser` finds the modules.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
from collections.abc import Sequence

# One BLAS thread per process, set before numpy loads OpenBLAS: the service's many concurrent
# small kernel calls and OpenBLAS threads only fight over the cores.  The operator's value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from service.cli._errors import CliError, run, validation_message  # noqa: E402

DESCRIPTION = """\
Online AUC / partial-AUC learning service.

  aucstream serve                     run the HTTP API on http://127.0.0.1:8000
  aucstream replay events.csv --model fraud --label-column is_fraud
                                      learn a file in-process and print its metrics
  aucstream replay events.csv --model fraud --url http://127.0.0.1:8000
                                      send it to a running server (re-running is harmless)
  aucstream fit history.csv --model fraud --label-column is_fraud
                                      train on a history file, write (or --url upload) a snapshot

Exit status: 0 success, 1 the work failed (a server refused or was down), 2 a wrong command,
file or option, 130 interrupted."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; each option's default after its help when worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default:" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        if isinstance(default, list | tuple):
            return f"{text} (default: {' '.join(map(str, default))})"
        return f"{text} (default: %(default)s)"


def add_command(
    commands: argparse._SubParsersAction, name: str, summary: str, description: str = ""
) -> argparse.ArgumentParser:
    """A subcommand's parser with the house help format: ``summary`` in ``aucstream --help``,
    ``summary`` and ``description`` in ``aucstream <name> --help``."""
    return commands.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.\n\n{description}".rstrip(),
        formatter_class=HelpFormatter,
    )


def command_modules() -> list[str]:
    return sorted(
        info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")
    )


class CommandLineParser(argparse.ArgumentParser):
    """The ``aucstream`` parser, which reports an unknown option with its subcommand's usage
    (argparse leaves it to the top-level parser, whose usage lists none of its options)."""

    commands: dict[str, argparse.ArgumentParser]

    def parse_command_line(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        args, unknown = self.parse_known_args(argv)
        if unknown:
            where = self.commands.get(getattr(args, "command", None) or "", self)
            where.error(f"unrecognized arguments: {' '.join(unknown)}")
        return args


def build_parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog="aucstream", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(f"{__name__}.{name}").register(commands)
    parser.commands = dict(commands.choices)
    return parser


def load_settings(variables: dict[str, object]):
    """``Settings()`` with each of ``variables`` not None set first (a command's options override
    the environment); invalid settings are one line, before anything starts."""
    from pydantic import ValidationError

    from service.settings import Settings

    os.environ.update({name: str(value) for name, value in variables.items() if value is not None})
    try:
        return Settings()
    except ValidationError as error:
        raise CliError(f"invalid settings: {validation_message(error)}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_command_line(argv)
    return run(args.handler, args)
