"""Keep a ROS 2 graph on this machine: loopback-only discovery and a private domain id.

Tests, benchmarks and the stand-in robot call :func:`isolate_ros_environment` before ``rclpy.init`` (the
variables are read when the middleware starts, and child processes inherit them), so nothing they publish leaves
the loopback interface or reaches a real robot listening on the default domain 0. No ROS import here.
"""

from __future__ import annotations

import os

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
