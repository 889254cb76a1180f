"""What ``sim2real view`` draws of a legged task on C MuJoCo (``quadruped-jump``, ``humanoid-footsteps``): each
world of the batch as its own scene, with the geometry of that world's model (its obstacle and terrain boxes as the
episode placed them) and the robot's generalised positions. The markers are the task's own (its spec's ``markers``
hook)."""

from __future__ import annotations

import numpy as np

from sim2real.configs import ConfigError


class LeggedView:
    """The legged tasks' :class:`~sim2real.sim.scene.SceneView`: one scene per world, labelled ``env <i>``.

    Raises:
        ConfigError: the env's simulation backend is not C MuJoCo (``sim.backend mujoco``), whose batch holds each
            world's model and ``qpos``.
    """

    def __init__(self, env):
        batch = getattr(env.sim, "batch", None)
        if not hasattr(batch, "get_model") or not hasattr(env.sim, "_qpos"):
            raise ConfigError(f"view: the {type(env.sim).__name__} backend keeps no per-world MuJoCo model to draw; "
                              f"view this policy with --sim mujoco")
        self.env = env
        # the worlds' models as the first episodes placed their obstacles and terrain boxes
        self._models = [batch.get_model(i) for i in range(env.num_envs)]

    def models(self) -> list:
        return self._models

    def labels(self) -> list[str]:
        return [f"env {i}" for i in range(self.env.num_envs)]

    def qpos(self) -> np.ndarray:
        return np.array(self.env.sim._qpos, dtype=np.float64, copy=True)
