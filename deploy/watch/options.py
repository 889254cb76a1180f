"""Options of the live view and the run recording (no ROS or Foxglove import here: ``sim2real --help`` and the
argument parser need neither): the ``--viz [HOST:]PORT`` address and the run folder of a deploy run."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

#: ``--viz`` without a value, or with a port only, listens here.
DEFAULT_VIZ_HOST = "127.0.0.1"
DEFAULT_VIZ_PORT = 8765
#: ``--viz`` given without a value (argparse ``const``): the default address.
VIZ_DEFAULT_CONST = ""
#: Where deploy runs are recorded unless ``--runs-root`` says otherwise (``$SIM2REAL_DEPLOY_RUNS`` overrides it).
DEPLOY_RUNS_ENV = "SIM2REAL_DEPLOY_RUNS"
DEFAULT_DEPLOY_RUNS = "deploy_runs"

_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class VizAddress:
    """Where the Foxglove WebSocket server listens. ``port`` 0: any free port (the one bound is printed)."""

    host: str = DEFAULT_VIZ_HOST
    port: int = DEFAULT_VIZ_PORT

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port if port is None else port}"


def parse_viz_address(text: str) -> VizAddress:
    """``--viz``'s value: ``""`` (the flag alone) -> 127.0.0.1:8765; ``PORT``; ``HOST:PORT``; ``[IPV6]:PORT``.
    ``PORT`` is 0-65535 (0: any free port); ``HOST`` an IPv4 address or a host name (``0.0.0.0``: every
    interface).

    Raises:
        ValueError: anything else, naming the expected form.
    """
    form = "expected [HOST:]PORT, e.g. --viz 8765 or --viz 0.0.0.0:8765"
    text = text.strip()
    if text == VIZ_DEFAULT_CONST:
        return VizAddress()
    host, sep, port = text.rpartition(":")
    if text.startswith("["):
        m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)", text)
        if m is None:
            raise ValueError(f"--viz {text!r}: {form} ([IPV6]:PORT for an IPv6 address)")
        host, port = m.group(1), m.group(2)
    elif sep:
        if not _HOST.fullmatch(host):
            raise ValueError(f"--viz {text!r}: bad host {host!r}; {form}")
    else:
        host = DEFAULT_VIZ_HOST
    if not port.isdigit():
        raise ValueError(f"--viz {text!r}: bad port {port!r}; {form}")
    value = int(port)
    if value > 65535:
        raise ValueError(f"--viz {text!r}: port must be in 0-65535 (0: any free port), got {value}")
    return VizAddress(host, value)


def deploy_runs_root(runs_root: str | os.PathLike | None = None) -> Path:
    """``--runs-root``, else ``$SIM2REAL_DEPLOY_RUNS``, else ``deploy_runs`` (relative to the working folder)."""
    if runs_root is not None:
        return Path(runs_root)
    return Path(os.environ.get(DEPLOY_RUNS_ENV) or DEFAULT_DEPLOY_RUNS)


def new_run_dir(root: Path, robot_name: str, now: float | None = None) -> Path:
    """A new, empty ``<root>/<YYYYmmdd-HHMMSS>_<robot>`` folder (``_2``, ``_3``, ... when taken), created here."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    safe = re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(robot_name)) or "robot"
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = root / (f"{stamp}_{safe}" + (f"_{n}" if n > 1 else ""))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free run folder name for {stamp}_{safe} under {root}")
