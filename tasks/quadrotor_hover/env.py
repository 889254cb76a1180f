"""``quadrotor-hover``: reach and hold a goal position from random initial states (rsl-rl ``VecEnv``).

Observation groups (TensorDict, batch ``[N]``):
  * ``policy``: the terms named in ``observations.policy`` (see :mod:`sim2real.tasks.observations`), a term
    listed in ``observations.history_length`` with its values at the last K control steps, with Gaussian noise of
    ``observations.noise``;
  * ``critic``: the noise-free policy terms (their current values only) plus privileged state: mass, inertia and
    max-thrust ratios to nominal, motor time constant [s], rotor thrusts as fractions of max, external force /
    nominal weight, action latency [steps].

Actions ``[N, 4]`` in [-1, 1] go through :class:`sim2real.tasks.actions.QuadrotorAction`, delayed by the
per-episode latency. Rewards and terminations: :mod:`sim2real.tasks.quadrotor_hover.rewards`. Curriculum
(``curriculum.teacher``): by default the initial-state spread grows per env on success
(:class:`PerEnvLevelCurriculum`, task space ``difficulty``); any automatic teacher of :mod:`sim2real.curricula`
may choose the level instead, or choose the start directly (task space ``start``: start distance from the goal [m]
and agitation in [0, 1], the fraction of the full initial speed, tilt and body rates). Penalty weights grow on a
global schedule (:class:`StepSchedule`).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from sim2real.curricula import PerEnvLevelCurriculum, StepSchedule
from sim2real.curricula.base import EpisodeOutcome, TaskSpace
from sim2real.curricula.driver import HasTaskCurriculum, build_task_curriculum
from sim2real.tasks.base_env import TaskEnv
from sim2real.curricula.levels import LEVEL_SPACE
from sim2real.sim.rotations import random_quat_within
from sim2real.tasks.observations import ObservationBuilder, noise_std_vector
from sim2real.tasks.quadrotor_dr import ADR_PARAMS, HasQuadrotorDrones, QuadrotorDrones, quadrotor_adr
from sim2real.tasks.quadrotor_hover import rewards as rew
from sim2real.tasks.quadrotor_hover.checks import check_config
from sim2real.tasks.rewards import weighted_reward_sum
from sim2real.tasks.state import RobotState


class QuadrotorHoverEnv(HasQuadrotorDrones, HasTaskCurriculum, TaskEnv):
    """Batched quadrotor hover task.

    Args:
        cfg: resolved task config (see ``tasks/quadrotor_hover/config.yaml``).
        num_envs: overrides ``cfg["env"]["num_envs"]``.
        device: torch device of every tensor.
        eval_mode: the held-out evaluation set: full difficulty (space ``difficulty``) or uniform over the whole
            ``start`` box; the curriculum is not updated.

    Raises:
        ConfigError: a config value out of range (see :mod:`sim2real.tasks.quadrotor_hover.checks`).
    """

    def __init__(self, cfg: dict, num_envs: int | None = None, device: str = "cpu", eval_mode: bool = False):
        check_config(cfg)
        self.cfg = cfg
        ecfg = cfg["env"]
        self.device = device
        self.num_envs = int(num_envs or ecfg["num_envs"])
        self.robot = cfg["robot"]
        if self.robot.get("kind") != "quadrotor":
            raise ValueError(f"task quadrotor-hover needs a quadrotor robot, got '{self.robot.get('name')}'")
        self.sim_dt = float(ecfg["sim_dt"])
        self.decimation = int(ecfg["decimation"])
        self.control_dt = self.sim_dt * self.decimation
        self.max_episode_length = int(round(ecfg["episode_length_s"] / self.control_dt))
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long, device=device)
        self.eval_mode = eval_mode

        self.drones = QuadrotorDrones(self.robot, ecfg["action_interface"], self.num_envs, self.sim_dt,
                                      cfg["domain_rand"], device)
        self.action_term, self.dyn, self.nominal = self.drones.action_term, self.drones.dyn, self.drones.nominal
        self.latency = self.drones.latency
        self.num_actions = self.action_term.num_actions
        self.obs_builder = ObservationBuilder.from_config(cfg["observations"], self.num_actions)
        # The critic sees the current terms without their history: its privileged state holds the rotor thrusts
        # the action history lets the policy infer.
        self.critic_builder = ObservationBuilder.from_config({**cfg["observations"], "history_length": {}},
                                                             self.num_actions)
        self._obs_noise_std = noise_std_vector(self.obs_builder.layout(), cfg["observations"]["noise"], device)

        n = self.num_envs
        self.goal_w = torch.zeros(n, 3, device=device)
        self.in_tol_steps = torch.zeros(n, dtype=torch.long, device=device)
        self.success_hold_steps = int(round(ecfg["success_hold_s"] / self.control_dt))

        ccfg = cfg["curriculum"]
        self.curriculum = build_task_curriculum(
            ccfg, self.task_spaces(), n, device, eval_mode=eval_mode,
            trace_steps=int(cfg["train"]["num_steps_per_env"]),
            hand_written=lambda: PerEnvLevelCurriculum.from_config(ccfg, n, device, 1.0 if eval_mode else None))
        # Automatic domain randomisation (training only: evaluation draws from the full configured ranges).
        use_adr = cfg["domain_rand"]["enabled"] and cfg["domain_rand"]["adr"]["enabled"] and not eval_mode
        self.adr = quadrotor_adr(cfg["domain_rand"], n, device) if use_adr else None
        self.adr_values = torch.zeros(n, len(ADR_PARAMS), device=device)
        self.penalty_schedule = StepSchedule(
            ccfg["penalty_scale_initial"], ccfg["penalty_scale_final"], ccfg["penalty_scale_factor"],
            ccfg["penalty_scale_interval"],
        )
        if eval_mode:
            self.penalty_schedule.steps = 10**15  # full weights: rewards are reported, not learned from
        self.reward_weights = dict(cfg["rewards"]["weights"])
        self.reward_params = dict(cfg["rewards"]["params"])
        # Outcome of each env's last finished episode (for evaluation): success, crash, final errors.
        self._init_bookkeeping(n, rew.TERMS, ("success", "crash", "pos_error", "speed"), device)
        self._reset_envs(torch.arange(n, device=device))

    def task_spaces(self) -> dict[str, TaskSpace]:
        """``difficulty``: the level in [0, 1]; ``start``: start distance from the goal [m] and agitation [0, 1]."""
        bins = self.cfg["curriculum"]["bins"]
        return {"difficulty": TaskSpace(LEVEL_SPACE.names, LEVEL_SPACE.low, LEVEL_SPACE.high, bins=bins[:1]),
                "start": TaskSpace(("distance", "agitation"), (0.0, 0.0), (self.cfg["init"]["pos_radius"], 1.0),
                                   ("m", ""), bins)}

    def reset_all(self) -> None:
        self._reset_envs(torch.arange(self.num_envs, device=self.device))

    def curriculum_plot(self, path):
        """The teacher's task-space plot at ``path``, and with ADR on, its ranges beside it (``<stem>_adr.png``)."""
        from pathlib import Path

        out = self.curriculum.plot(path)
        if self.adr is not None:
            self.adr.plot(Path(path).with_name(f"{Path(path).stem}_adr.png"))
        return out

    # --- state ---------------------------------------------------------------------------------------------
    def robot_state(self) -> RobotState:
        """The current :class:`RobotState` of every env (views, not copies)."""
        d = self.dyn
        # last_action: the action applied in the step just taken (the previous action of the next decision).
        return RobotState(d.pos_w, d.quat_w, d.lin_vel_w, d.ang_vel_b, self.actions, self.goal_w)

    def privileged(self) -> torch.Tensor:
        """Privileged critic state ``[N, 14]`` (see :func:`sim2real.tasks.quadrotor_dr.privileged_state`)."""
        return self.drones.privileged()

    def get_observations(self) -> TensorDict:
        state = self.robot_state()
        clean = self.obs_builder.build(state)
        policy = clean + torch.randn_like(clean) * self._obs_noise_std
        critic = torch.cat((self.critic_builder.build(state) if self.obs_builder.has_history else clean,
                            self.privileged()), dim=-1)
        return TensorDict({"policy": policy, "critic": critic}, batch_size=[self.num_envs], device=self.device)

    # --- stepping ------------------------------------------------------------------------------------------
    def step(self, actions: torch.Tensor):
        self.curriculum.record_step()
        self.obs_builder.advance(self.robot_state())  # the state the policy just acted on joins the history
        command = self.drones.act(self._finite_actions(actions))
        for _ in range(self.decimation):
            self.dyn.step(self.action_term.apply(command, self.dyn))
        self.episode_length_buf += 1
        self.penalty_schedule.advance(self.num_envs)

        state = self.robot_state()
        pos_err = torch.linalg.vector_norm(state.base_pos_w - self.goal_w, dim=-1)
        speed = torch.linalg.vector_norm(state.base_lin_vel_w, dim=-1)
        in_tol = (pos_err < self.cfg["env"]["success_pos_tol"]) & (speed < self.cfg["env"]["success_vel_tol"])
        self.in_tol_steps = torch.where(in_tol, self.in_tol_steps + 1, torch.zeros_like(self.in_tol_steps))

        e = self.cfg["env"]
        crash = (pos_err > e["crash_distance"]) | (state.base_pos_w[:, 2] < e["ground_height"])
        crash |= ~self.drones.finite() | self.non_finite
        time_out = (self.episode_length_buf >= self.max_episode_length) & ~crash

        terms = rew.compute(rew.HoverRewardInputs(state, self.actions, self.last_actions, pos_err, crash),
                            self.reward_params)
        reward = weighted_reward_sum(terms, self.reward_weights, self.episode_sums, self.control_dt,
                                     once=rew.ONCE, scaled=rew.SCHEDULED_PENALTIES,
                                     scale=self.penalty_schedule.value, overall=self.cfg["rewards"]["scale"],
                                     finite=False)

        dones = crash | time_out
        extras = {"time_outs": time_out, "log": {}}
        self._log_non_finite(extras["log"])
        done_ids = dones.nonzero(as_tuple=False).squeeze(-1)
        if len(done_ids) > 0:
            success = time_out[done_ids] & (self.in_tol_steps[done_ids] >= self.success_hold_steps)
            self._record_outcome(done_ids, success, crash[done_ids], pos_err[done_ids], speed[done_ids], extras)
            self._reset_envs(done_ids)
        extras["log"].update(self.curriculum.log())
        extras["log"].update(self.penalty_schedule.log())
        if self.adr is not None:
            extras["log"].update(self.adr.log())
        return self._contain_non_finite(self.get_observations(), reward, dones, extras)

    def _record_outcome(self, ids, success, crash, pos_err, speed, extras) -> None:
        log = extras["log"]
        ret = self._close_episodes(ids, log)
        log["Episode_Termination/crash"] = crash.float().mean()
        log["Episode_Termination/time_out"] = (~crash).float().mean()
        log["Metrics/success_rate"] = success.float().mean()
        log["Metrics/crash_rate"] = crash.float().mean()
        log["Metrics/final_pos_error"] = torch.nan_to_num(pos_err, nan=10.0).mean()
        self._record_outcomes(ids, {"success": success, "crash": crash, "pos_error": pos_err, "speed": speed})
        # Promote on "nearly there" rather than on strict success, so the spread can grow before precision does.
        promote = ~crash & (pos_err < self.cfg["curriculum"]["promote_pos_error"])
        # Graded competence for the teachers: 1 at the goal, 0.37 at twice the success tolerance, 0 on a crash.
        score = torch.where(crash, 0.0, torch.exp(-torch.nan_to_num(pos_err, nan=10.0)
                                                  / (2.0 * self.cfg["env"]["success_pos_tol"])))
        outcome = EpisodeOutcome(promote, crash, score=score, episode_return=ret)
        self.curriculum.episode_end(ids, outcome)
        if self.adr is not None:
            self.adr.update(ids, self.adr_values[ids], outcome)

    def _reset_envs(self, ids: torch.Tensor) -> None:
        self._before_reset(ids)
        n = len(ids)
        dev = self.device
        e, init, dr = self.cfg["env"], self.cfg["init"], self.cfg["domain_rand"]
        lo, hi = torch.tensor(e["goal_min"], device=dev), torch.tensor(e["goal_max"], device=dev)
        self.goal_w[ids] = lo + (hi - lo) * torch.rand(n, 3, device=dev)

        params = self.curriculum.sample(ids)
        direction = torch.randn(n, 3, device=dev)
        direction = direction / torch.linalg.vector_norm(direction, dim=-1, keepdim=True).clamp_min(1e-9)
        if self.cfg["curriculum"]["space"] == "start":  # the teacher chose the start distance and agitation
            radius, spread = params[:, 0], params[:, 1]
        else:  # the level scales the whole spread; the distance is uniform in the ball it gives
            spread = init["spread_min"] + (1.0 - init["spread_min"]) * params[:, 0]
            radius = init["pos_radius"] * spread * torch.rand(n, device=dev).pow(1.0 / 3.0)
        pos = self.goal_w[ids] + direction * radius.unsqueeze(-1)
        pos[:, 2] = pos[:, 2].clamp_min(e["ground_height"] + 0.2)
        vel = (2 * torch.rand(n, 3, device=dev) - 1) * (init["lin_vel"] * spread).unsqueeze(-1)
        quat = random_quat_within(init["tilt"] * spread)
        angvel = (2 * torch.rand(n, 3, device=dev) - 1) * (init["ang_vel"] * spread).unsqueeze(-1)

        values = None
        if self.adr is not None:
            self.adr_values[ids] = self.adr.sample(ids)
            values = dict(zip(ADR_PARAMS, self.adr_values[ids].unbind(-1)))
        hover = self.drones.reset(ids, dr, values)  # DR and a hover action history
        self.dyn.set_state(ids, pos, quat, vel, angvel, hover)
        self.in_tol_steps[ids] = 0
        self.episode_length_buf[ids] = 0
        self.obs_builder.reset(ids)

    @staticmethod
    def summarize_outcomes(outcome: dict[str, torch.Tensor]) -> dict:
        """Held-out metrics of one episode per env (``last_outcome`` tensors ``[N]``): ``success_rate``,
        ``crash_rate``, ``pos_error_mean`` / ``pos_error_median`` [m], ``final_speed_mean`` [m/s], ``score``."""
        err = torch.nan_to_num(outcome["pos_error"], nan=10.0)
        success = float(outcome["success"].mean())
        return {
            "success_rate": success,
            "crash_rate": float(outcome["crash"].mean()),
            "pos_error_mean": float(err.mean()),
            "pos_error_median": float(err.median()),
            "final_speed_mean": float(torch.nan_to_num(outcome["speed"], nan=10.0).mean()),
            "score": success - 1e-3 * float(err.clamp_max(10.0).mean()),
        }

    # --- rsl-rl checkpoint hooks ----------------------------------------------------------------------------
    def curriculum_state_dict(self) -> dict:
        state = {"teacher": self.curriculum.state_dict(), "penalty_schedule": self.penalty_schedule.state_dict()}
        if self.adr is not None:
            state["adr"] = self.adr.state_dict()
        return state

    def load_curriculum_state_dict(self, state: dict) -> None:
        self.curriculum.load_state_dict(state["teacher"] if "teacher" in state else state["levels"])
        self.penalty_schedule.load_state_dict(state["penalty_schedule"])
        if self.adr is not None and "adr" in state:
            self.adr.load_state_dict(state["adr"])

    def metadata(self) -> dict:
        """What an exported policy of this task must carry (see :mod:`sim2real.policies.artefact.metadata`)."""
        return {
            "task": "quadrotor-hover",
            "control_period_s": self.control_dt,
            "observation": {"policy": self.obs_builder.layout()},
            "action": self.action_term.metadata(),
        }
