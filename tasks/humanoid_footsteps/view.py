"""``sim2real view`` for ``humanoid-footsteps``: each world's robot and terrain boxes (the model's own geometry), the
plan's footsteps (flat footprints along each step's heading: left blue, right red) and the current target step (a
green footprint, slightly larger)."""

from __future__ import annotations

from sim2real.sim.scene import Marker
from sim2real.tasks.humanoid_footsteps.plans import LEFT
from sim2real.tasks.legged_view import LeggedView, yaw_quat

LEFT_RGBA, RIGHT_RGBA, TARGET_RGBA = (0.15, 0.35, 0.9, 0.55), (0.9, 0.2, 0.15, 0.55), (0.1, 0.8, 0.2, 0.7)
#: Half-extents [m] of a drawn footprint (length along the step's heading, width, thickness).
FOOTPRINT = (0.1, 0.045, 0.003)


class FootstepsView(LeggedView):
    """:class:`~sim2real.tasks.legged_view.LeggedView` plus each env's footstep plan and current target step."""

    def markers(self) -> list[list[Marker]]:
        t = self.env.tracker
        steps, lengths = t.steps_w.cpu().numpy(), t.lengths.cpu().numpy()
        target, in_plan = t.target().cpu().numpy(), t.in_plan().cpu().numpy()
        out = []
        for i in range(self.env.num_envs):
            marks = [Marker(f"step/{k}", "box", FOOTPRINT, LEFT_RGBA if round(foot) == LEFT else RIGHT_RGBA,
                            (float(x), float(y), float(z) + FOOTPRINT[2]), yaw_quat(float(yaw)))
                     for k, (foot, x, y, z, yaw) in enumerate(steps[i, :int(lengths[i])])]
            if in_plan[i]:
                _, x, y, z, yaw = target[i]
                marks.append(Marker("target", "box", (FOOTPRINT[0] * 1.25, FOOTPRINT[1] * 1.4, FOOTPRINT[2] * 1.5),
                                    TARGET_RGBA, (float(x), float(y), float(z) + 2 * FOOTPRINT[2]),
                                    yaw_quat(float(yaw))))
            out.append(marks)
        return out
