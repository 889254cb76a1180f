"""``sim2real view`` for ``quadruped-jump``: each world's robot and obstacle box (the model's own geometry) and the
landing target: a green disc of the success tolerance's radius with a bar along the target heading."""

from __future__ import annotations

import numpy as np

from sim2real.sim.scene import Marker
from sim2real.tasks.legged_view import LeggedView, yaw_quat

TARGET_RGBA = (0.1, 0.8, 0.2, 0.45)
HEADING_RGBA = (0.1, 0.6, 0.15, 0.9)


class JumpView(LeggedView):
    """:class:`~sim2real.tasks.legged_view.LeggedView` plus the landing targets of the env's commands."""

    def labels(self) -> list[str]:
        c = self.env.command.cpu().numpy()
        return [f"env {i}: dx {x:.2f} dy {y:.2f} dyaw {yaw:.2f}" + (f" obstacle {h:.2f} m" if h > 0 else "")
                for i, (x, y, yaw, h, _) in enumerate(c)]

    def markers(self) -> list[list[Marker]]:
        e = self.env
        success = e.cfg["success"]
        target, yaw = e.target_xy.cpu().numpy(), e.target_yaw.cpu().numpy()
        distance = np.linalg.norm(target - e.start_xy.cpu().numpy(), axis=1)
        out = []
        for (x, y), psi, d in zip(target, yaw, distance):
            r = float(success["position_tol"]) + float(success["position_tol_per_m"]) * float(d)
            q = yaw_quat(float(psi))
            out.append([Marker("target", "cylinder", (r, 0.002), TARGET_RGBA, (float(x), float(y), 0.003)),
                        Marker("target/heading", "box", (r / 2, 0.008, 0.003), HEADING_RGBA,
                               (float(x + np.cos(psi) * r / 2), float(y + np.sin(psi) * r / 2), 0.006), q)])
        return out
