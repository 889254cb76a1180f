"""The optional parts of sim2real and the pip extras that install them (``[project.optional-dependencies]`` of
pyproject.toml).

The core install (``pip install -e .``) trains: train, eval, play, export, check, list, bench. Each other job has
an extra: ``deploy`` (ROS 2 wheels, MCAP recordings), ``hardware`` (robot SDKs, with deploy), ``gpu`` (MuJoCo Warp),
``finetune`` (its off-policy library and link, with deploy), ``view`` (the browser viewer), ``tracking`` (W&B);
``all`` is every one of them. A command that needs a missing extra refuses in one line naming it
(:func:`require_extra`, or :func:`missing_extra` where the import is already guarded), e.g.::

    error: sim2real deploy needs the deploy extra: pip install -e ".[deploy]" (rclpy is not installed)
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Iterable

from sim2real.configs import ConfigError

#: Each extra's own top-level modules (import names), which the commands that need it import.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "deploy": ("rclpy", "mcap", "mcap_ros2"),
    "hardware": ("cflib",),
    "gpu": ("warp", "mujoco_warp"),
    "finetune": ("stable_baselines3", "zmq"),
    "view": ("viser",),
    "tracking": ("wandb",),
}


class MissingExtraError(ConfigError):
    """A command needs an optional extra that is not installed (printed as one ``error:`` line, exit status 2).

    Attributes:
        extra: the extra to install. module: the module that could not be imported.
    """

    def __init__(self, message: str, extra: str, module: str):
        super().__init__(message)
        self.extra, self.module = extra, module


def install_command(extra: str) -> str:
    """The command that installs ``extra`` into this checkout: ``pip install -e ".[extra]"``."""
    return f'pip install -e ".[{extra}]"'


def _is_missing(exc: ImportError, module: str) -> bool:
    """Whether ``exc`` says ``module`` (or a package above it) is not installed, rather than failing inside it."""
    name = getattr(exc, "name", None)
    return isinstance(exc, ModuleNotFoundError) and bool(name) and (module == name or module.startswith(name + "."))


def venv_over_system_site() -> bool:
    """Whether this interpreter runs in a venv made with ``--system-site-packages`` (its ``pyvenv.cfg`` says
    ``include-system-site-packages = true``)."""
    if sys.prefix == sys.base_prefix:
        return False
    try:
        text = (Path(sys.prefix) / "pyvenv.cfg").read_text()
    except OSError:
        return False
    return any(line.replace(" ", "").lower() == "include-system-site-packages=true" for line in text.splitlines())


#: Where the docs say what to do when the ROS wheels' libraries are not found from a venv.
VENV_ROS_HINT = ("in a venv made with --system-site-packages the ROS wheels' libraries are not on the library path: "
                 "use a plain venv or install the ros-* wheels into this one (docs/deploy.md, Quadrotor)")


def missing_extra(extra: str, command: str, module: str, exc: ImportError | None = None,
                  otherwise: str = "") -> MissingExtraError:
    """The error for ``command`` (e.g. ``sim2real deploy``) failing to import ``module`` of ``extra``: one line,
    ``<command> needs the <extra> extra: pip install -e ".[<extra>]" (<why>)[; <otherwise>]``."""
    if extra not in EXTRA_MODULES:
        raise ValueError(f"unknown extra {extra!r} (known: {', '.join(EXTRA_MODULES)})")
    if exc is None or _is_missing(exc, module):
        why = f"{module} is not installed"
    else:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        why = f"cannot import {module}: {first}"
        if module == "rclpy" and "cannot open shared object file" in first and venv_over_system_site():
            otherwise = f"{otherwise}; {VENV_ROS_HINT}" if otherwise else VENV_ROS_HINT
    tail = f"; {otherwise}" if otherwise else ""
    return MissingExtraError(f"{command} needs the {extra} extra: {install_command(extra)} ({why}){tail}", extra,
                             module)


def require_extra(extra: str, command: str, modules: Iterable[str] | None = None, otherwise: str = "") -> None:
    """Import ``modules`` (default: the extra's own, :data:`EXTRA_MODULES`) for ``command``.

    Raises:
        MissingExtraError: one of them cannot be imported (see :func:`missing_extra`).
    """
    for module in modules if modules is not None else EXTRA_MODULES[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing_extra(extra, command, module, exc, otherwise) from None
