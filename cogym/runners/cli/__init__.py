"""The ``cogym`` command: one module per subcommand, each with ``--help``.

``COMMANDS`` names each subcommand's module and its one-line help. A subcommand module defines
``DESCRIPTION``, ``add_arguments(parser)`` and ``run(args) -> int`` (``build-tiny-model`` has a
parser of its own and gets its arguments raw). ``cogym --help`` imports none of them, and
``cogym CMD`` imports only CMD's module (by name, below): so the command starts without loading
torch for the others.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from types import ModuleType

from cogym.core.errors import CogymError
from cogym.core.text import printable

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("cogym.runners.cli.train", "train the policies of a config"),
    "eval": ("cogym.runners.cli.eval", "measure a model with the evaluators a game declares (held-out accuracy, "
             "win rates against scripted twins, exploitability)"),
    "games": ("cogym.runners.cli.games", "list registered games: roles, scripted twins, zero-sum, reward range, versions"),
    "tournament": ("cogym.runners.cli.tournament", "rate checkpoints, models and scripted agents against each other"),
    "show": ("cogym.runners.cli.show", "print the games a run or tournament kept (transcripts.jsonl): each move and "
             "what its seat was shown"),
    "config": ("cogym.runners.cli.config", "every config key with its type, default and meaning"),
    "reproduce": ("cogym.runners.cli.reproduce", "run a paper's claim in miniature over seeds and give the verdict"),
    "build-tiny-model": ("cogym.runners.research.build_tiny_model", "rebuild the embedded tiny model or, with "
                         "--verifier, tiny-verifier or, with --reasoner, tiny-reasoner (see its --help)"),
}
RAW = {"build-tiny-model"}  # their own parser reads everything after the command, options and --help included
# Errors a user causes (any CogymError: config, game, model path, dataset; or a missing file): one line,
# exit 2. Anything else is a bug and keeps its traceback.
USER_ERRORS = (CogymError, FileNotFoundError)


def command_module(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name][0])


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``cogym`` parser; every subcommand's arguments are added when ``command`` is None, else only its."""
    ap = argparse.ArgumentParser(prog="cogym", description="LLM co-training setups as multi-agent games.")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, (_, help_) in COMMANDS.items():
        if name in RAW:
            sub.add_parser(name, help=help_, add_help=False)
        elif command is None or name == command:
            module = command_module(name)
            module.add_arguments(sub.add_parser(name, help=help_, description=module.DESCRIPTION))
        else:
            sub.add_parser(name, help=help_)
    return ap


class _NoAutoCPUNotice(logging.Filter):
    """Drops DeepSpeed's "Setting accelerator to CPU. If you have GPU ..." warning: transformers imports
    DeepSpeed in every run, also those that train with torch, and on a CPU machine the notice is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Setting accelerator to CPU" not in record.getMessage()


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("DeepSpeed").addFilter(_NoAutoCPUNotice())  # the logger DeepSpeed creates on import
    # transformers' per-file load/save bars would bury the training bar; it reads this (through
    # huggingface_hub) when the subcommand's module first imports it, below.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    raw = sys.argv[1:] if argv is None else list(argv)
    if raw[:1] and raw[0] in RAW:
        return command_module(raw[0]).main(raw[1:])
    name = raw[0] if raw[:1] and raw[0] in COMMANDS else None
    ap = parser(name) if name else parser("")  # no command (or --help): list the commands, import none
    args, extra = ap.parse_known_args(raw)
    module = command_module(args.command)
    if extra:
        if getattr(module, "OVERRIDES_AFTER_OPTIONS", False) and all("=" in x and not x.startswith("-") for x in extra):
            args.overrides.extend(extra)
        else:
            ap.error(f"unrecognized arguments: {' '.join(extra)}")
    if hasattr(module, "normalise"):
        module.normalise(args)
    try:
        return module.run(args)
    except USER_ERRORS as exc:
        # The message may quote what the user gave or a file held (a player's name, a transcript's field):
        # its control characters are shown as escapes, not sent to the terminal.
        print(f"cogym {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cogym {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # a pipe of our own (a worker, a socket) broke: a real failure
        # The reader of our output went away (`cogym games | head`): stop quietly, as other CLI tools do,
        # and point stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _stdout_closed() -> bool:
    """Whether the reader of stdout has gone away: writing to it (one newline, harmless when it has
    not) breaks the pipe again."""
    try:
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    return False


if __name__ == "__main__":
    raise SystemExit(main())
