"""Task markers: the shapes a task draws into its scenes that are not part of any model (a goal, a landing target,
footsteps, a swarm room's columns and walls), and the one palette they are drawn in.

A task describes its markers once, in its spec's ``markers`` hook (``markers(env) -> list[list[Marker]]``: the
markers of each of the env's scenes now, world frame); the videos of ``sim2real play`` and ``train --video``
(:func:`sim2real.sim.render.add_markers`) and the browser viewer of ``sim2real view``
(:class:`sim2real.sim.scene.TraceRecorder`) draw those same markers.

Conventions as in :mod:`sim2real.sim.scene`: world frame z up, metres; quaternions (w, x, y, z); ``size`` in MuJoCo's
geom convention (sphere: radius; capsule and cylinder: radius, half-length along z; box: half-extents; ellipsoid:
semi-axes); colours RGBA in [0, 1]. Nothing here imports MuJoCo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# --- the palette: one colour per concept -------------------------------------------------------------------------
#: A goal, a landing target, the footstep asked for next.
TARGET_RGBA = (0.1, 0.85, 0.25, 0.55)
#: The bar along a landing target's heading.
HEADING_RGBA = (0.1, 0.6, 0.15, 0.9)
#: Opacity of the pole under a goal in the air (:func:`goal_markers`), in the goal's colour.
POLE_ALPHA = 0.35
#: Footsteps of the left and the right foot.
LEFT_RGBA, RIGHT_RGBA = (0.2, 0.45, 1.0, 0.6), (1.0, 0.3, 0.25, 0.6)
#: Opacity of a footstep already walked past.
PASSED_ALPHA = 0.25
#: An obstacle to jump over (the quadruped's obstacle box, a model geom: sim/mujoco_model.py).
OBSTACLE_RGBA = (0.8, 0.4, 0.1, 1.0)
#: A swarm room's columns and its (translucent) walls.
COLUMN_RGBA = (0.55, 0.56, 0.6, 1.0)
WALL_RGBA = (0.8, 0.85, 0.9, 0.12)


@dataclass(frozen=True)
class Marker:
    """A task marker at one instant: ``shape`` (a MuJoCo geom type by name: ``sphere``, ``capsule``, ``ellipsoid``,
    ``cylinder`` or ``box``), ``size`` (MuJoCo's geom convention, 1 to 3 values), ``rgba``, pose in the world frame
    (``pos`` [3] m, ``quat`` [4] w, x, y, z). ``name`` is unique within a scene at any instant and stable over time:
    the viewer draws the markers of one name as one track while their shape, size and colour stay the same (a change
    starts a new track, e.g. a footstep fading once walked)."""

    name: str
    shape: str
    size: tuple
    rgba: tuple
    pos: tuple
    quat: tuple = (1.0, 0.0, 0.0, 0.0)


def yaw_quat(yaw: float) -> tuple:
    """(w, x, y, z) of a rotation by ``yaw`` [rad] about the world z axis."""
    return (math.cos(float(yaw) / 2), 0.0, 0.0, math.sin(float(yaw) / 2))


def with_alpha(rgba, alpha: float) -> tuple:
    """``rgba``'s colour at opacity ``alpha``."""
    return (float(rgba[0]), float(rgba[1]), float(rgba[2]), float(alpha))


def goal_markers(name: str, pos, radius: float, rgba=TARGET_RGBA) -> list[Marker]:
    """A goal in the air at ``pos`` (3,) [m] (world frame): a sphere ``name`` of ``radius`` [m] and a thin pole
    ``pole/<name>`` from the floor (z = 0) up to it, which shows its height."""
    x, y, z = (float(v) for v in pos[:3])
    half = max(z, 1e-3) / 2
    return [Marker(name, "sphere", (float(radius),), tuple(rgba), (x, y, z)),
            Marker(f"pole/{name}", "cylinder", (0.15 * float(radius), half), with_alpha(rgba, POLE_ALPHA),
                   (x, y, half))]
