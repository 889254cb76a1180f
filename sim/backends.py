"""The ``sim.backend`` setting of the legged tasks (``--sim`` on ``train``/``play``/``eval``): which simulator steps
the worlds behind the one sim interface of :class:`~sim2real.sim.mujoco_backend.MujocoBackend`.

* ``mujoco`` (default): C MuJoCo, ``mujoco.batch.Batch`` over the CPU cores.
* ``mujoco-warp``: :class:`~sim2real.sim.mujoco_warp_backend.MujocoWarpBackend` (CUDA; also runs on the CPU).
* ``isaaclab``: :class:`~sim2real.sim.isaaclab_backend.IsaacLabBackend`, an Isaac Lab 3.0 scene on Newton's MuJoCo
  Warp solver (the optional extra ``pip install ".[isaaclab]"``, Python 3.12; CUDA, also runs on the CPU). Without
  the extra it is refused with one line saying how to install it.
"""

from __future__ import annotations

import importlib.util

from sim2real.configs import ConfigError

BACKENDS = ("mujoco", "mujoco-warp", "isaaclab")


def check_backend(name: str) -> None:
    """Raise ConfigError (one line) unless ``name`` is a known backend whose packages are importable."""
    if name not in BACKENDS:
        raise ConfigError(f"sim.backend: '{name}' (choose {', '.join(BACKENDS)})")
    if name == "isaaclab":
        from sim2real.sim.isaaclab_backend import import_isaaclab, isaaclab_missing_message

        if importlib.util.find_spec("isaaclab") is None:
            raise ConfigError(isaaclab_missing_message())

        import_isaaclab()
    if name == "mujoco-warp":
        from sim2real.sim.mujoco_warp_backend import import_mujoco_warp

        import_mujoco_warp()
    if name == "mujoco":
        from sim2real.sim.mujoco_model import batch_class

        batch_class()


def make_legged_backend(robot: dict, num_envs: int, sim_cfg: dict, device: str = "cpu", **kwargs):
    """The backend named by ``sim_cfg["backend"]`` (default ``mujoco``), built with the CPU backend's arguments."""
    name = sim_cfg.get("backend", "mujoco")
    check_backend(name)
    if name == "mujoco-warp":
        from sim2real.sim.mujoco_warp_backend import MujocoWarpBackend

        return MujocoWarpBackend(robot, num_envs, sim_cfg, device=device, **kwargs)
    if name == "isaaclab":
        from sim2real.sim.isaaclab_backend import IsaacLabBackend

        return IsaacLabBackend(robot, num_envs, sim_cfg, device=device, **kwargs)
    from sim2real.sim.mujoco_backend import MujocoBackend

    return MujocoBackend(robot, num_envs, sim_cfg, device=device, **kwargs)
