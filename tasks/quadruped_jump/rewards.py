"""Reward terms of ``quadruped-jump`` (no reference trajectories): landing accuracy, flight, height, upright,
stillness before the command and after landing, smoothness and torque.

Each term is a plain function of :class:`JumpRewardInputs` and ``rewards.params`` returning ``[N]``; the env
multiplies it by its weight (``rewards.weights.<name>``) and, except for the terms in
:data:`ONCE`, by the control period.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim2real.sim.rotations import wrap_angle
from sim2real.tasks.quadruped_jump.commands import fall_time
from sim2real.tasks.rewards import compute_terms
from sim2real.tasks.state import RobotState

#: Terms paid once per episode (not multiplied by the control period).
ONCE = ("success", "termination", "first_landing")
#: Standing penalties, scaled by the curriculum's penalty schedule (``curriculum.penalty_anneal``: annealed in by
#: measured jump success, so they cannot stop the robot from learning to jump).
STAND_PENALTIES = ("stand_feet_air", "stand_joint_vel", "stand_action_rate")
#: Window after the command's start [s] in which flight and height are rewarded.
TAKEOFF_WINDOW_S = 0.8
#: Time after the command's start [s] from which standing still is rewarded.
SETTLE_AFTER_S = 1.2


@dataclass
class JumpRewardInputs:
    """What the jump's reward terms read, batched ``[N]``.

    Attributes:
        state: the robot state after the step (``time_s``: time since the jump command [s], <= 0 while waiting;
            ``last_action``: this step's action).
        last_actions: ``[N, A]`` the previous step's action.
        target_xy: ``[N, 2]`` landing target, world frame [m]; ``target_yaw``: ``[N]`` landing yaw [rad].
        settled_height: ``[N]`` base height standing still before the command [m].
        torque: ``[N, J]`` joint torques [N m].
        fall: ``[N]`` bool, the episode ends on a fall or body contact; ``tilt``: ``[N]`` base tilt [rad].
        standing: ``[N]`` bool, the robot is told to stand (before the command; after its window, with
            ``env.stand_after_jump``).
        landing_xy: ``[N, 2]`` world frame [m] and ``landing_yaw``: ``[N]`` [rad], the pose the landing terms
            score: the current one while the command's window runs, held from the window's end on with
            ``env.stand_after_jump`` (a hop after the window cannot buy accuracy).
        grounded: ``[N]`` bool, every foot touched the ground since the command started (always true without
            ``env.takeoff_after_command``): flight, height and rise count only then, so hopping before the
            command, to be airborne when it comes, earns nothing.
        first_landing_xy: ``[N, 2]`` world frame [m], the base xy at the touchdown that ended the command's first
            flight of at least ``env.airborne_min_s``; NaN until then.
        first_touchdown: ``[N]`` bool, that touchdown happened at this step.
        box_touch: ``[N]`` bool, a foot is within ``FOOT_BOX_MARGIN_M`` of the obstacle box at this step.
    """

    state: RobotState
    last_actions: torch.Tensor
    target_xy: torch.Tensor
    target_yaw: torch.Tensor
    settled_height: torch.Tensor
    torque: torch.Tensor
    fall: torch.Tensor
    tilt: torch.Tensor
    standing: torch.Tensor
    landing_xy: torch.Tensor
    landing_yaw: torch.Tensor
    grounded: torch.Tensor
    first_landing_xy: torch.Tensor | None = None
    box_touch: torch.Tensor | None = None
    first_touchdown: torch.Tensor | None = None


def _started(x: JumpRewardInputs) -> torch.Tensor:
    return (x.state.time_s > 0).float()


def _takeoff_window(x: JumpRewardInputs) -> torch.Tensor:
    """1 within the take-off window once every foot touched the ground after the command (``x.grounded``)."""
    t = x.state.time_s
    return ((t > 0) & (t < TAKEOFF_WINDOW_S) & x.grounded).float()


def _airborne(x: JumpRewardInputs) -> torch.Tensor:
    return (x.state.foot_contact < 1.0).all(-1).float()


def _speed2(x: JumpRewardInputs) -> torch.Tensor:
    return x.state.base_lin_vel_w.square().sum(-1) + 0.1 * x.state.base_ang_vel_b.square().sum(-1)


def position(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|landing xy - target| / 0.25)`` once the command started."""
    pos_err = torch.linalg.vector_norm(x.landing_xy - x.target_xy, dim=-1)
    return _started(x) * torch.exp(-pos_err / 0.25)


def first_landing(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|first landing xy - target| / 0.25)``, paid once at the touchdown that ends the command's first
    flight (``x.first_touchdown``): the jump itself must reach the target; a hop and a walk to it (what
    ``position`` alone pays for: the policy shipped on 2026-12-07 landed its first hop 0.2 of the way) earn little.
    Once, not per second from the touchdown on: paid per second it bought an early landing, and a hop at the
    command's start collected it in full on every in-place jump (stage 1 fell from 1.0 to 0.13 in 150
    iterations)."""
    err = torch.linalg.vector_norm(x.first_landing_xy - x.target_xy, dim=-1)
    return x.first_touchdown.float() * torch.exp(-torch.nan_to_num(err, nan=1e3) / 0.25)


def ballistic_landing(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|predicted landing xy - target| / 0.25)`` in every step of the command's first flight within the
    take-off window: the base's projectile path from its position and world-frame velocity, ``xy + v_xy t`` with
    ``t`` the fall time back to the settled height ``(v_z + sqrt(v_z^2 + 2 g h)) / g`` (``h`` the base's height
    above it, clipped at 0). It pays for the take-off velocity that carries the jump to the target from the first
    airborne step, where ``first_landing`` pays once at the touchdown: the projectile-motion reward densification of
    Olsen, Pettersen and Alexis (2025, "Towards Quadrupedal Jumping and Walking for Dynamic Locomotion using
    Reinforcement Learning", arXiv:2510.24584). ``[N]``, unitless."""
    if x.first_landing_xy is None:
        return torch.zeros_like(x.state.time_s)
    vel = x.state.base_lin_vel_w
    h = (x.state.base_pos_w[:, 2] - x.settled_height).clamp(min=0.0)
    pred = x.state.base_pos_w[:, :2] + vel[:, :2] * fall_time(vel[:, 2], h).unsqueeze(-1)
    err = torch.linalg.vector_norm(pred - x.target_xy, dim=-1)
    first_flight = torch.isnan(x.first_landing_xy[:, 0]).float()
    return _takeoff_window(x) * _airborne(x) * first_flight * torch.exp(-err / 0.25)


def obstacle_touch(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """1 while a foot touches the obstacle box or stands on it (``x.box_touch``): the jump is over the box."""
    return x.box_touch.float()


def yaw(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|landing yaw - target yaw| / 0.3)`` once the command started."""
    yaw_err = wrap_angle(x.landing_yaw - x.target_yaw).abs()
    return _started(x) * torch.exp(-yaw_err / 0.3)


def flight(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """1 while no foot touches the ground, within the take-off window (after a stance: ``x.grounded``)."""
    return _takeoff_window(x) * _airborne(x)


def height(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """Base height above the settled height [m] (clipped to [0, 0.4]) in flight within the take-off window (standing
    tall on extended legs is not a jump)."""
    h = (x.state.base_pos_w[:, 2] - x.settled_height).clamp(0.0, 0.4)
    return _takeoff_window(x) * _airborne(x) * h


def rise(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """Upward base velocity [m/s] (clipped to [0, 3]) within the take-off window."""
    return _takeoff_window(x) * x.state.base_lin_vel_w[:, 2].clamp(0.0, 3.0)


def land_still(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|v|^2 - 0.1 |omega|^2)`` after :data:`SETTLE_AFTER_S` of command."""
    return (x.state.time_s > SETTLE_AFTER_S).float() * torch.exp(-_speed2(x))


def wait_still(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|v|^2 - 0.1 |omega|^2 - |q - q0|^2)`` while standing (``x.standing``)."""
    pose2 = (x.state.joint_pos - x.state.default_joint_pos).square().sum(-1)
    return x.standing.float() * torch.exp(-_speed2(x) - pose2)


#: m/s, the base speed at which :func:`stand_still` falls to 1/e: twice the stand rule's 0.05 m/s
#: (``success.stand_speed``), because under training's exploration noise (action std about 0.25) a standing robot
#: moves at about 0.1 m/s, where a 0.05 m/s kernel is flat (exp(-4)) and its gradient a tenth of its peak.
STAND_SPEED_SIGMA = 0.1


def stand_still(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-(|v| / STAND_SPEED_SIGMA)^2)`` while standing (``x.standing``), ``v`` the base's linear velocity
    [m/s, world frame]: ``wait_still``'s and ``land_still``'s kernels (``exp(-|v|^2)``) are flat at the standing
    success rule's scale (0.05 m/s costs them 0.25%), so a policy that jitters at 0.05 m/s saw almost no reward
    difference from one that stands still."""
    speed2 = x.state.base_lin_vel_w.square().sum(-1)
    return x.standing.float() * torch.exp(-speed2 / STAND_SPEED_SIGMA ** 2)


def stand_action_rate(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``|a_t - a_{t-1}|^2`` while standing (``x.standing``). Observation noise alone moved a deterministic
    policy's standing actions by 0.5 per step (0.001 without the noise), jittering the base at 0.045 m/s; unlike
    a speed kernel, this term's gradient on the mean action does not fade under the exploration noise (that adds
    a constant ``2 sigma^2`` per joint)."""
    return x.standing.float() * action_rate(x, p)


def stand_feet_air(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """Number of feet out of contact while standing (``x.standing``: a standing robot keeps its feet down)."""
    return x.standing.float() * (x.state.foot_contact < 1.0).float().sum(-1)


def stand_joint_vel(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``|dq|^2`` [rad^2/s^2] while standing (``x.standing``): treading in place moves the joints while the base
    barely moves, which ``wait_still``'s kernel hardly sees (a 0.06 m/s base speed costs it 0.4%)."""
    return x.standing.float() * joint_vel(x, p)


def upright(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``sin(tilt)^2``, the squared horizontal part of the projected gravity."""
    return torch.sin(x.tilt).square()


def action_rate(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``|a_t - a_{t-1}|^2``."""
    return (x.state.last_action - x.last_actions).square().sum(-1)


def torque(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``|tau|^2`` [N^2 m^2]."""
    return x.torque.square().sum(-1)


def joint_vel(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """``|dq|^2`` [rad^2/s^2]."""
    return x.state.joint_vel.square().sum(-1)


def termination(x: JumpRewardInputs, p: dict) -> torch.Tensor:
    """1 on a fall (paid once)."""
    return x.fall.float()


#: Every term but ``success``, which the env sets at time-out from the task's success rule.
STEP_TERMS = {"position": position, "first_landing": first_landing, "ballistic_landing": ballistic_landing,
              "obstacle_touch": obstacle_touch, "yaw": yaw, "flight": flight, "height": height, "rise": rise,
              "land_still": land_still, "wait_still": wait_still, "stand_still": stand_still,
              "stand_feet_air": stand_feet_air, "stand_joint_vel": stand_joint_vel,
              "stand_action_rate": stand_action_rate, "upright": upright,
              "action_rate": action_rate, "torque": torque, "joint_vel": joint_vel, "termination": termination}
TERMS = {**STEP_TERMS, "success": None}


def compute(x: JumpRewardInputs, params: dict) -> dict[str, torch.Tensor]:
    """Every term of :data:`STEP_TERMS` ``{name: [N]}`` (unweighted)."""
    return compute_terms(STEP_TERMS, x, params)
