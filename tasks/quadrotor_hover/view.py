"""``sim2real view`` for ``quadrotor-hover``: each env's drone (a visual stand-in built from the robot config; the
task's physics is its own torch dynamics); its goal is drawn from the task's
markers (:mod:`sim2real.tasks.quadrotor_hover.markers`)."""

from __future__ import annotations

import numpy as np

from sim2real.sim.scene import quadrotor_model


class HoverView:
    """The :class:`~sim2real.sim.scene.SceneView` of a :class:`~sim2real.tasks.quadrotor_hover.env.QuadrotorHoverEnv`:
    one scene per env (qpos: the drone's free joint, position m and quaternion w, x, y, z, world frame)."""

    def __init__(self, env):
        self.env = env
        self.model = quadrotor_model(env.cfg["robot"])

    def models(self) -> list:
        return [self.model] * self.env.num_envs

    def labels(self) -> list[str]:
        return [f"env {i}" for i in range(self.env.num_envs)]

    def qpos(self) -> np.ndarray:
        return np.concatenate((self.env.dyn.pos_w.cpu().numpy(), self.env.dyn.quat_w.cpu().numpy()), axis=1)
