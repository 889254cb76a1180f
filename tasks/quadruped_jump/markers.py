"""The markers of ``quadruped-jump`` (its spec's ``markers`` hook, drawn by ``play``'s video and ``sim2real view``):
each world's landing target, a green disc of the success tolerance's radius with a bar along the target heading.
(The obstacle box is the model's own geom.)"""

from __future__ import annotations

import numpy as np

from sim2real.sim.markers import HEADING_RGBA, TARGET_RGBA, Marker, yaw_quat


def markers(env) -> list[list[Marker]]:
    """Per world of a :class:`~sim2real.tasks.quadruped_jump.env.QuadrupedJumpEnv`: its landing target ``target``
    (a disc of radius ``success.position_tol + success.position_tol_per_m`` x the commanded distance) and
    ``target/heading`` (a bar from its centre along the target yaw), world frame."""
    success = env.cfg["success"]
    target, yaw = env.target_xy.cpu().numpy(), env.target_yaw.cpu().numpy()
    distance = np.linalg.norm(target - env.start_xy.cpu().numpy(), axis=1)
    out = []
    for (x, y), psi, d in zip(target, yaw, distance):
        r = float(success["position_tol"]) + float(success["position_tol_per_m"]) * float(d)
        out.append([Marker("target", "cylinder", (r, 0.002), TARGET_RGBA, (float(x), float(y), 0.003)),
                    Marker("target/heading", "box", (r / 2, 0.008, 0.003), HEADING_RGBA,
                           (float(x + np.cos(psi) * r / 2), float(y + np.sin(psi) * r / 2), 0.006), yaw_quat(psi))])
    return out
