"""Microseconds per physics step of a legged task's model, full vs reduced by ``sim.weld_joints`` (a measurement
script, not a ``sim2real bench`` entry)::

    python3 -m sim2real.bench.weld_step [--task humanoid-footsteps] [--mjcf PATH ...] [--weld JSON] [--steps 2000]

For the robot config's MJCF and each ``--mjcf``: the task's model with its (fast) solver settings and PD servos,
once as it is and once with the ``--weld`` joints welded (default: both JVRC-1 models' upper body), stands on flat
ground in the default pose (the held joints held by PD in the full model) for 1 s, then ``mj_step`` runs
``--steps`` times on that one MjData (single thread), ``--repeats`` times, the two models taking turns; the
median and minimum time per step are reported with their ratios. Other processes on the machine (a training) make
the absolute numbers noisy; the ratio less so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mujoco

#: Every non-leg joint of the project's JVRC-1 model and of the real one (waist, neck, arms; the real model's hand
#: joints, whose mimic finger joints follow their thumb). One pattern per group matches in both.
JVRC1_UPPER_BODY = ["WAIST_.*", "NECK_.*", ".*_SHOULDER_.*", ".*_ELBOW_.*", ".*_WRIST_.*|.*_(U|L)(THUMB|INDEX|LITTLE)"]


def standing(cfg: dict) -> tuple[mujoco.MjModel, mujoco.MjData]:
    """The task config's model (PD servos, one thread) and an MjData standing on flat ground in the default pose,
    after 1 s of settling from :meth:`~sim2real.sim.mujoco_backend.MujocoBackend.settled_state`."""
    from sim2real.sim.mujoco_backend import MujocoBackend

    backend = MujocoBackend(cfg["robot"], 1, dict(cfg["sim"], nthread=1))
    model, i = backend.model, backend.index
    data = mujoco.MjData(model)
    height, quat, joints = backend.settled_state(1.0)
    data.qpos[i.base_qpos:i.base_qpos + 7] = [0.0, 0.0, height, *quat]
    data.qpos[i.joint_qpos] = joints
    data.ctrl[i.actuator_ids] = backend.legged.default_pose
    data.qpos[model.jnt_qposadr[[model.joint(n).id for n in i.held_joint_names]]] = i.held_joint_pos
    data.ctrl[i.held_actuator_ids] = i.held_joint_pos
    for _ in range(int(round(1.0 / model.opt.timestep))):
        mujoco.mj_step(model, data)
    return model, data


def time_steps(worlds: list[tuple[mujoco.MjModel, mujoco.MjData]], steps: int, repeats: int) -> list[list[float]]:
    """µs per ``mj_step`` of each ``(model, data)``, ``repeats`` blocks of ``steps`` each, the worlds taking turns
    block by block (so a load that comes and goes hits them alike)."""
    times = [[] for _ in worlds]
    for _ in range(repeats):
        for (model, data), out in zip(worlds, times):
            t0 = time.perf_counter()
            for _ in range(steps):
                mujoco.mj_step(model, data)
            out.append((time.perf_counter() - t0) / steps * 1e6)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m sim2real.bench.weld_step", description=__doc__.split("::")[0])
    p.add_argument("--task", default="humanoid-footsteps", help="a legged task (its config has a sim section)")
    p.add_argument("--mjcf", nargs="*", default=[], help="other MJCF files of the robot to measure too")
    p.add_argument("--weld", default=json.dumps(JVRC1_UPPER_BODY), help="sim.weld_joints of the reduced model (JSON)")
    p.add_argument("--steps", type=int, default=2000, help="mj_step calls per repeat")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (the median is reported)")
    args = p.parse_args(argv)
    from sim2real.tasks import task_config

    for mjcf in [None, *args.mjcf]:
        base = [f"robot.mjcf={mjcf}"] if mjcf else []
        worlds = [standing(task_config(args.task, base + [f"sim.weld_joints={weld}"])) for weld in ("[]", args.weld)]
        full, reduced = time_steps(worlds, args.steps, args.repeats)
        (nv_full, _), (nv_reduced, _) = [(m.nv, d) for m, d in worlds]
        name = mjcf or task_config(args.task)["robot"]["mjcf"]
        print(f"{name}: full (nv {nv_full}) {statistics.median(full):.1f} us/step (min {min(full):.1f}), welded "
              f"(nv {nv_reduced}) {statistics.median(reduced):.1f} us/step (min {min(reduced):.1f}): ratio "
              f"{statistics.median(full) / statistics.median(reduced):.2f} (of the minima "
              f"{min(full) / min(reduced):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
