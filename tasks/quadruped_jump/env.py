"""``quadruped-jump``: reference-free jumping to commanded landing targets (rsl-rl ``VecEnv`` on the MuJoCo backend).

Episode: the robot stands for a draw from ``env.wait_s``, then the jump command starts; the episode lasts
``env.wait_s[1] + env.jump_s`` in all (at least ``env.jump_s`` after the command); the command is active
(observed through ``jump_target`` / ``jump_clock``) for the first :data:`~sim2real.tasks.observations.JUMP_WINDOW_S`
of them, then, with ``env.stand_after_jump``, the robot is told to stand again (rewarded as before the command;
configs saved before the stand command keep the command to the end, as their ``jump_command`` / ``command_time``
observation does). A fraction
``env.stand_prob`` of training episodes has no command at all (it stands throughout); in evaluation every episode
jumps, or none with ``eval.stand_only``. With ``env.stand_anneal`` (training only) the standing grows with the
curriculum's penalty scale ``s`` (``curriculum.penalty_anneal: competence``: from ``penalty_scale_initial`` to 1 as
the measured jump success rises): each episode's stand phase after the command's window lasts ``s`` times its full
length (the episode ends that much earlier) and a fraction ``s * env.stand_prob`` of the episodes stands throughout,
so a policy that cannot jump yet is not paid mostly for standing still; evaluation always runs full episodes.
Success (at the time-out) of a jump = landing xy within the tolerance of the target (the landing pose: the base's
at the command window's end with ``env.stand_after_jump``, so standing after the window is not traded for accuracy;
the final pose without it), yaw within ``success.yaw_tol``, upright,
at least ``env.airborne_min_s`` of flight, a peak base height at least ``success.min_peak_height`` above the
settled standing height, with ``success.first_landing`` the touchdown that ended the first such flight within the
same tolerance (one jump, not a hop and a walk), with ``success.clear_obstacle`` no foot within
:data:`FOOT_BOX_MARGIN_M` of the box, and no fall or body contact (with
``env.takeoff_after_command`` flight and peak count only once every foot touched the ground after the command
started: a hop carried over from before the command is not the jump); of a stand-only
episode = it stood (below). Standing (every step outside an active command) is scored per phase, before the command
(from the reset) and after the window (after the landing): it stood when the phase's mean base speed is below
``success.stand_speed`` [m/s] and no foot stayed out of contact longer than ``success.stand_air_s`` [s] (the
issue's stand row: both from a reset and after a landing, over 10 s in evaluation).

Observation groups (TensorDict, batch ``[N]``):
  * ``policy``: ``observations.policy`` terms (:mod:`sim2real.tasks.observations`), scaled, with noise;
  * ``critic``: the noise-free policy terms plus privileged state: base height [m], base linear velocity in the
    body frame [m/s], foot contacts (0/1), target xy in the current heading frame [m] and yaw error [rad],
    obstacle top above the base's feet [m], and the randomised parameters (friction, mass scale, added mass,
    CoM offset, motor strength, kp/kd scales, latency).

Actions ``[N, J]`` are joint position offsets (:class:`sim2real.tasks.actions.JointPositionAction`), delayed by the
per-episode latency, tracked by PD servos inside MuJoCo (:mod:`sim2real.sim.mujoco_backend`). Rewards:
:mod:`sim2real.tasks.quadruped_jump.rewards`; curriculum: :class:`sim2real.curricula.StagedLevelCurriculum`.
"""

from __future__ import annotations

import numpy as np
import torch

from sim2real.configs import ConfigError
from sim2real.curricula import StagedLevelCurriculum
from sim2real.curricula.base import EpisodeOutcome, TaskSpace
from sim2real.curricula.driver import build_task_curriculum
from sim2real.curricula.schedules import penalty_schedule
from sim2real.curricula.stages import split_difficulty, stage_space
from sim2real.sim.backends import make_legged_backend
from sim2real.sim.rotations import (
    quat_from_yaw, quat_mul, quat_rotate_inverse, tilt_from_quat, wrap_angle, yaw_from_quat,
)
from sim2real.tasks.actions import JointPositionAction
from sim2real.tasks.legged_dr import LeggedDomainRandomization
from sim2real.tasks.legged_env import LeggedTaskEnv
from sim2real.tasks.observations import JUMP_WINDOW_S, jump_active
from sim2real.tasks.quadruped_jump import commands as cmds
from sim2real.tasks.quadruped_jump import rewards as rew
from sim2real.tasks.quadruped_jump.checks import check_config
from sim2real.tasks.quadruped_jump.outcomes import summarize_outcomes
from sim2real.tasks.state import RobotState

#: m, a foot point (the foot geom's centre) this close to the obstacle box counts as touching it: about a Go2-class
#: foot's radius (0.022 m) and a centimetre (``stage3_box_touch_rate``: stepping on the box is not jumping over it).
FOOT_BOX_MARGIN_M = 0.03


class QuadrupedJumpEnv(LeggedTaskEnv):
    """Batched quadruped jumping task (see the module docstring).

    Args:
        cfg: resolved task config (``tasks/quadruped_jump/config.yaml``).
        num_envs: overrides ``cfg["env"]["num_envs"]``.
        device: torch device of every tensor (the physics runs on the CPU).
        eval_mode: the curriculum is fixed at ``cfg["eval"]["difficulty"]`` (one difficulty, or a list: env ``i``
            plays entry ``i % P``, as the selection set of ``eval.selection_difficulties`` does) and not updated.

    Raises:
        ConfigError: a config value out of range, or a robot config / model that does not fit.
    """

    TASK = "quadruped-jump"

    def __init__(self, cfg: dict, num_envs: int | None = None, device: str = "cpu", eval_mode: bool = False):
        check_config(cfg)
        self.cfg, self.device, self.eval_mode = cfg, device, eval_mode
        e = cfg["env"]
        self.num_envs = n = int(num_envs or e["num_envs"])
        self.robot = cfg["robot"]
        self.sim = make_legged_backend(self.robot, n, cfg["sim"], device=device, obstacle=True)
        self.control_dt = self.sim.control_dt
        self.max_episode_length = int(round((e["wait_s"][1] + e["jump_s"]) / self.control_dt))
        #: steps from an episode's start to the latest end of its command's window (the rest of the episode stands)
        self.jump_end_steps = min(self.max_episode_length,
                                  int(round((e["wait_s"][1] + JUMP_WINDOW_S) / self.control_dt)))
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=device)
        # each episode's length [steps]: max_episode_length, or shorter with env.stand_anneal (set at reset)
        self.episode_steps = torch.full((n,), self.max_episode_length, dtype=torch.long, device=device)
        self.action_term = JointPositionAction(self.robot)
        self.num_actions = self.action_term.num_actions
        self._init_policy_observations(cfg["observations"])
        self.default_joint_pos = self.sim.default_joint_pos.to(device).expand(n, -1)
        self.standing_height = self.sim.standing_height()  # feet just touching: the spawn height
        # Where the PD servos hold the nominal robot (they sag under its weight): spawn state and height reference.
        self.settled_height, settled_quat, settled_joints = self.sim.settled_state()
        settled_quat = torch.tensor(settled_quat, dtype=torch.float32, device=device)
        # Keep the sag's pitch/roll, drop its (tiny) yaw: the spawn heading is drawn per episode.
        settled_quat = settled_quat.unsqueeze(0)
        self.settled_tilt_quat = quat_mul(quat_from_yaw(-yaw_from_quat(settled_quat)), settled_quat)
        self.settled_joint_pos = torch.tensor(settled_joints, dtype=torch.float32, device=device)
        self._check_obstacle_clearance(cfg)

        self.dr = LeggedDomainRandomization(self.sim, cfg["domain_rand"], self.num_actions, device)
        self.actions = torch.zeros(n, self.num_actions, device=device)
        self.last_actions = torch.zeros(n, self.num_actions, device=device)

        self.command = torch.zeros(n, 5, device=device)
        self.wait_steps = torch.zeros(n, dtype=torch.long, device=device)
        self.start_xy = torch.zeros(n, 2, device=device)
        self.start_yaw = torch.zeros(n, device=device)
        self.target_xy = torch.zeros(n, 2, device=device)
        self.target_yaw = torch.zeros(n, device=device)
        self.airborne_steps = torch.zeros(n, dtype=torch.long, device=device)
        self.max_airborne_steps = torch.zeros(n, dtype=torch.long, device=device)
        self.peak_height = torch.zeros(n, device=device)
        # What kind of jump it was (the one-jump success rule, the first_landing and obstacle_touch terms, and
        # summarize_outcomes): flight phases of at least env.airborne_min_s since the command started, the base xy
        # at the touchdown that ended the first one (and whether that was this step), and whether a foot came within
        # FOOT_BOX_MARGIN_M of the obstacle box (this step; this episode), placed per episode (centre, half sizes,
        # yaw, as obstacle_box gives them).
        self.flights = torch.zeros(n, dtype=torch.long, device=device)
        self.long_flight = torch.zeros(n, dtype=torch.bool, device=device)
        self.first_landing_xy = torch.full((n, 2), float("nan"), device=device)
        self.box_touched = torch.zeros(n, dtype=torch.bool, device=device)
        self.box_touch_now = torch.zeros(n, dtype=torch.bool, device=device)
        self.first_touchdown_now = torch.zeros(n, dtype=torch.bool, device=device)
        self.box_centre = torch.zeros(n, 3, device=device)
        self.box_half = torch.zeros(n, 3, device=device)
        self.box_yaw = torch.zeros(n, device=device)
        self.body_contact_seen = torch.zeros(n, dtype=torch.bool, device=device)
        self.difficulty = torch.zeros(n, device=device)
        self.stand_only = torch.zeros(n, dtype=torch.bool, device=device)  # this episode never gets a command
        # Standing, per phase (0: before the command, 1: after the command's window): steps, summed base speed
        # [m/s], the longest time any foot stayed out of contact [steps]; and the current air streak [steps].
        self.stand_steps = torch.zeros(n, 2, device=device)
        self.stand_speed_sum = torch.zeros(n, 2, device=device)
        self.stand_air_max = torch.zeros(n, 2, device=device)
        self.stand_air_steps = torch.zeros(n, device=device)
        # The landing: the base's xy [m] and yaw [rad] (world frame) at the command window's end (while the window
        # runs, the current pose); with env.stand_after_jump the landing terms and the success rule score this pose,
        # so a hop after the window cannot buy accuracy.
        self.landing_xy = torch.zeros(n, 2, device=device)
        self.landing_yaw = torch.zeros(n, device=device)
        # Every foot touched the ground since the command started (env.takeoff_after_command): only a take-off
        # from there is the jump (flight, height, rise, peak height); a hop carried over from before earns nothing.
        self.grounded = torch.zeros(n, dtype=torch.bool, device=device)

        ccfg = cfg["curriculum"]
        self.curriculum = build_task_curriculum(
            ccfg, self.task_spaces(), n, device, eval_mode=eval_mode,
            trace_steps=int(cfg["train"]["num_steps_per_env"]),
            hand_written=lambda: StagedLevelCurriculum.from_config(
                ccfg, n, device, fixed=cfg["eval"]["difficulty"] if eval_mode else None))
        self.num_stages = int(ccfg["num_stages"])
        # The standing penalties (rewards.STAND_PENALTIES) grow with measured jump success (curriculum.penalty_anneal).
        self.penalty_schedule = penalty_schedule(ccfg, eval_mode)
        self.reward_weights = dict(cfg["rewards"]["weights"])
        self.reward_params = dict(cfg["rewards"]["params"])
        self.distance_bins = cmds.max_distance_bins(cfg["command"]).to(device)
        self.bin_success = torch.zeros(len(self.distance_bins), device=device)  # EMA success per distance bin
        self.bin_count = torch.zeros(len(self.distance_bins), device=device)
        self._init_bookkeeping(n, rew.TERMS, ("success", "fall", "pos_error", "yaw_error", "peak_height", "distance",
                                              "stage", "stand_only", "stood_before", "stood_after", "flights",
                                              "first_landing", "one_jump", "box_touch"), device)
        self._state = None
        self._reset_envs(torch.arange(n, device=device))

    # --- state ---------------------------------------------------------------------------------------------
    def time_s(self) -> torch.Tensor:
        """Time since the jump command started [s] ``[N]`` (negative while waiting)."""
        return (self.episode_length_buf - self.wait_steps).float() * self.control_dt

    def robot_state(self) -> RobotState:
        """The current :class:`RobotState` of every env (policy joint order)."""
        s = self._state
        return RobotState(
            base_pos_w=s["base_pos_w"], base_quat_w=s["base_quat_w"], base_lin_vel_w=s["base_lin_vel_w"],
            base_ang_vel_b=s["base_ang_vel_b"], last_action=self.actions, command=self.command,
            joint_pos=s["joint_pos"], joint_vel=s["joint_vel"], default_joint_pos=self.default_joint_pos,
            foot_contact=s["foot_contact"], time_s=self.time_s())

    def privileged(self, state: RobotState) -> torch.Tensor:
        """Privileged critic state ``[N, 19 + 3]`` (see the module docstring)."""
        yaw = yaw_from_quat(state.base_quat_w)
        rel = self.target_xy - state.base_pos_w[:, :2]
        c, s = torch.cos(yaw), torch.sin(yaw)
        rel_h = torch.stack((c * rel[:, 0] + s * rel[:, 1], -s * rel[:, 0] + c * rel[:, 1]), dim=-1)
        return torch.cat((
            (state.base_pos_w[:, 2:3] - self.settled_height),
            quat_rotate_inverse(state.base_quat_w, state.base_lin_vel_w),
            (state.foot_contact > 1.0).float(),
            rel_h, wrap_angle(self.target_yaw - yaw).unsqueeze(-1),
            self.command[:, 3:4],
            self.dr.privileged(),
        ), dim=-1)

    # --- stepping ------------------------------------------------------------------------------------------
    def _step(self, actions: torch.Tensor):
        self._act(actions)
        state = self.robot_state()
        e = self.cfg["env"]

        self._track_grounded(state)
        airborne = (state.foot_contact < 1.0).all(-1) & (self.time_s() > 0) & self.grounded
        self.airborne_steps = torch.where(airborne, self.airborne_steps + 1, torch.zeros_like(self.airborne_steps))
        self.max_airborne_steps = torch.maximum(self.max_airborne_steps, self.airborne_steps)
        self._track_flights(state, airborne)
        started = (self.time_s() > 0) & self.grounded
        self.peak_height = torch.where(started, torch.maximum(self.peak_height, state.base_pos_w[:, 2]),
                                       self.peak_height)
        self._track_standing(state)
        self._track_landing(state)
        body_contact = (self._state["body_contact"] > e["body_contact_force"]).any(-1)
        tilt = tilt_from_quat(state.base_quat_w)
        unstable = self.sim.unstable.to(self.device)
        fall = body_contact | (tilt > e["termination_tilt"]) | (state.base_pos_w[:, 2] < e["termination_height"])
        fall |= unstable | self.non_finite
        time_out = (self.episode_length_buf >= self.episode_steps) & ~fall

        x = rew.JumpRewardInputs(state, self.last_actions, self.target_xy, self.target_yaw, self.settled_height,
                                 self.sim.joint_torque(), fall, tilt, self.standing(), self.landing_xy,
                                 self.landing_yaw, self.grounded, self.first_landing_xy, self.box_touch_now,
                                 self.first_touchdown_now)
        terms = rew.compute(x, self.reward_params)
        stood = self.stood()
        success = time_out & torch.where(self.stand_only, stood[:, 0] == 1.0, self._success(state, tilt))
        terms["success"] = success.float()
        reward = self._weighted_reward(terms, rew.ONCE, rew.STAND_PENALTIES, self.penalty_schedule.value)

        dones = fall | time_out
        extras = {"time_outs": time_out, "log": {}}
        self._log_non_finite(extras["log"])
        done_ids = dones.nonzero(as_tuple=False).squeeze(-1)
        if len(done_ids) > 0:
            self._record_outcome(done_ids, state, success[done_ids], fall[done_ids], extras["log"])
            self._reset_envs(done_ids)
        extras["log"].update(self.curriculum.log())
        extras["log"]["Metrics/max_distance_80"] = self.max_successful_distance()
        extras["log"]["Metrics/unstable_worlds"] = float(self.sim.num_unstable)
        extras["log"].update(self.penalty_schedule.log())
        return self.get_observations(), reward, dones, extras

    def standing(self) -> torch.Tensor:
        """``[N]`` bool: the robot is told to stand now: before its command, and after the command's window
        (:data:`~sim2real.tasks.observations.JUMP_WINDOW_S`) with ``env.stand_after_jump``."""
        t = self.time_s()
        if self.cfg["env"]["stand_after_jump"]:
            return ~jump_active(t)
        return t <= 0  # (as configs before the stand command were trained)

    def _track_standing(self, state: RobotState) -> None:
        """Accumulate this step's standing figures (see the module docstring)."""
        t = self.time_s()
        standing = self.standing()
        phase = (t >= JUMP_WINDOW_S).long()  # 0 before the command, 1 after its window
        air = (state.foot_contact < 1.0).any(-1) & standing
        self.stand_air_steps = torch.where(air, self.stand_air_steps + 1, torch.zeros_like(self.stand_air_steps))
        one_hot = torch.nn.functional.one_hot(phase, 2).float() * standing.float().unsqueeze(-1)
        self.stand_steps += one_hot
        self.stand_speed_sum += one_hot * torch.linalg.vector_norm(state.base_lin_vel_w, dim=-1).unsqueeze(-1)
        self.stand_air_max = torch.maximum(self.stand_air_max, one_hot * self.stand_air_steps.unsqueeze(-1))

    def stood(self) -> torch.Tensor:
        """``[N, 2]`` per phase (before the command, after its window): 1 when the robot stood (mean base speed below
        ``success.stand_speed`` and no foot out of contact longer than ``success.stand_air_s``), 0 when it did not,
        NaN when the phase has not begun."""
        s = self.cfg["success"]
        mean_speed = self.stand_speed_sum / self.stand_steps.clamp_min(1.0)
        ok = (mean_speed < s["stand_speed"]) & (self.stand_air_max * self.control_dt <= s["stand_air_s"] + 1e-6)
        return torch.where(self.stand_steps > 0, ok.float(), torch.full_like(mean_speed, float("nan")))

    def _track_grounded(self, state: RobotState) -> None:
        """``grounded``: every foot in contact at some step since the command started (always true without
        ``env.takeoff_after_command``, as configs before it were trained)."""
        if not self.cfg["env"]["takeoff_after_command"]:
            self.grounded[:] = True
            return
        self.grounded |= (self.time_s() > 0) & (state.foot_contact >= 1.0).all(-1)

    def _track_flights(self, state: RobotState, airborne: torch.Tensor) -> None:
        """Count the flight phases of at least ``env.airborne_min_s`` (``flights``), keep the base xy at the
        touchdown that ended the first one (``first_landing_xy``) and note a foot near the obstacle box
        (``box_touched``: a foot point within :data:`FOOT_BOX_MARGIN_M` of the box, about a foot's radius and a
        centimetre: touching it or stepping on it)."""
        long = self.airborne_steps.float() * self.control_dt >= self.cfg["env"]["airborne_min_s"] - 1e-6
        self.flights += (long & ~self.long_flight).long()
        touchdown = self.long_flight & ~airborne & torch.isnan(self.first_landing_xy[:, 0])
        self.first_landing_xy = torch.where(touchdown.unsqueeze(-1), state.base_pos_w[:, :2], self.first_landing_xy)
        self.first_touchdown_now = touchdown
        self.long_flight = long
        present = self.box_half[:, 2] > 0
        self.box_touch_now = torch.zeros_like(present)
        if not bool(present.any()):
            return
        rel = self._state["foot_pos_w"] - self.box_centre.unsqueeze(1)  # [N, F, 3]
        c, s = torch.cos(self.box_yaw).unsqueeze(1), torch.sin(self.box_yaw).unsqueeze(1)
        local = torch.stack((c * rel[..., 0] + s * rel[..., 1], -s * rel[..., 0] + c * rel[..., 1], rel[..., 2]), -1)
        near = (local.abs() <= self.box_half.unsqueeze(1) + FOOT_BOX_MARGIN_M).all(-1).any(-1)
        self.box_touch_now = near & present
        self.box_touched |= self.box_touch_now

    def _track_landing(self, state: RobotState) -> None:
        """Follow the base's pose while the command's window runs and hold it after (``landing_xy``/``_yaw``);
        without ``env.stand_after_jump`` (the command lasts to the end) the pose is always the current one. With
        ``env.hold_first_landing`` the xy is held from the first flight's touchdown on (``first_landing_xy``), so
        the ``position`` term and the success rule score the jump, not a walk after it."""
        follow = self.time_s() < JUMP_WINDOW_S
        if not self.cfg["env"]["stand_after_jump"]:
            follow = torch.ones_like(follow)
        self.landing_xy = torch.where(follow.unsqueeze(-1), state.base_pos_w[:, :2], self.landing_xy)
        if self.cfg["env"]["hold_first_landing"]:  # the jump's own touchdown, not where a walk after it ended
            landed = ~torch.isnan(self.first_landing_xy[:, :1])
            self.landing_xy = torch.where(landed, self.first_landing_xy, self.landing_xy)
        self.landing_yaw = torch.where(follow, yaw_from_quat(state.base_quat_w), self.landing_yaw)

    def _landing_errors(self, state: RobotState) -> tuple[torch.Tensor, torch.Tensor]:
        """``[N]`` landing position error [m] and yaw error [rad] of the landing pose (``_track_landing``)."""
        pos_err = torch.linalg.vector_norm(self.landing_xy - self.target_xy, dim=-1)
        yaw_err = wrap_angle(self.landing_yaw - self.target_yaw).abs()
        return pos_err, yaw_err

    def _position_tol(self) -> torch.Tensor:
        """``[N]`` landing position tolerance [m]: ``success.position_tol`` plus ``position_tol_per_m`` per commanded
        metre."""
        s = self.cfg["success"]
        return s["position_tol"] + s["position_tol_per_m"] * torch.linalg.vector_norm(self.command[:, :2], dim=-1)

    def _first_landing_hit(self) -> torch.Tensor:
        """``[N]`` bool: the touchdown that ended the first flight lies within the tolerance of the target (False
        before any)."""
        first_err = torch.linalg.vector_norm(self.first_landing_xy - self.target_xy, dim=-1)
        return torch.nan_to_num(first_err, nan=1e9) < self._position_tol()

    def _success(self, state: RobotState, tilt: torch.Tensor) -> torch.Tensor:
        s = self.cfg["success"]
        pos_err, yaw_err = self._landing_errors(state)
        tol = self._position_tol()
        flight = self.max_airborne_steps.float() * self.control_dt >= self.cfg["env"]["airborne_min_s"]
        jumped = self.peak_height - self.settled_height >= s["min_peak_height"]
        ok = (pos_err < tol) & (yaw_err < s["yaw_tol"]) & (tilt < s["upright_tilt"]) & flight & jumped
        if s["first_landing"]:  # the first flight's touchdown within the tolerance too: one jump, not a hop and a walk
            ok &= self._first_landing_hit()
        if s["clear_obstacle"]:  # no foot touched the box (FOOT_BOX_MARGIN_M): over it, not onto it
            ok &= ~self.box_touched
        return ok

    def _record_outcome(self, ids, state: RobotState, success, fall, log) -> None:
        ret = self._close_episodes(ids, log)
        pos_err, yaw_err = self._landing_errors(state)
        stage, _ = split_difficulty(self.difficulty[ids], self.num_stages)
        dist = torch.linalg.vector_norm(self.command[ids, :2], dim=-1)
        stood = self.stood()[ids]
        stand_only = self.stand_only[ids]
        # A jump that fell before its stand phase did not stand after landing; a fall while standing fails it.
        no_phase = stand_only | (not self.cfg["env"]["stand_after_jump"])  # no stand after the jump is asked
        stood_after = torch.where(no_phase, torch.full_like(fall, float("nan"), dtype=torch.float32),
                                  torch.where(fall, torch.zeros_like(stood[:, 1]), stood[:, 1]))
        stood_before = torch.where(fall & (self.time_s()[ids] < 0), torch.zeros_like(stood[:, 0]), stood[:, 0])
        # The first landing: the base's distance along the commanded jump at the touchdown that ended the first
        # flight [m] (NaN: no flight); a success landed in one jump when that touchdown was within the tolerance too.
        delta = self.target_xy[ids] - self.start_xy[ids]
        unit = delta / torch.linalg.vector_norm(delta, dim=-1, keepdim=True).clamp_min(1e-6)
        first = self.first_landing_xy[ids]
        one_jump = success & self._first_landing_hit()[ids]
        has_box = self.box_half[ids, 2] > 0
        out = {"success": success.float(), "fall": fall.float(), "pos_error": pos_err[ids], "yaw_error": yaw_err[ids],
               "peak_height": self.peak_height[ids] - self.settled_height, "distance": dist, "stage": stage.float(),
               "stand_only": stand_only.float(), "stood_before": stood_before, "stood_after": stood_after,
               "flights": self.flights[ids].float(), "first_landing": ((first - self.start_xy[ids]) * unit).sum(-1),
               "one_jump": one_jump.float(),
               "box_touch": torch.where(has_box, self.box_touched[ids].float(), torch.full_like(dist, float("nan")))}
        self._record_outcomes(ids, out)
        if stand_only.any():
            log["Metrics/stand_success"] = success[stand_only].float().mean()
        if (~stand_only).any() and torch.isfinite(stood_after).any():
            log["Metrics/stand_after_landing"] = torch.nanmean(stood_after[~stand_only])
        jump = ~stand_only  # the jump figures and the curriculum see the jump episodes only
        ids, success, fall, ret, stage, dist = ids[jump], success[jump], fall[jump], ret[jump], stage[jump], dist[jump]
        pos_err, yaw_err = pos_err[ids], yaw_err[ids]
        out = {"peak_height": self.peak_height[ids] - self.settled_height}
        if len(ids) == 0:
            return
        log["Episode_Termination/fall"] = fall.float().mean()
        log["Metrics/success_rate"] = success.float().mean()
        if not self.eval_mode:
            self.penalty_schedule.record(success.float().tolist())
        log["Metrics/peak_height"] = out["peak_height"].mean()
        for s in range(self.num_stages):
            mask = stage == s
            if mask.any():
                log[f"Metrics/stage{s + 1}_success"] = success[mask].float().mean()
                log[f"Metrics/stage{s + 1}_landing_error"] = pos_err[mask].mean()
        # Success per commanded-distance bin (stage-2 episodes), exponential average over episodes.
        jumps = stage == 1
        if jumps.any():
            b = torch.bucketize(dist[jumps], self.distance_bins).clamp(max=len(self.distance_bins) - 1)
            hits = torch.zeros_like(self.bin_success).index_add_(0, b, success[jumps].float())
            count = torch.zeros_like(self.bin_count).index_add_(0, b, torch.ones_like(b, dtype=torch.float32))
            seen = count > 0
            alpha = 0.05 * count[seen].clamp(max=20)
            rate = hits[seen] / count[seen]
            first = self.bin_count[seen] == 0
            self.bin_success[seen] = torch.where(first, rate, (1 - alpha) * self.bin_success[seen] + alpha * rate)
            self.bin_count += count
        self.curriculum.episode_end(ids, EpisodeOutcome(success, fall | ~success, episode_return=ret))

    def max_successful_distance(self, threshold: float = 0.8) -> float:
        """Upper edge [m] of the longest commanded-distance bin whose success rate is >= ``threshold`` (0 if none)."""
        ok = (self.bin_success >= threshold) & (self.bin_count >= 10)
        return float(self.distance_bins[ok].max()) if ok.any() else 0.0

    # --- reset ---------------------------------------------------------------------------------------------
    def _reset_envs(self, ids: torch.Tensor) -> None:
        self._before_reset(ids)
        m, dev, e = len(ids), self.device, self.cfg["env"]
        self.dr.randomise(ids)
        params = self.curriculum.sample(ids)
        if self.cfg["curriculum"]["space"] == "landing":  # the teacher chose distance and direction (stage 2)
            self.command[ids] = cmds.landing_commands(params)
            self.difficulty[ids] = 1.0 + (params[:, 0] / self.cfg["command"]["distance_max"]).clamp(1e-3, 1.0)
        else:
            x = params[:, 0]
            self.difficulty[ids] = x
            stage, level = split_difficulty(x, self.num_stages)
            self.command[ids] = cmds.sample_commands(stage, level, self.cfg["command"])
        stand_scale = self.stand_scale()
        if self.eval_mode:
            stand_prob = 1.0 if self.cfg["eval"]["stand_only"] else 0.0
        else:
            stand_prob = float(e["stand_prob"]) * stand_scale
        stand_only = torch.rand(m, device=dev) < stand_prob if stand_prob > 0 else \
            torch.zeros(m, dtype=torch.bool, device=dev)  # (no draw: the random stream of a config without them)
        self.stand_only[ids] = stand_only
        self.command[ids] = torch.where(stand_only.unsqueeze(-1), 0.0, self.command[ids])
        yaw = (2 * torch.rand(m, device=dev) - 1) * torch.pi
        start_xy = torch.zeros(m, 2, device=dev)
        self.start_xy[ids], self.start_yaw[ids] = start_xy, yaw
        self.target_xy[ids], self.target_yaw[ids] = cmds.target_world(start_xy, yaw, self.command[ids])
        c = self.cfg["command"]
        centre, half, direction = cmds.obstacle_box(start_xy, yaw, self.command[ids], c["obstacle_width"],
                                                    c["obstacle_near_edge"])
        self.sim.set_obstacle(ids, centre, half, direction)
        self.box_centre[ids], self.box_half[ids], self.box_yaw[ids] = centre, half, direction
        lo, hi = e["wait_s"]
        wait = lo + (hi - lo) * torch.rand(m, device=dev)
        self.wait_steps[ids] = torch.where(stand_only, self.max_episode_length + 1,
                                           (wait / self.control_dt).round().long())
        noise = (2 * torch.rand(m, self.num_actions, device=dev) - 1) * e["init_joint_noise"]
        joint_pos = self.settled_joint_pos + noise
        pos = torch.zeros(m, 3, device=dev)
        pos[:, 2] = self.settled_height + e["init_height_offset"]
        in_flight, vel = self._reference_state_init(ids, stand_only, pos)
        self.sim.reset(ids, pos, quat_mul(quat_from_yaw(yaw), self.settled_tilt_quat.expand(m, 4)), joint_pos,
                       base_lin_vel_w=vel)
        self._refresh_state(ids)
        self.actions[ids] = 0.0
        self.last_actions[ids] = 0.0
        self.airborne_steps[ids] = 0
        self.max_airborne_steps[ids] = 0
        self.flights[ids] = 0
        self.long_flight[ids] = False
        self.first_landing_xy[ids] = float("nan")
        self.box_touched[ids] = False
        self.box_touch_now[ids] = False
        self.first_touchdown_now[ids] = False
        self.grounded[ids] = False
        self.peak_height[ids] = self.settled_height
        self.stand_steps[ids] = 0.0
        self.stand_speed_sum[ids] = 0.0
        self.stand_air_max[ids] = 0.0
        self.stand_air_steps[ids] = 0.0
        self.episode_length_buf[ids] = 0
        self.episode_steps[ids] = self._episode_steps(stand_scale)
        if in_flight is not None:  # the command started at the reset, the take-off behind it
            self.wait_steps[ids] = torch.where(in_flight, 0, self.wait_steps[ids])
            self.grounded[ids] = in_flight

    def _reference_state_init(self, ids: torch.Tensor, stand_only: torch.Tensor, pos: torch.Tensor):
        """Training's in-flight starts (``env.rsi_prob``, :func:`~sim2real.tasks.quadruped_jump.commands.
        flight_start`): raises ``pos`` ``[M, 3]`` in place; returns ``(in_flight [M], base velocity [M, 3])``, or
        ``(None, None)`` when off (``env.rsi_prob`` 0, evaluation: no random draw)."""
        e = self.cfg["env"]
        if self.eval_mode or float(e["rsi_prob"]) <= 0.0:
            return None, None
        d = self.target_xy[ids] - self.start_xy[ids]
        in_flight, vel, dz = cmds.flight_start(d, stand_only, float(e["rsi_prob"]), e["rsi_vz"],
                                               float(e["rsi_height"]))
        pos[:, 2] += dz
        return in_flight, vel

    def _episode_steps(self, stand_scale: float) -> int:
        """Length [steps] of an episode holding ``stand_scale`` of the full standing after the window."""
        return self.jump_end_steps + int(round(stand_scale * (self.max_episode_length - self.jump_end_steps)))

    def _check_obstacle_clearance(self, cfg: dict) -> None:
        """Refuse (ConfigError, one line) an obstacle placement this robot model touches: the box's near face
        (``command.obstacle_near_edge``) must lie beyond the robot's front at the reset, and the shortest obstacle
        jump must land the hind feet beyond the longest box's far face (extents of the model's geoms at the settled
        pose, :func:`robot_extents`). Skipped for configs without the key (the box midway, as they trained)."""
        c = cfg["command"]
        near = c["obstacle_near_edge"]
        if near is None or float(cfg["curriculum"]["max_difficulty"]) <= 2.0:
            return
        front, feet_rear = robot_extents(self.sim)
        if near <= front:
            raise ConfigError(f"config key 'command.obstacle_near_edge': {near} m puts the box against this robot at "
                              f"the reset (its front reaches {front:.3f} m ahead of the base): use more than that")
        far = near + c["obstacle_length"][1]
        if c["obstacle_distance"][0] - feet_rear <= far:
            raise ConfigError(f"config key 'command.obstacle_distance': the shortest obstacle jump "
                              f"({c['obstacle_distance'][0]} m) lands this robot's hind feet ({feet_rear:.3f} m behind "
                              f"the base) short of the longest box's far face ({far:.3g} m)")

    def stand_scale(self) -> float:
        """The share of the full standing a new episode gets (``env.stand_anneal``: the curriculum's penalty scale,
        in ``(0, 1]``; 1 in evaluation, without the key, or without ``env.stand_after_jump``)."""
        e = self.cfg["env"]
        if self.eval_mode or not e["stand_anneal"] or not e["stand_after_jump"]:
            return 1.0
        return float(min(1.0, self.penalty_schedule.value))

    @staticmethod
    def summarize_outcomes(outcome: dict[str, torch.Tensor]) -> dict:
        """Held-out metrics of one episode per env (``last_outcome`` tensors ``[N]``):
        :func:`sim2real.tasks.quadruped_jump.outcomes.summarize_outcomes`."""
        return summarize_outcomes(outcome)

    # --- rsl-rl checkpoint hooks ----------------------------------------------------------------------------
    def task_spaces(self) -> dict[str, TaskSpace]:
        """``difficulty``: x in [0, max_difficulty] of the staged curriculum (one region per stage);
        ``landing``: a stage-2 jump's commanded distance [m] and direction off the heading [rad] (no yaw change, no
        obstacle)."""
        ccfg, c = self.cfg["curriculum"], self.cfg["command"]
        return {"difficulty": stage_space(ccfg["num_stages"], ccfg["max_difficulty"]),
                "landing": TaskSpace(("distance", "direction"), (cmds.entry_distance_min(c), -c["diagonal_max"]),
                                     (c["distance_max"], c["diagonal_max"]), ("m", "rad"), ccfg["bins"])}

    def reset_all(self) -> None:
        self._reset_envs(torch.arange(self.num_envs, device=self.device))

    def curriculum_state_dict(self) -> dict:
        return {"teacher": self.curriculum.state_dict(), "bin_success": self.bin_success.clone(),
                "bin_count": self.bin_count.clone(), "penalty_schedule": self.penalty_schedule.state_dict()}

    def load_curriculum_state_dict(self, state: dict) -> None:
        self.curriculum.load_state_dict(state["teacher"] if "teacher" in state else state["stages"])
        self.bin_success = state["bin_success"].to(self.device)
        self.bin_count = state["bin_count"].to(self.device)
        if "penalty_schedule" in state:  # (absent: a checkpoint saved before it; the schedule starts afresh)
            self.penalty_schedule.load_state_dict(state["penalty_schedule"])
            # episodes begun at construction take the loaded scale's length (env.stand_anneal)
            self.episode_steps[:] = self._episode_steps(self.stand_scale())


def robot_extents(sim) -> tuple[float, float]:
    """How far this robot reaches ahead of its base [m] (any of its geoms) and how far its feet reach behind it [m],
    along its heading, at the pose it settles in on flat ground (``sim.settled_state()``; axis-aligned boxes of
    the geoms' own bounding boxes, so a little more than the geometry)."""
    import mujoco

    from sim2real.sim.mujoco_model import geom_box_corners

    model, index = sim.model, sim.index
    height, quat, joints = sim.settled_state()
    data = mujoco.MjData(model)
    data.qpos[index.base_qpos:index.base_qpos + 7] = [0.0, 0.0, height, *quat]
    data.qpos[index.joint_qpos] = joints
    mujoco.mj_kinematics(model, data)
    root = model.body_rootid[index.base_body]
    heading = data.xmat[index.base_body].reshape(3, 3)[:2, 0]  # the base's x axis, horizontal
    heading = heading / max(float(np.linalg.norm(heading)), 1e-9)

    def along(geoms) -> np.ndarray:  # every corner's coordinate along the heading, base at 0
        out = [geom_box_corners(model, g, data.geom_xpos[g], data.geom_xmat[g]) for g in geoms]
        return (np.concatenate(out)[:, :2] - data.xpos[index.base_body, :2]) @ heading

    robot = [g for g in range(model.ngeom) if model.body_rootid[model.geom_bodyid[g]] == root]
    return float(along(robot).max()), float(-along(index.foot_geoms).min())
