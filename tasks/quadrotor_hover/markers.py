"""The markers of ``quadrotor-hover`` (its spec's ``markers`` hook, drawn by ``play``'s video and ``sim2real view``):
each env's goal position, a green sphere on a pole down to the floor."""

from __future__ import annotations

from sim2real.sim.markers import Marker, goal_markers

#: Radius [m] of the drawn goal.
GOAL_RADIUS = 0.03


def markers(env) -> list[list[Marker]]:
    """Per env of a :class:`~sim2real.tasks.quadrotor_hover.env.QuadrotorHoverEnv`: its goal ``goal`` (and the pole
    ``pole/goal`` under it), world frame."""
    return [goal_markers("goal", g, GOAL_RADIUS) for g in env.goal_w.cpu().numpy()]
