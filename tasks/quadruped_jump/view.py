"""``sim2real view`` for ``quadruped-jump``: each world's robot and obstacle box (the model's own geometry), labelled
with its command; the landing target is drawn from the task's markers
(:mod:`sim2real.tasks.quadruped_jump.markers`)."""

from __future__ import annotations

from sim2real.tasks.legged_view import LeggedView


class JumpView(LeggedView):
    """:class:`~sim2real.tasks.legged_view.LeggedView` with each world's command in its label."""

    def labels(self) -> list[str]:
        c = self.env.command.cpu().numpy()
        return [f"env {i}: dx {x:.2f} dy {y:.2f} dyaw {yaw:.2f}" + (f" obstacle {h:.2f} m" if h > 0 else "")
                for i, (x, y, yaw, h, _) in enumerate(c)]
