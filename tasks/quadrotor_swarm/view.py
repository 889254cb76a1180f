"""``sim2real view`` for ``quadrotor-swarm``: each room's drones (visual stand-ins built from the robot config; the
task's physics is its own torch dynamics), each drone's goal (a sphere of its colour), the room's occupied columns
(grey cylinders) and its walls (faint boxes)."""

from __future__ import annotations

import numpy as np

from sim2real.sim.scene import Marker, quadrotor_model

#: Drone colours (matplotlib's tab10), cycled.
PALETTE = [(0.12, 0.47, 0.71), (1.0, 0.5, 0.05), (0.17, 0.63, 0.17), (0.84, 0.15, 0.16), (0.58, 0.4, 0.74),
           (0.55, 0.34, 0.29), (0.89, 0.47, 0.76), (0.5, 0.5, 0.5), (0.74, 0.74, 0.13), (0.09, 0.75, 0.81)]
COLUMN_RGBA = (0.45, 0.45, 0.45, 1.0)
WALL_RGBA = (0.6, 0.65, 0.75, 0.15)
#: Radius [m] of a drawn goal.
GOAL_RADIUS = 0.05


class SwarmView:
    """The :class:`~sim2real.sim.scene.SceneView` of a :class:`~sim2real.tasks.quadrotor_swarm.env.QuadrotorSwarmEnv`:
    one scene per room of M drones (qpos ``[7 M]``: per drone position m and quaternion w, x, y, z, world frame)."""

    def __init__(self, env):
        self.env = env
        m = env.drones_per_room
        self.model = quadrotor_model(env.cfg["robot"], m, PALETTE, floor=env.room.room_half + 0.5)

    def models(self) -> list:
        return [self.model] * self.env.num_rooms

    def labels(self) -> list[str]:
        return [f"room {r}: density {float(d):.2f}" for r, d in enumerate(self.env.density.cpu())]

    def qpos(self) -> np.ndarray:
        pose = np.concatenate((self.env.dyn.pos_w.cpu().numpy(), self.env.dyn.quat_w.cpu().numpy()), axis=1)
        return pose.reshape(self.env.num_rooms, -1)

    def markers(self) -> list[list[Marker]]:
        room, m = self.env.room, self.env.drones_per_room
        goals = self.env.goal_w.cpu().numpy().reshape(self.env.num_rooms, m, 3)
        centers = self.env.centers.cpu().numpy()
        h, height = room.room_half, room.room_height
        walls = [Marker(f"wall/{k}", "box", size, WALL_RGBA, pos) for k, (size, pos) in enumerate((
            ((h, 0.01, height / 2), (0.0, h, height / 2)), ((h, 0.01, height / 2), (0.0, -h, height / 2)),
            ((0.01, h, height / 2), (h, 0.0, height / 2)), ((0.01, h, height / 2), (-h, 0.0, height / 2))))]
        out = []
        for r, occupied in enumerate(self.env.occupied.cpu().numpy()):
            marks = [Marker(f"goal/{i}", "sphere", (GOAL_RADIUS,), PALETTE[i % len(PALETTE)] + (0.6,),
                            tuple(goals[r, i])) for i in range(m)]
            marks += [Marker(f"column/{c}", "cylinder", (room.obstacle_radius, height / 2), COLUMN_RGBA,
                             (float(x), float(y), height / 2)) for c, (x, y) in enumerate(centers) if occupied[c]]
            out.append(marks + walls)
        return out
