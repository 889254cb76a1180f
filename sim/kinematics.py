"""Foot points by forward kinematics on the robot's MuJoCo model: the same foot points the simulation backends
report (``foot_pos_w`` / ``foot_yaw_w``), computed from a measured base pose and joint positions (the deploy node
has no simulator state, only odometry and joint states).

The foot point of each foot is the site :func:`~sim2real.sim.mujoco_model.build_model` adds (the foot geom's
centre, or the foot body's origin for ``foot_bodies``); its heading is the site x axis' angle about world z
(:func:`foot_yaw_from_xmat`, shared with :class:`~sim2real.sim.mujoco_backend.MujocoBackend`).
"""

from __future__ import annotations

import mujoco
import numpy as np


def foot_yaw_from_xmat(xmat: np.ndarray) -> np.ndarray:
    """Heading [rad] about world z of frames whose rotation matrices are ``xmat`` ``[..., 9]`` (row-major,
    MuJoCo's ``site_xmat``): the angle of their x axis projected on the xy plane."""
    return np.arctan2(xmat[..., 3], xmat[..., 0])


class FootKinematics:
    """Foot points of one robot from its base pose and joint positions (``mj_kinematics`` on a scratch
    ``MjData``; no dynamics).

    Args:
        model: the robot's model compiled by :func:`~sim2real.sim.mujoco_model.build_model` (it has the foot point
            sites).
        index: its :class:`~sim2real.sim.mujoco_model.ModelIndex` (policy joint order, foot sites, held joints).

    Held joints (the robot config's ``held_joints``) are put at their held pose; every other joint not given
    stays at the model's reference pose.
    """

    def __init__(self, model: mujoco.MjModel, index):
        self.model, self.index = model, index
        self.data = mujoco.MjData(model)
        held = list(index.held_joint_names or [])
        if held:
            adr = model.jnt_qposadr[[model.joint(n).id for n in held]]
            self.data.qpos[adr] = index.held_joint_pos
        self.num_feet = len(index.foot_sites)

    def __call__(self, base_pos_w, base_quat_w, joint_pos) -> tuple[np.ndarray, np.ndarray]:
        """Foot points of the robot in this pose.

        Args:
            base_pos_w: ``[3]`` base position [m] in the world (odometry) frame.
            base_quat_w: ``[4]`` base orientation (w, x, y, z; body to world).
            joint_pos: ``[J]`` joint positions [rad], policy order (the robot config's ``joint_names``).

        Returns:
            ``foot_pos_w`` ``[F, 3]`` [m] (world frame) and ``foot_yaw_w`` ``[F]`` [rad], float64, feet in the
            robot config's foot order.
        """
        i, d = self.index, self.data
        d.qpos[i.base_qpos:i.base_qpos + 3] = np.asarray(base_pos_w, dtype=np.float64).reshape(3)
        d.qpos[i.base_qpos + 3:i.base_qpos + 7] = np.asarray(base_quat_w, dtype=np.float64).reshape(4)
        d.qpos[i.joint_qpos] = np.asarray(joint_pos, dtype=np.float64).reshape(-1)
        mujoco.mj_kinematics(self.model, d)
        return d.site_xpos[i.foot_sites].copy(), foot_yaw_from_xmat(d.site_xmat[i.foot_sites])
