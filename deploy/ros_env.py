"""Keep a ROS 2 graph on this machine: loopback-only discovery and a private domain id.

Tests, benchmarks and the stand-in robot call :func:`isolate_ros_environment` before ``rclpy.init`` (the
variables are read when the middleware starts, and child processes inherit them), so nothing they publish leaves
the loopback interface or reaches a real robot listening on the default domain 0. No ROS import at import time:
the CLI's ROS commands call :func:`require_rclpy` first, which turns a broken ROS install into one line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sim2real.configs import ConfigError

DOMAIN_ID_MIN, DOMAIN_ID_MAX = 1, 101


def domain_id_for_pid(pid: int | None = None) -> int:
    """A domain id in ``[1, 101]`` derived from a process id (default: this process)."""
    pid = os.getpid() if pid is None else pid
    return DOMAIN_ID_MIN + pid % (DOMAIN_ID_MAX - DOMAIN_ID_MIN + 1)


def isolate_ros_environment(domain_id: int | None = None) -> int:
    """Set ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``, drop ``ROS_STATIC_PEERS``, set ``ROS_DOMAIN_ID`` and
    ``RMW_IMPLEMENTATION`` (``rmw_fastrtps_cpp`` unless already chosen) in ``os.environ``.

    Args:
        domain_id: the domain to use; default :func:`domain_id_for_pid` of this process.

    Returns:
        The domain id now in ``ROS_DOMAIN_ID``.

    Raises:
        ValueError: ``domain_id`` outside ``[1, 101]``.
    """
    domain = domain_id_for_pid() if domain_id is None else int(domain_id)
    if not DOMAIN_ID_MIN <= domain <= DOMAIN_ID_MAX:
        raise ValueError(f"ROS domain id must be in [{DOMAIN_ID_MIN}, {DOMAIN_ID_MAX}], got {domain}")
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.pop("ROS_STATIC_PEERS", None)
    os.environ.pop("ROS_LOCALHOST_ONLY", None)  # deprecated; conflicts with the discovery range if set
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    return domain


def force_localhost_discovery() -> None:
    """Loopback-only discovery, keeping the caller's ``ROS_DOMAIN_ID`` (what the stand-in robot runs with)."""
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.pop("ROS_STATIC_PEERS", None)
    os.environ.pop("ROS_LOCALHOST_ONLY", None)
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


class RosUnavailableError(ConfigError):
    """rclpy cannot be imported (the ROS 2 wheels missing, or their shared libraries not found). ``sim2real`` prints
    it as one ``error:`` line (exit status 2)."""


def _ros_requirements() -> list[str]:
    """The ``ros-*`` wheels of this project's ``deploy`` extra (its installed metadata), e.g.
    ``["ros-rclpy", ...]``."""
    import re
    from importlib import metadata

    try:
        requires = metadata.requires("sim2real") or []
    except metadata.PackageNotFoundError:
        return ["ros-rclpy"]
    names = [re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in requires
             if "extra ==" not in r or re.search(r"""extra == ['"]deploy['"]""", r)]
    return [n for n in names if n.startswith("ros-")] or ["ros-rclpy"]


def require_rclpy(command: str = "sim2real deploy", extra: str = "deploy") -> None:
    """Import rclpy (its C extension loads the ROS 2 libraries), for the ROS commands (``deploy``, ``standin``,
    ``bridge``) before anything else touches ROS.

    Args:
        command, extra: the command that needs it and the extra that installs it, for the error line.

    Raises:
        MissingExtraError: rclpy is not installed (one line naming ``extra``).
        RosUnavailableError: rclpy is there but cannot load; one line with the ImportError and the fix. The ROS
            wheels' ``.pth``
            (``ros_wheels_bootstrapper``) puts only ``sys.prefix``'s ``ros_*.libs`` folders on ``LD_LIBRARY_PATH``,
            so in a venv made with ``--system-site-packages`` the libraries of wheels installed in the base
            interpreter are not found (``librcl_action.so: cannot open shared object file``): the fix is a plain
            venv, or the ``ros-*`` wheels installed into the venv itself.
    """
    try:
        import rclpy  # noqa: F401
    except ImportError as exc:
        from importlib.util import find_spec

        from sim2real.extras import missing_extra

        if isinstance(exc, ModuleNotFoundError) and exc.name == "rclpy":
            raise missing_extra(extra, command, "rclpy", exc) from None
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        try:
            spec = find_spec("rclpy")
        except (ImportError, ValueError):
            spec = None
        origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
        wheels = " ".join(_ros_requirements())
        if sys.prefix != sys.base_prefix and origin is not None \
                and not origin.is_relative_to(Path(sys.prefix).resolve()):
            raise RosUnavailableError(
                f"cannot load rclpy ({why}): this Python is a venv ({sys.prefix}) that sees the ROS 2 wheels of the "
                f"base interpreter ({origin.parents[1]}) through --system-site-packages, but their libraries are "
                f"looked up under the venv only: use a plain venv (python3 -m venv, without --system-site-packages, "
                f"then pip install -e .) or install the ros-* wheels into this venv: pip install --ignore-installed "
                f"{wheels}") from None
        raise RosUnavailableError(f"cannot load rclpy ({why}): the ROS commands need the ROS 2 wheels installed in "
                                  f"this Python ({sys.executable}): pip install -e \".[{extra}]\" (or pip install "
                                  f"{wheels})") from None
