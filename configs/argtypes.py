"""argparse types of the ``sim2real`` command line (numbers it checks at parse time)."""

from __future__ import annotations

import argparse
import math

#: DDS domain ids: 0-232 (the DDS spec's UDP port mapping; CycloneDDS and Fast DDS refuse larger ones).
DDS_DOMAIN_ID_MAX = 232



class CommandLineError(Exception):
    """A command line the parser refused (:class:`Parser` raises it; ``sim2real``'s main prints it as one line)."""


class Parser(argparse.ArgumentParser):
    """argparse, with every parse error answered in one ``error:`` line, exit status 2, instead of the usage: a
    mistyped sub-command like an unknown task or config key, with a did-you-mean (``sim2real trian``: ``error:
    unknown command 'trian' (did you mean 'train'?)``); a bad value or a missing argument naming the command
    (``error: sim2real eval: argument --episodes: must be at least 1, got '0' (see sim2real eval --help)``). Its
    sub-parsers (``bridge``, ``finetune``) are of this class too."""

    def _check_value(self, action, value):
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            from sim2real.configs import unknown_name

            where = self.prog.split(" ", 1)[1] + " " if " " in self.prog else ""  # "bridge " for sim2real bridge
            raise CommandLineError(unknown_name(f"{where}command", value, action.choices, listing="commands"))
        super()._check_value(action, value)

    def error(self, message):
        raise CommandLineError(f"{self.prog}: {message} (see {self.prog} --help)")


def positive_steps(text: str) -> int:
    """argparse type: a number of steps >= 1, written as an integer or like 5e6."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 1:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 1, got {text!r}")
    return int(value)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def dds_domain_id(text: str) -> int:
    """argparse type: a DDS domain id, an integer in 0-232 (so a bad one is refused here, not blamed on the
    network interface when the DDS domain fails to open)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= DDS_DOMAIN_ID_MAX:
        raise argparse.ArgumentTypeError(f"a DDS domain id is 0-{DDS_DOMAIN_ID_MAX}, got {text!r}")
    return value
