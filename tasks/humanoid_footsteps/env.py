"""``humanoid-footsteps``: walking on planned footsteps (rsl-rl ``VecEnv`` on the MuJoCo backend).

After Singh et al., "Learning bipedal walking on planned footsteps for humanoid robots" (JVRC-1 in MuJoCo): the
policy sees only the next two footsteps of a procedurally generated plan (forward, backward, lateral, curved,
turning in place, stepping in place, stairs; :mod:`~sim2real.tasks.humanoid_footsteps.plans`), no reference motion,
and trains under a terrain curriculum (flat -> rough slabs -> stairs of growing height and narrower treads).

Footsteps are time-driven by default (:class:`~sim2real.tasks.humanoid_footsteps.tracker.FootstepTracker`): each
plan step is the swing foot's target for ``gait.step_period`` seconds; with ``gait.advance: arrival`` the next one
follows ``gait.arrival_hold_s`` after a hit, or after ``gait.timeout_periods`` step periods (the hit rate still
divides by the steps of a nominal gait, one per ``gait.step_period``). A step is a *hit* when the target foot's first
real step of its window (at least ``gait.min_swing_s`` in the air and a rise of ``gait.min_clearance`` above its
lift-off height) touches down within ``success.hit_distance`` (xy) and ``success.hit_yaw`` of the target; otherwise
(wrong place, no step) a miss. The placement reward scores the window's first touchdown (clearance not required).
Episodes last ``env.episode_s`` and end early on a fall (pelvis tilt, pelvis height above the ground, body contact,
an unstable simulation).

Observation groups (TensorDict, batch ``[N]``):
  * ``policy``: ``observations.policy`` terms (:mod:`sim2real.tasks.observations`: proprioception, ``gait_clock``,
    ``footstep_targets`` in the heading frame), scaled, with noise;
  * ``critic``: the noise-free policy terms plus privileged state: pelvis height above the feet [m], base linear
    velocity in the body frame [m/s], foot contact forces / 1000 [kN], foot positions relative to the pelvis in
    the heading frame [m] ``[2 x 3]``, terrain difficulty, the progress of the current step window, and the
    randomised parameters (:meth:`~sim2real.tasks.legged_dr.LeggedDomainRandomization.privileged`, including the
    passive joint-damping scale).

Actions ``[N, 12]`` are leg joint position offsets (:class:`~sim2real.tasks.actions.JointPositionAction`), delayed
by the per-episode latency and tracked by PD servos inside MuJoCo; the other joints are held by PD at the robot
config's ``held_joints`` pose.
"""

from __future__ import annotations

import numpy as np
import torch

from sim2real.configs import ConfigError
from sim2real.curricula import StagedLevelCurriculum
from sim2real.curricula.base import EpisodeOutcome, TaskSpace
from sim2real.curricula.driver import build_task_curriculum
from sim2real.curricula.modes import ModeSchedule
from sim2real.curricula.stages import split_difficulty, stage_space
from sim2real.sim.backends import make_legged_backend
from sim2real.sim.rotations import quat_from_yaw, quat_rotate_inverse, tilt_from_quat, yaw_from_quat
from sim2real.tasks.actions import JointPositionAction
from sim2real.tasks.humanoid_footsteps import plans as fp
from sim2real.tasks.humanoid_footsteps import rewards as rew
from sim2real.tasks.humanoid_footsteps.checks import check_config
from sim2real.tasks.humanoid_footsteps.tracker import FootstepTracker, TouchdownCounter
from sim2real.tasks.legged_dr import LeggedDomainRandomization
from sim2real.tasks.legged_env import LeggedTaskEnv
from sim2real.tasks.state import RobotState

OUTCOME_KEYS = ("hits", "steps", "fall", "success", "mode", "difficulty", "stairs")


class HumanoidFootstepsEnv(LeggedTaskEnv):
    """Batched footstep following (see the module docstring).

    Args:
        cfg: resolved task config (``tasks/humanoid_footsteps/config.yaml``).
        num_envs: overrides ``cfg["env"]["num_envs"]``.
        device: torch device of every tensor (the physics runs on the CPU).
        eval_mode: plans of ``eval.modes`` at mode level ``eval.level`` on terrain difficulty
            ``eval.difficulty``, with ``eval.pushes`` scheduled pushes per episode; the curriculum is not updated.
        plans: fixed plans (:class:`~sim2real.tasks.humanoid_footsteps.plans.FootstepPlan`, plan frame), one per
            env (``num_envs`` defaults to their number); steps with z > 0 stand on boxes built under them.
            Each episode then lasts until its plan's last step window has ended, plus 1 s.

    Raises:
        ConfigError: a config value out of range, or a robot config / model that does not fit.
        ValueError: more plans than envs.
        ConfigError: a plan whose raised footsteps need more foothold boxes than ``env.num_terrain_boxes``.
    """

    TASK = "humanoid-footsteps"

    def __init__(self, cfg: dict, num_envs: int | None = None, device: str = "cpu", eval_mode: bool = False,
                 plans: list | None = None):
        check_config(cfg)
        self.cfg, self.device, self.eval_mode = cfg, device, eval_mode
        e, g = cfg["env"], cfg["gait"]
        if plans is not None:
            num_envs = num_envs or len(plans)
            if len(plans) > num_envs:
                raise ValueError(f"{len(plans)} plans for {num_envs} envs")
        self.num_envs = n = int(num_envs or e["num_envs"])
        self.robot = cfg["robot"]
        self.num_boxes = int(e["num_terrain_boxes"])
        self.sim = make_legged_backend(self.robot, n, cfg["sim"], device=device, terrain_boxes=self.num_boxes)
        self.control_dt = self.sim.control_dt
        self.num_plan_steps = int(e["num_plan_steps"])
        self.max_episode_length = int(round(e["episode_s"] / self.control_dt))
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=device)
        self.action_term = JointPositionAction(self.robot)
        self.num_actions = self.action_term.num_actions
        self._init_policy_observations(cfg["observations"])
        self.default_joint_pos = self.sim.default_joint_pos.to(device).expand(n, -1)
        self.standing_height = self.sim.standing_height()
        self._measure_feet()

        self.dr = LeggedDomainRandomization(self.sim, cfg["domain_rand"], self.num_actions, device)
        self.actions = torch.zeros(n, self.num_actions, device=device)
        self.last_actions = torch.zeros(n, self.num_actions, device=device)
        self.step_period, self.swing_fraction = float(g["step_period"]), float(g["swing_fraction"])
        self.tracker = FootstepTracker.from_config(cfg, n, self.num_plan_steps, device)
        plan_cfg = {k: v for k, v in cfg["plans"].items() if k != "modes"}
        self.generator = fp.PlanGenerator(plan_cfg, self.half_width, self.num_plan_steps, self.num_boxes, device)
        weights = torch.tensor([float(cfg["plans"]["modes"].get(m, 0.0)) for m in fp.MODES], device=device)
        self.mode_weights = weights / weights.sum()
        self.eval_modes = torch.tensor([fp.MODES.index(m) for m in cfg["eval"]["modes"]], device=device)
        self.box_centre_w = torch.zeros(n, self.num_boxes, 3, device=device)
        self.box_half = torch.zeros(n, self.num_boxes, 3, device=device)
        self.box_centre_w[..., 2] = -10.0
        self.box_half[:] = 0.01
        self.plan_yaw = torch.zeros(n, device=device)  # [rad] heading of each env's plan and terrain boxes

        # Per-env step bookkeeping: touchdowns, real steps, hits and steps per window (shared with deploy).
        self.touchdown_counter = TouchdownCounter.from_config(cfg, n, device)
        self.prev_foot_pos = torch.zeros(n, 2, 3, device=device)
        self.mode = torch.zeros(n, dtype=torch.long, device=device)
        self.is_stairs = torch.zeros(n, dtype=torch.bool, device=device)
        self.difficulty = torch.zeros(n, device=device)
        # Evaluation's scheduled pushes (eval.pushes per episode): the control step at which each is applied.
        self.num_pushes = int(cfg["eval"]["pushes"]) if eval_mode else 0
        self.push_at = torch.full((n, self.num_pushes), -1, dtype=torch.long, device=device)
        # Fixed plans only: each env's real steps this episode, [(step index, x, y, z, yaw, hit)], and those of its
        # last finished episode.
        self.touchdowns: list[list[tuple]] | None = None
        self.episode_touchdowns: list[list[tuple]] | None = None

        ccfg = cfg["curriculum"]
        self.num_stages = int(ccfg["num_stages"])
        self.curriculum = build_task_curriculum(
            ccfg, self.task_spaces(), n, device, eval_mode=eval_mode,
            trace_steps=int(cfg["train"]["num_steps_per_env"]),
            hand_written=lambda: StagedLevelCurriculum.from_config(
                ccfg, n, device, fixed=cfg["eval"]["difficulty"] if eval_mode else None))
        # The modes sampled in training: plans.modes, or the stages of curriculum.mode_stages (promoted on the hit
        # rate of the modes a stage introduces).
        self.mode_schedule = None
        if ccfg["mode_stages"] and not eval_mode:
            self.mode_schedule = ModeSchedule(fp.MODES, ccfg["mode_stages"], ccfg["mode_promote_at"],
                                              ccfg["mode_window"], device)
        self.reward_weights = dict(cfg["rewards"]["weights"])
        self.reward_params = dict(cfg["rewards"]["params"])
        self._init_bookkeeping(n, rew.TERMS, OUTCOME_KEYS, device)
        self.fixed_plans = None
        if plans is not None:
            self._set_fixed_plans(plans)
        self._state = None
        self._reset_envs(torch.arange(n, device=device))

    def _measure_feet(self) -> None:
        """Foot points of the default pose relative to the pelvis: the plans' standing half width, how far ahead
        of the pelvis the feet's midpoint lies, and the pelvis height above the foot points."""
        import mujoco

        m, i = self.sim.model, self.sim.index
        data = mujoco.MjData(m)
        data.qpos[i.base_qpos:i.base_qpos + 7] = [0.0, 0.0, self.standing_height, 1.0, 0.0, 0.0, 0.0]
        data.qpos[i.joint_qpos] = self.sim.legged.default_pose
        mujoco.mj_kinematics(m, data)
        feet = data.site_xpos[i.foot_sites]          # [2, 3] left, right
        self.half_width = float(abs(feet[0, 1] - feet[1, 1]) / 2)
        self.foot_offset_x = float(feet[:, 0].mean())
        self.nominal_height_above_feet = float(self.standing_height - feet[:, 2].mean())
        self.foot_point_height = float(feet[:, 2].mean())   # foot point above the sole when standing [m]
        self.robot_weight = float(m.body_subtreemass[i.base_body]) * float(np.linalg.norm(m.opt.gravity))  # N

    @property
    def hits(self) -> torch.Tensor:
        """``[N]`` hits of the current episode (:attr:`TouchdownCounter.hits`, the same tensor)."""
        return self.touchdown_counter.hits

    @property
    def steps_done(self) -> torch.Tensor:
        """``[N]`` planned steps whose window closed this episode (:attr:`TouchdownCounter.steps`)."""
        return self.touchdown_counter.steps

    # --- state ---------------------------------------------------------------------------------------------
    def robot_state(self) -> RobotState:
        """The current :class:`RobotState` of every env (policy joint order; command = next two footsteps)."""
        s = self._state
        return RobotState(
            base_pos_w=s["base_pos_w"], base_quat_w=s["base_quat_w"], base_lin_vel_w=s["base_lin_vel_w"],
            base_ang_vel_b=s["base_ang_vel_b"], last_action=self.actions, command=self.tracker.command(),
            joint_pos=s["joint_pos"], joint_vel=s["joint_vel"], default_joint_pos=self.default_joint_pos,
            foot_contact=s["foot_contact"], time_s=self.episode_length_buf.float() * self.control_dt,
            phase=self.tracker.phase())

    def privileged(self, state: RobotState) -> torch.Tensor:
        """Privileged critic state ``[N, 14 + 10 + k]`` (see the module docstring; k optional DR keys)."""
        s = self._state
        yaw = yaw_from_quat(state.base_quat_w)
        c, sn = torch.cos(yaw), torch.sin(yaw)
        rel = s["foot_pos_w"] - state.base_pos_w.unsqueeze(1)
        rel_h = torch.stack((c.unsqueeze(1) * rel[..., 0] + sn.unsqueeze(1) * rel[..., 1],
                             -sn.unsqueeze(1) * rel[..., 0] + c.unsqueeze(1) * rel[..., 1], rel[..., 2]), dim=-1)
        height = state.base_pos_w[:, 2] - s["foot_pos_w"][..., 2].min(-1).values
        return torch.cat((
            height.unsqueeze(-1), quat_rotate_inverse(state.base_quat_w, state.base_lin_vel_w),
            s["foot_contact"] / 1000.0, rel_h.reshape(-1, 6), self.difficulty.unsqueeze(-1),
            self.tracker.t_step.unsqueeze(-1) / self.step_period, self.dr.privileged(),
        ), dim=-1)

    # --- stepping ------------------------------------------------------------------------------------------
    def _step(self, actions: torch.Tensor):
        self.prev_foot_pos = self._state["foot_pos_w"]
        if self.num_pushes:
            self._scheduled_pushes()
        self._act(actions)
        state = self.robot_state()
        e = self.cfg["env"]

        # Touchdowns of the target foot. The reward scores the first touchdown of each step window (any touchdown
        # after min_swing_s in the air: shuffles count, a stepping stone while learning); the hit metric takes the
        # first real step (the foot also rose min_clearance above its lift-off height).
        td = self.touchdown_counter.update(self._state["foot_contact"], self._state["foot_pos_w"],
                                           self._state["foot_yaw_w"], self.tracker.target(), self.control_dt)
        score = td.score
        if self.touchdowns is not None:
            for i in td.step.nonzero(as_tuple=False).squeeze(-1).tolist():
                self.touchdowns[i].append((int(self.tracker.index[i]), *td.pos_w[i].tolist(), float(td.yaw_w[i]),
                                           bool(td.hit[i])))

        # Falls.
        body_contact = (self._state["body_contact"] > e["body_contact_force"]).any(-1)
        tilt = tilt_from_quat(state.base_quat_w)
        ground = fp.height_at(state.base_pos_w[:, None, :2], self.box_centre_w, self.box_half,
                              self.plan_yaw).squeeze(1)
        low = state.base_pos_w[:, 2] - ground < e["termination_height"]
        fall = body_contact | (tilt > e["termination_tilt"]) | low | self.sim.unstable.to(self.device) | self.non_finite

        tr, st = self.tracker, self._state
        x = rew.FootstepRewardInputs(
            state, st["foot_pos_w"], st["foot_contact"], self.prev_foot_pos, tr.target(), tr.support(), tr.t_step,
            tr.step_period, self.swing_fraction, self.robot_weight, self.foot_point_height,
            self.nominal_height_above_feet, self.foot_offset_x, self.control_dt,
            self.sim.joint_torque().to(self.device), self.actions, self.last_actions, score, fall)
        terms = rew.compute(x, self.reward_params)
        reward = self._weighted_reward(terms, rew.ONCE)

        # Close the windows that ended: count the real plan steps and their hits; the next step is the target.
        self.touchdown_counter.advance(self.tracker, self.control_dt)

        if self.fixed_plans is not None:  # each plan's own length: its last window, then 1 s
            time_out = self.episode_length_buf >= self.plan_episode_length
        else:
            time_out = self.episode_length_buf >= self.max_episode_length
        time_out &= ~fall
        dones = fall | time_out
        extras = {"time_outs": time_out, "log": {}}
        self._log_non_finite(extras["log"])
        done_ids = dones.nonzero(as_tuple=False).squeeze(-1)
        if len(done_ids) > 0:
            self._record_outcome(done_ids, fall[done_ids], extras["log"])
            self._reset_envs(done_ids)
        extras["log"].update(self.curriculum.log())
        if self.mode_schedule is not None:
            extras["log"].update(self.mode_schedule.log())
        extras["log"]["Metrics/unstable_worlds"] = float(self.sim.num_unstable)
        return self.get_observations(), reward, dones, extras

    def _scheduled_pushes(self) -> None:
        """Evaluation's pushes: each env whose step count reaches one of its ``push_at`` steps gets a base velocity
        impulse of ``eval.push_velocity`` [m/s] in a uniformly random horizontal direction (world frame)."""
        due = self.push_at == self.episode_length_buf.unsqueeze(-1)
        ids = due.any(-1).nonzero(as_tuple=False).squeeze(-1)
        if len(ids) == 0:
            return
        count = due[ids].sum(-1, keepdim=True).float()  # two pushes drawn for the same step add up
        angle = 2 * torch.pi * torch.rand(len(ids), device=self.device)
        v = torch.zeros(len(ids), 3, device=self.device)
        v[:, 0], v[:, 1] = torch.cos(angle), torch.sin(angle)
        self.sim.push(ids, v * float(self.cfg["eval"]["push_velocity"]) * count)

    def _record_outcome(self, ids, fall, log) -> None:
        ret = self._close_episodes(ids, log)
        hits, steps = self.hits[ids], self.steps_done[ids]
        rate = hits / steps.clamp_min(1.0)
        success = ~fall & (steps > 0) & (rate >= self.cfg["success"]["episode_hit_rate"])
        out = {"hits": hits, "steps": steps, "fall": fall.float(), "success": success.float(),
               "mode": self.mode[ids].float(), "difficulty": self.difficulty[ids],
               "stairs": self.is_stairs[ids].float()}
        self._record_outcomes(ids, out)
        if self.touchdowns is not None:
            for i in ids.tolist():
                self.episode_touchdowns[i] = self.touchdowns[i]
        log["Episode_Termination/fall"] = fall.float().mean()
        log["Metrics/hit_rate"] = hits.sum() / steps.sum().clamp_min(1.0)
        log["Metrics/success_rate"] = success.float().mean()
        on_stairs = self.is_stairs[ids]  # the stairs plans apart (their rises follow the terrain difficulty)
        if on_stairs.any():
            log["Metrics/stairs_hit_rate"] = hits[on_stairs].sum() / steps[on_stairs].sum().clamp_min(1.0)
            log["Metrics/stairs_fall_rate"] = fall[on_stairs].float().mean()
        stage, _ = split_difficulty(self.difficulty[ids], self.num_stages)
        for s in range(self.num_stages):
            mask = stage == s
            if mask.any():
                log[f"Metrics/terrain_stage{s + 1}_hit_rate"] = hits[mask].sum() / steps[mask].sum().clamp_min(1.0)
        self.curriculum.episode_end(ids, EpisodeOutcome(success, fall, score=rate.clamp(0.0, 1.0),
                                                        episode_return=ret))
        if self.mode_schedule is not None and self.fixed_plans is None:
            # (an episode that fell before its first window ended scores 0)
            self.mode_schedule.episode_end(self.mode[ids], rate.clamp(0.0, 1.0))

    # --- reset ---------------------------------------------------------------------------------------------
    def _set_fixed_plans(self, plans: list) -> None:
        steps, lengths = fp.plans_to_tensor(plans, self.num_plan_steps)
        m = len(plans)
        centre = torch.zeros(m, self.num_boxes, 3)
        half = torch.full((m, self.num_boxes, 3), 0.01)
        centre[..., 2] = -10.0
        for i in range(m):  # a foothold box under every raised footstep (plan files carry no terrain)
            real = steps[i, :int(lengths[i])]  # (the padding repeats the last two footsteps)
            raised = sorted({tuple(round(v, 6) for v in real[j, 1:4].tolist())
                             for j in (real[:, 3] > 1e-4).nonzero(as_tuple=False).squeeze(-1).tolist()})
            if len(raised) > self.num_boxes:
                name = plans[i].name or f"plan {i + 1}"
                raise ConfigError(f"{name} has {len(raised)} raised footsteps (z > 0) and each needs a foothold box: "
                                  f"set env.num_terrain_boxes to at least {len(raised)} "
                                  f"(now {self.num_boxes})")
            for k, (x, y, z) in enumerate(raised):
                centre[i, k] = torch.tensor([x, y, z / 2])
                half[i, k] = torch.tensor([0.18, 0.12, z / 2])  # about a 0.36 x 0.24 m foothold
        self.fixed_plans = (steps.to(self.device), lengths.to(self.device), centre.to(self.device),
                            half.to(self.device))
        windows = (lengths - 1).clamp_min(1).float()  # step 0 is where the support foot stands
        self.plan_episode_length = ((windows * self.step_period + 1.0) / self.control_dt).round().long().to(
            self.device)[torch.arange(self.num_envs).clamp_max(m - 1)]
        self.max_episode_length = int(self.plan_episode_length.max())
        self.touchdowns = [[] for _ in range(self.num_envs)]
        self.episode_touchdowns = [[] for _ in range(self.num_envs)]

    def _reset_envs(self, ids: torch.Tensor) -> None:
        self._before_reset(ids)
        m, dev, e = len(ids), self.device, self.cfg["env"]
        self.dr.randomise(ids)
        x = self.curriculum.sample(ids)[:, 0]
        self.difficulty[ids] = x
        stage, level = split_difficulty(x, self.num_stages)
        rough = torch.where(stage == 0, level, torch.ones_like(level))
        stairs_difficulty = torch.where(stage == 1, level, torch.zeros_like(level))
        lengths = None
        if self.fixed_plans is not None:
            steps, lengths_all, centre, half = self.fixed_plans
            rows = ids.clamp_max(len(steps) - 1)
            plan_steps, lengths = steps[rows], lengths_all[rows]
            box_centre, box_half = centre[rows], half[rows]
            modes = torch.full((m,), -1, dtype=torch.long, device=dev)
            stairs = torch.zeros(m, dtype=torch.bool, device=dev)
        else:
            if self.eval_mode:
                modes = self.eval_modes[torch.randint(len(self.eval_modes), (m,), device=dev)]
                mode_level = torch.full((m,), float(self.cfg["eval"]["level"]), device=dev)
            else:
                weights = self.mode_weights if self.mode_schedule is None else self.mode_schedule.weights()
                modes = torch.multinomial(weights, m, replacement=True)
                mode_level = torch.rand(m, device=dev)
            is_stairs = modes == fp.MODES.index("stairs")
            batch = self.generator.sample(modes, mode_level, torch.where(is_stairs, stairs_difficulty, rough))
            plan_steps, box_centre, box_half, stairs = batch.steps, batch.box_centre, batch.box_half, batch.stairs
        self.mode[ids], self.is_stairs[ids] = modes, stairs
        # Spawn: plan origin at the world origin, random heading (rotating the world changes nothing observed).
        yaw = (2 * torch.rand(m, device=dev) - 1) * torch.pi
        origin = torch.zeros(m, 2, device=dev)
        steps_w, centre_w, quat_w = fp.to_world(plan_steps, box_centre, origin, yaw)
        self.tracker.reset(ids, steps_w, lengths)
        self.box_centre_w[ids], self.box_half[ids], self.plan_yaw[ids] = centre_w, box_half, yaw
        self.sim.set_terrain_boxes(ids, centre_w, box_half, quat_w)
        # The pelvis stands foot_offset_x behind the feet's midpoint, on the highest ground under the feet.
        c, s = torch.cos(yaw), torch.sin(yaw)
        pos = torch.zeros(m, 3, device=dev)
        pos[:, 0], pos[:, 1] = -c * self.foot_offset_x, -s * self.foot_offset_x
        feet_xy = torch.stack((-s * self.half_width, c * self.half_width, s * self.half_width,
                               -c * self.half_width), dim=-1).view(m, 2, 2)
        ground = fp.height_at(feet_xy, centre_w, box_half, yaw).max(-1).values
        pos[:, 2] = self.standing_height + ground + e["init_height_offset"]
        noise = (2 * torch.rand(m, self.num_actions, device=dev) - 1) * e["init_joint_noise"]
        self.sim.reset(ids, pos, quat_from_yaw(yaw), self.sim.default_joint_pos.to(dev) + noise)
        self._refresh_state(ids)
        self.prev_foot_pos[ids] = self._state["foot_pos_w"][ids]
        self.actions[ids] = 0.0
        self.last_actions[ids] = 0.0
        self.touchdown_counter.reset(ids, self._state["foot_pos_w"][ids][..., 2])
        self.episode_length_buf[ids] = 0
        if self.num_pushes:  # uniformly random steps in 15-75% of the episode's length
            length = (self.plan_episode_length[ids] if self.fixed_plans is not None
                      else torch.full((m,), self.max_episode_length, device=dev)).float()
            frac = 0.15 + 0.6 * torch.rand(m, self.num_pushes, device=dev)
            self.push_at[ids] = (frac * length.unsqueeze(-1)).long()
        if self.touchdowns is not None:
            for i in ids.tolist():
                self.touchdowns[i] = []

    # --- metrics -------------------------------------------------------------------------------------------
    @staticmethod
    def summarize_outcomes(outcome: dict[str, torch.Tensor]) -> dict:
        """Held-out metrics of one episode per env (``last_outcome`` tensors ``[N]``): ``hit_rate`` (hits over
        planned steps reached, all episodes pooled), ``fall_rate``, ``success_rate`` (episodes with hit rate >=
        ``success.episode_hit_rate`` and no fall), ``score`` (hit rate x (1 - fall rate), for checkpoint ranking: the
        goal table asks for both), and the hit
        and fall rates per plan mode (``<mode>_hit_rate`` / ``<mode>_fall_rate``) and per terrain
        (``flat``/``rough``/``stairs``)."""
        hits, steps, fall = outcome["hits"], outcome["steps"], outcome["fall"]

        def rate(mask):
            return float(hits[mask].sum() / steps[mask].sum().clamp_min(1.0))

        everything = torch.ones_like(fall, dtype=torch.bool)
        out = {"hit_rate": rate(everything), "fall_rate": float(fall.mean()),
               "success_rate": float(outcome["success"].mean()), "steps": int(steps.sum())}
        out["score"] = out["hit_rate"] * (1.0 - out["fall_rate"])  # a checkpoint that hits but falls ranks low
        for k, name in enumerate(fp.MODES):
            mask = outcome["mode"] == k
            if mask.any():
                out[f"{name}_hit_rate"] = rate(mask)
                out[f"{name}_fall_rate"] = float(fall[mask].mean())
        stairs = outcome["stairs"] > 0.5
        for name, mask in (("flat", (outcome["difficulty"] <= 0) & ~stairs),
                           ("rough", (outcome["difficulty"] > 0) & ~stairs), ("stairs", stairs)):
            if mask.any():
                out[f"terrain_{name}_hit_rate"] = rate(mask)
                out[f"terrain_{name}_fall_rate"] = float(fall[mask].mean())
        return out

    # --- rsl-rl checkpoint hooks ----------------------------------------------------------------------------
    def task_spaces(self) -> dict[str, TaskSpace]:
        """``difficulty``: the terrain difficulty x in [0, max_difficulty] (one region per stage)."""
        ccfg = self.cfg["curriculum"]
        return {"difficulty": stage_space(ccfg["num_stages"], ccfg["max_difficulty"])}

    def reset_all(self) -> None:
        self._reset_envs(torch.arange(self.num_envs, device=self.device))

    def curriculum_state_dict(self) -> dict:
        state = {"teacher": self.curriculum.state_dict()}
        if self.mode_schedule is not None:
            state["modes"] = self.mode_schedule.state_dict()
        return state

    def load_curriculum_state_dict(self, state: dict) -> None:
        self.curriculum.load_state_dict(state["teacher"] if "teacher" in state else state["stages"])
        if self.mode_schedule is not None and "modes" in state:
            self.mode_schedule.load_state_dict(state["modes"])

    def metadata(self) -> dict:
        """The shared joint-position policy metadata plus ``gait``: the step period and the standing feet the
        deploy node's footstep input needs (see :mod:`sim2real.deploy.footsteps`)."""
        return {**super().metadata(),
                "gait": {"step_period_s": self.step_period, "swing_fraction": self.swing_fraction,
                         "half_width_m": self.half_width, "foot_offset_x_m": self.foot_offset_x}}
