"""The markers of ``quadrotor-swarm`` (its spec's ``markers`` hook, drawn by ``play``'s video and ``sim2real view``):
per room, each drone's goal (a sphere of the drone's colour on a pole down to the floor), the room's occupied
columns and its four translucent walls. :func:`drone_colours` is the drones' palette (their arms, goals, trails and
plot lines)."""

from __future__ import annotations

from sim2real.sim.markers import COLUMN_RGBA, WALL_RGBA, Marker, goal_markers, with_alpha

#: Radius [m] of a drawn goal.
GOAL_RADIUS = 0.07
#: Opacity of a drawn goal (in its drone's colour).
GOAL_ALPHA = 0.6
#: Half thickness [m] of a drawn wall.
WALL_HALF = 0.02


def drone_colours(m: int) -> list[tuple[float, float, float]]:
    """The colours (RGB in [0, 1]) of a room's ``m`` drones: matplotlib's ``tab10`` up to 10 drones, ``tab20`` up to
    20, else evenly spaced hues."""
    import matplotlib

    if m <= 10:
        cmap, at = matplotlib.colormaps["tab10"], range(m)
    elif m <= 20:
        cmap, at = matplotlib.colormaps["tab20"], range(m)
    else:
        cmap, at = matplotlib.colormaps["hsv"], [i / m for i in range(m)]
    return [tuple(float(c) for c in cmap(x)[:3]) for x in at]


def markers(env) -> list[list[Marker]]:
    """Per room of a :class:`~sim2real.tasks.quadrotor_swarm.env.QuadrotorSwarmEnv`: the goals ``goal/<i>`` (and
    poles ``pole/goal/<i>``) of its drones, its occupied columns ``column/<c>`` and walls ``wall/<k>``, world
    frame."""
    room, m = env.room, env.drones_per_room
    goals = env.goal_w.cpu().numpy().reshape(env.num_rooms, m, 3)
    centers = env.centers.cpu().numpy()
    colours = drone_colours(m)
    h, half = room.room_half, room.room_height / 2
    walls = [Marker(f"wall/{k}", "box", size, WALL_RGBA, pos) for k, (pos, size) in enumerate((
        ((h, 0.0, half), (WALL_HALF, h, half)), ((-h, 0.0, half), (WALL_HALF, h, half)),
        ((0.0, h, half), (h, WALL_HALF, half)), ((0.0, -h, half), (h, WALL_HALF, half))))]
    out = []
    for r, occupied in enumerate(env.occupied.cpu().numpy()):
        marks = [mk for i in range(m)
                 for mk in goal_markers(f"goal/{i}", goals[r, i], GOAL_RADIUS, with_alpha(colours[i], GOAL_ALPHA))]
        marks += [Marker(f"column/{c}", "cylinder", (room.obstacle_radius, half), COLUMN_RGBA,
                         (float(x), float(y), half)) for c, (x, y) in enumerate(centers) if occupied[c]]
        out.append(marks + walls)
    return out
