"""argparse types of the ``sim2real`` command line (numbers it checks at parse time)."""

from __future__ import annotations

import argparse
import math

#: DDS domain ids: 0-232 (the DDS spec's UDP port mapping; CycloneDDS and Fast DDS refuse larger ones).
DDS_DOMAIN_ID_MAX = 232



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
