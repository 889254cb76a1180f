"""The markers of ``humanoid-footsteps`` (its spec's ``markers`` hook, drawn by ``play``'s video and ``sim2real
view``): each world's footstep plan as flat footprints along each step's heading, left blue and right red, the step
the policy is asked to step on next green, the steps before it faded."""

from __future__ import annotations

from sim2real.sim.markers import LEFT_RGBA, PASSED_ALPHA, RIGHT_RGBA, TARGET_RGBA, Marker, with_alpha, yaw_quat
from sim2real.tasks.humanoid_footsteps.plans import LEFT

#: Half-extents [m] of a drawn footprint (length along the step's heading, width, thickness): a JVRC-1-class sole.
FOOTPRINT = (0.11, 0.05, 0.003)


def markers(env) -> list[list[Marker]]:
    """Per world of a :class:`~sim2real.tasks.humanoid_footsteps.env.HumanoidFootstepsEnv`: the real steps of its
    plan (the tracker's, world frame), each ``step/<k>`` (faded once the target has moved past it) but the current
    target step, ``target`` (none once the plan is walked)."""
    t = env.tracker
    steps, lengths, index = t.steps_w.cpu().numpy(), t.lengths.cpu().numpy(), t.index.cpu().numpy()
    out = []
    for i in range(len(steps)):
        marks = []
        for k, (foot, x, y, z, yaw) in enumerate(steps[i, :int(lengths[i])]):
            pos, quat = (float(x), float(y), float(z) + FOOTPRINT[2]), yaw_quat(float(yaw))
            if k == index[i]:
                marks.append(Marker("target", "box", FOOTPRINT, TARGET_RGBA, pos, quat))
                continue
            rgba = LEFT_RGBA if int(round(foot)) == LEFT else RIGHT_RGBA
            if k < index[i]:
                rgba = with_alpha(rgba, PASSED_ALPHA)
            marks.append(Marker(f"step/{k}", "box", FOOTPRINT, rgba, pos, quat))
        out.append(marks)
    return out
