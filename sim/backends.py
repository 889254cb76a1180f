"""The ``sim.backend`` setting of the legged tasks (``--sim`` on ``train``/``play``/``eval``): which simulator steps
the worlds behind the one sim interface of :class:`~sim2real.sim.mujoco_backend.MujocoBackend`.

* ``mujoco`` (default): C MuJoCo, ``mujoco.batch.Batch`` over the CPU cores.
* ``mujoco-warp``: :class:`~sim2real.sim.mujoco_warp_backend.MujocoWarpBackend` (CUDA; also runs on the CPU).
* ``isaaclab``: reserved for the optional Isaac Lab extra (``pip install ".[isaaclab]"``, Python 3.12). Not built
  yet: without the extra it is refused with one line saying how to install it; with it, with one line saying the
  backend is not implemented in this version.
"""

from __future__ import annotations

import importlib.util
import sys

from sim2real.configs import ConfigError

BACKENDS = ("mujoco", "mujoco-warp", "isaaclab")


def isaaclab_missing_message() -> str:
    """The one line printed when ``--sim isaaclab`` is asked for without the ``isaaclab`` package."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (f'--sim isaaclab needs Isaac Lab, which is not installed: pip install ".[isaaclab]" on Python 3.12 '
            f"(this is Python {here}); or use --sim mujoco / --sim mujoco-warp")


def check_backend(name: str) -> None:
    """Raise ConfigError (one line) unless ``name`` is a known backend whose packages are importable."""
    if name not in BACKENDS:
        raise ConfigError(f"sim.backend: '{name}' (choose {', '.join(BACKENDS)})")
    if name == "isaaclab":
        if importlib.util.find_spec("isaaclab") is None:
            raise ConfigError(isaaclab_missing_message())
        raise ConfigError("--sim isaaclab: the Isaac Lab backend is not implemented in this version of sim2real "
                          "(issue 8); use --sim mujoco-warp for GPU simulation")
    if name == "mujoco-warp":
        from sim2real.sim.mujoco_warp_backend import import_mujoco_warp

        import_mujoco_warp()


def make_legged_backend(robot: dict, num_envs: int, sim_cfg: dict, device: str = "cpu", **kwargs):
    """The backend named by ``sim_cfg["backend"]`` (default ``mujoco``), built with the CPU backend's arguments."""
    name = sim_cfg.get("backend", "mujoco")
    check_backend(name)
    if name == "mujoco-warp":
        from sim2real.sim.mujoco_warp_backend import MujocoWarpBackend

        return MujocoWarpBackend(robot, num_envs, sim_cfg, device=device, **kwargs)
    from sim2real.sim.mujoco_backend import MujocoBackend

    return MujocoBackend(robot, num_envs, sim_cfg, device=device, **kwargs)
