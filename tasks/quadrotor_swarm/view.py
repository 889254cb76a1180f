"""``sim2real view`` for ``quadrotor-swarm``: each room's drones (visual stand-ins built from the robot config, in
their colours, each inside a translucent halo of its colour: a drone 10 cm across is a speck in a view of the
10 m room; the task's physics is its own torch dynamics, its collision radius unchanged); the goals, columns and
walls are drawn from the task's markers (:mod:`sim2real.tasks.quadrotor_swarm.markers`)."""

from __future__ import annotations

import numpy as np

from sim2real.sim.scene import quadrotor_model
from sim2real.tasks.quadrotor_swarm.markers import drone_colours


#: Radius [m] of the halo drawn around each drone (drawing only; the drones collide at ``room.drone_radius``).
HALO_M = 0.25


class SwarmView:
    """The :class:`~sim2real.sim.scene.SceneView` of a :class:`~sim2real.tasks.quadrotor_swarm.env.QuadrotorSwarmEnv`:
    one scene per room of M drones (qpos ``[7 M]``: per drone position m and quaternion w, x, y, z, world frame)."""

    def __init__(self, env):
        self.env = env
        m = env.drones_per_room
        self.model = quadrotor_model(env.cfg["robot"], m, drone_colours(m), floor=env.room.room_half + 0.5,
                                     halo=HALO_M)

    def models(self) -> list:
        return [self.model] * self.env.num_rooms

    def labels(self) -> list[str]:
        return [f"room {r}: density {float(d):.2f}" for r, d in enumerate(self.env.density.cpu())]

    def qpos(self) -> np.ndarray:
        pose = np.concatenate((self.env.dyn.pos_w.cpu().numpy(), self.env.dyn.quat_w.cpu().numpy()), axis=1)
        return pose.reshape(self.env.num_rooms, -1)
