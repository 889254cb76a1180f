"""``quadrotor-swarm``: drones fly to their goals through a column grid without colliding (rsl-rl ``VecEnv``).

Reference: Huang et al. 2024, "Collision avoidance and navigation for a quadrotor swarm using end-to-end deep RL"
(decentralised shared policy with attention over neighbours and obstacles, obstacle-density curriculum, replay of
collision episodes).

Batch: ``R`` rooms (``env.num_envs``, or the ``num_envs`` argument) of ``M`` drones (``env.drones_per_env``; in
evaluation ``eval.num_drones``). Every drone is one agent of the VecEnv, so ``self.num_envs = R * M`` and every
``[N, ...]`` tensor is drone-major within rooms (row ``r * M + i``). A room's drones start, end and reset together:
``dones`` and ``extras["time_outs"]`` are the room's, repeated for each of its drones.

Observation groups (batch ``[N]``): ``policy`` (:class:`~sim2real.tasks.quadrotor_swarm.observations.
SwarmObservation`, with noise) and ``critic`` (the noise-free policy observation, then the drone's privileged DR
state (:func:`~sim2real.tasks.quadrotor_dr.privileged_state`), the room's obstacle density and the fraction of
its drones at their goals).

Dynamics and DR are those of ``quadrotor-hover`` (:mod:`sim2real.sim.quadrotor`, :mod:`sim2real.tasks.
quadrotor_dr`), one batch of ``N`` drones; after every physics step :func:`~sim2real.tasks.quadrotor_swarm.world.
resolve_collisions` applies the collision model (bounces off drones, columns, walls, floor and ceiling) and a new
drone-drone or column contact kicks the body rates by up to ``env.collision_spin`` rad/s per axis.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from sim2real.curricula import PerEnvLevelCurriculum
from sim2real.curricula.base import EpisodeOutcome, TaskSpace
from sim2real.curricula.driver import HasTaskCurriculum, build_task_curriculum
from sim2real.curricula.schedules import penalty_schedule
from sim2real.tasks.base_env import TaskEnv
from sim2real.curricula.levels import LEVEL_SPACE
from sim2real.curricula.replay import StateReplayBuffer
from sim2real.tasks.quadrotor_dr import HasQuadrotorDrones, QuadrotorDrones
from sim2real.tasks.quadrotor_swarm import rewards as rew
from sim2real.tasks.quadrotor_swarm.checks import check_config
from sim2real.tasks.quadrotor_swarm.goals import sample_starts_and_goals
from sim2real.tasks.quadrotor_swarm.observations import SwarmObservation
from sim2real.tasks.quadrotor_swarm.world import (
    RoomSpec, nearest_column, resolve_collisions, sample_occupancy,
)
from sim2real.tasks.observations import noise_std_vector
from sim2real.tasks.rewards import weighted_reward_sum
from sim2real.tasks.state import RobotState
from sim2real.sim.quadrotor import apply_downwash

#: Room state saved for replay (``[B, M, ...]`` per room, plus room scalars).
REPLAY_KEYS = ("pos_w", "quat_w", "lin_vel_w", "ang_vel_b", "motor_thrust", "goal_w", "occupied", "step", "density",
               "num_visible")
#: m: a drone succeeds when it ends this close to its goal without any contact (issue 22's per-drone rule).
DRONE_SUCCESS_TOL = 0.3
#: m/s: a contact-free drone that ends farther than DRONE_SUCCESS_TOL and slower than this stopped short (deadlock).
DEADLOCK_SPEED = 0.1


class QuadrotorSwarmEnv(HasQuadrotorDrones, HasTaskCurriculum, TaskEnv):
    """Batched quadrotor swarm task (see the module docstring).

    Args:
        cfg: resolved task config (``tasks/quadrotor_swarm/config.yaml``).
        num_envs: number of rooms (overrides ``cfg["env"]["num_envs"]``).
        device: torch device of every tensor.
        eval_mode: held-out setting: ``eval.num_drones`` drones per room at obstacle density ``eval.density`` with
            every neighbour slot visible, full penalty weights, no replay, no curriculum updates.

    Raises:
        ConfigError: a config value out of range (:mod:`sim2real.tasks.quadrotor_swarm.checks`).
        ValueError: the robot is not a quadrotor.
    """

    def __init__(self, cfg: dict, num_envs: int | None = None, device: str = "cpu", eval_mode: bool = False):
        check_config(cfg)
        self.cfg = cfg
        ecfg, ocfg = cfg["env"], cfg["observations"]
        self.device = device
        self.robot = cfg["robot"]
        if self.robot.get("kind") != "quadrotor":
            raise ValueError(f"task quadrotor-swarm needs a quadrotor robot, got '{self.robot.get('name')}'")
        self.eval_mode = eval_mode
        self.num_rooms = int(num_envs or ecfg["num_envs"])
        self.drones_per_room = int(cfg["eval"]["num_drones"] if eval_mode else ecfg["drones_per_env"])
        r, m = self.num_rooms, self.drones_per_room
        self.num_envs = n = r * m
        self.sim_dt = float(ecfg["sim_dt"])
        self.decimation = int(ecfg["decimation"])
        self.control_dt = self.sim_dt * self.decimation
        self.max_episode_length = int(round(ecfg["episode_length_s"] / self.control_dt))
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=device)

        self.room = RoomSpec.from_config(cfg["world"])
        self.centers = self.room.cell_centers(device)
        self.occupied = torch.zeros(r, self.room.num_cells, dtype=torch.bool, device=device)
        self.density = torch.zeros(r, device=device)

        self.drones = QuadrotorDrones(self.robot, ecfg["action_interface"], n, self.sim_dt, cfg["domain_rand"], device)
        self.action_term, self.dyn, self.nominal = self.drones.action_term, self.drones.dyn, self.drones.nominal
        self.latency = self.drones.latency
        self.num_actions = self.action_term.num_actions
        self.obs = SwarmObservation(list(ocfg["policy"]), self.num_actions, int(ocfg["num_neighbors"]), self.room,
                                    int(ocfg["sdf_size"]), float(ocfg["sdf_resolution"]), float(ocfg["sdf_clip"]))
        self.num_visible = torch.full((r,), self.obs.num_neighbors, dtype=torch.long, device=device)
        # Neighbour noise is added to filled slots only (get_observations); the mask never gets any.
        self._obs_noise_std = noise_std_vector(self.obs.layout(), ocfg["noise"], device,
                                               skip=("neighbor_rel", "neighbor_mask"))
        self._neighbor_noise = float(ocfg["noise"].get("neighbor_rel", 0.0))

        self.goal_w = torch.zeros(n, 3, device=device)
        self.in_tol_steps = torch.zeros(n, dtype=torch.long, device=device)
        self.success_hold_steps = int(round(ecfg["success_hold_s"] / self.control_dt))
        # Contacts of the previous control step (new contacts are counted and penalised once).
        self.prev_pairs = torch.zeros(r, m, m, dtype=torch.bool, device=device)
        self.prev_obstacle = torch.zeros(n, dtype=torch.bool, device=device)
        self.prev_boundary = torch.zeros(n, dtype=torch.bool, device=device)
        self.ep_collisions = torch.zeros(n, device=device)  # drone-drone + column contacts this episode
        self.ep_boundary = torch.zeros(n, device=device)  # floor / wall / ceiling contacts this episode
        self.ep_obstacle = torch.zeros(n, device=device)  # column contacts this episode (also in ep_collisions)

        ccfg = cfg["curriculum"]
        self.curriculum = build_task_curriculum(
            ccfg, self.task_spaces(), r, device, eval_mode=eval_mode,
            trace_steps=int(cfg["train"]["num_steps_per_env"]),
            hand_written=lambda: PerEnvLevelCurriculum.from_config(ccfg, r, device, 1.0 if eval_mode else None))
        self.penalty_schedule = penalty_schedule(ccfg, eval_mode)
        rcfg = cfg["replay"]
        self.replay_enabled = bool(rcfg["enabled"]) and not eval_mode
        self.replay = StateReplayBuffer(int(rcfg["capacity"]), int(rcfg["max_uses"]), device)
        # Snapshots of each room every lookback_s / 2: the older of the two is between lookback_s / 2 and
        # lookback_s before now (or the episode's start).
        self.snapshot_every = max(1, int(round(rcfg["lookback_s"] / 2.0 / self.control_dt)))
        self.snapshots: list[dict[str, torch.Tensor]] = []
        self.replayed = torch.zeros(r, dtype=torch.bool, device=device)
        self.replay_pushed = torch.zeros(r, dtype=torch.bool, device=device)

        self.reward_weights = dict(cfg["rewards"]["weights"])
        self.reward_params = dict(cfg["rewards"]["params"])
        self._init_bookkeeping(n, rew.TERMS, ("success", "at_goal", "collisions", "boundary", "column_contacts",
                                              "pos_error", "final_speed", "duration_s", "replayed"), device)
        all_rooms = torch.arange(r, device=device)
        self._reset_rooms(all_rooms, allow_replay=False)
        self._take_snapshots(all_rooms, force=True)
        if not eval_mode:  # spread the rooms' time-outs over the episode (all rooms would otherwise reset at once)
            start = torch.randint(0, self.max_episode_length, (r,), device=device)
            self.episode_length_buf[:] = start.repeat_interleave(m)

    # --- helpers -------------------------------------------------------------------------------------------
    def room_view(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, ...]`` -> ``[R, M, ...]`` (a view)."""
        return x.view(self.num_rooms, self.drones_per_room, *x.shape[1:])

    def drone_ids(self, rooms: torch.Tensor) -> torch.Tensor:
        """Row indices ``[len(rooms) * M]`` of the drones of ``rooms``."""
        m = self.drones_per_room
        return (rooms.unsqueeze(-1) * m + torch.arange(m, device=self.device)).reshape(-1)

    def robot_state(self) -> RobotState:
        """The current :class:`RobotState` of every drone (views; ``command`` = each drone's goal [m])."""
        d = self.dyn
        return RobotState(d.pos_w, d.quat_w, d.lin_vel_w, d.ang_vel_b, self.actions, self.goal_w)

    def clean_policy_obs(self) -> torch.Tensor:
        """Noise-free policy observations ``[N, D]``."""
        return self.obs.build(self.robot_state(), self.num_rooms, self.centers, self.occupied, self.num_visible)

    def privileged(self) -> torch.Tensor:
        """Privileged critic terms ``[N, 16]``: DR state, room obstacle density, fraction of the room at goal."""
        at_goal = (torch.linalg.vector_norm(self.dyn.pos_w - self.goal_w, dim=-1)
                   < self.cfg["env"]["success_pos_tol"]).float()
        frac = self.room_view(at_goal).mean(-1).repeat_interleave(self.drones_per_room)
        dens = self.density.repeat_interleave(self.drones_per_room)
        return torch.cat((self.drones.privileged(), dens.unsqueeze(-1),
                          frac.unsqueeze(-1)), dim=-1)

    def get_observations(self) -> TensorDict:
        clean = self.clean_policy_obs()
        policy = clean + torch.randn_like(clean) * self._obs_noise_std
        if self._neighbor_noise > 0:
            lay = self.obs.model_layout()
            start, k, f = lay["neighbors"]
            mask = clean[:, lay["mask"][0]:lay["mask"][0] + k].repeat_interleave(f, dim=-1)
            policy[:, start:start + k * f] += torch.randn(self.num_envs, k * f, device=self.device) \
                * self._neighbor_noise * mask
        critic = torch.cat((clean, self.privileged()), dim=-1)
        return TensorDict({"policy": policy, "critic": critic}, batch_size=[self.num_envs], device=self.device)

    # --- stepping ------------------------------------------------------------------------------------------

    def step(self, actions: torch.Tensor):
        ecfg, r, m = self.cfg["env"], self.num_rooms, self.drones_per_room
        self.curriculum.record_step()
        command = self.drones.act(self._finite_actions(actions))
        pairs = torch.zeros(r, m, m, dtype=torch.bool, device=self.device)
        obstacle = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        boundary = torch.zeros_like(obstacle)
        for _ in range(self.decimation):
            if ecfg["downwash"]:
                apply_downwash(self.dyn, self.num_rooms)
            self.dyn.step(self.action_term.apply(command, self.dyn))
            pos, vel, contacts = resolve_collisions(self.room_view(self.dyn.pos_w), self.room_view(self.dyn.lin_vel_w),
                                                    self.centers, self.occupied, self.room, ecfg["restitution"])
            self.dyn.pos_w = pos.reshape(-1, 3)
            self.dyn.lin_vel_w = vel.reshape(-1, 3)
            pairs |= contacts.drone_pairs
            obstacle |= contacts.obstacle.reshape(-1)
            boundary |= (contacts.floor | contacts.wall).reshape(-1)
        new_pairs = pairs & ~self.prev_pairs
        new_drone = new_pairs.sum(-1).reshape(-1).float()  # new drone-drone contacts of each drone
        new_obstacle = (obstacle & ~self.prev_obstacle).float()
        new_boundary = (boundary & ~self.prev_boundary).float()
        self.prev_pairs, self.prev_obstacle, self.prev_boundary = pairs, obstacle, boundary
        kicked = (new_drone > 0) | (new_obstacle > 0)
        if kicked.any() and ecfg["collision_spin"] > 0:
            kick = (2 * torch.rand(self.num_envs, 3, device=self.device) - 1) * ecfg["collision_spin"]
            self.dyn.ang_vel_b = self.dyn.ang_vel_b + kick * kicked.unsqueeze(-1)
        self.ep_collisions += new_drone + new_obstacle
        self.ep_boundary += new_boundary
        self.ep_obstacle += new_obstacle
        self.episode_length_buf += 1
        self.penalty_schedule.advance(self.num_envs)

        state = self.robot_state()
        pos_err = torch.linalg.vector_norm(state.base_pos_w - self.goal_w, dim=-1)
        at_goal = pos_err < ecfg["success_pos_tol"]
        self.in_tol_steps = torch.where(at_goal, self.in_tol_steps + 1, torch.zeros_like(self.in_tol_steps))

        room_pos = self.room_view(state.base_pos_w)
        clearance, normal = nearest_column(room_pos, self.centers, self.occupied, self.room)
        x = rew.SwarmRewardInputs(state, room_pos, clearance.reshape(-1), self.actions, self.last_actions, pos_err,
                                  new_drone, new_obstacle, new_boundary, room_vel_w=self.room_view(state.base_lin_vel_w),
                                  column_normal=normal.reshape(-1, 2))
        terms = rew.compute(x, self.reward_params)
        reward = weighted_reward_sum(terms, self.reward_weights, self.episode_sums, self.control_dt,
                                     once=rew.EVENT_TERMS, scaled=rew.SCHEDULED_PENALTIES,
                                     scale=self.penalty_schedule.value, overall=self.cfg["rewards"]["scale"],
                                     finite=False)

        room_bad = ~self.room_view(self.drones.finite() & ~self.non_finite).all(-1)
        room_time_out = (self.room_view(self.episode_length_buf)[:, 0] >= self.max_episode_length) & ~room_bad
        room_done = room_bad | room_time_out
        dones = room_done.repeat_interleave(m)
        time_outs = room_time_out.repeat_interleave(m)
        extras = {"time_outs": time_outs, "log": {}}
        self._log_non_finite(extras["log"])
        self._push_collision_states(new_drone + new_obstacle)
        done_rooms = room_done.nonzero(as_tuple=False).squeeze(-1)
        if len(done_rooms) > 0:
            self._record_outcome(done_rooms, room_bad[done_rooms], pos_err, extras)
            self._reset_rooms(done_rooms, allow_replay=self.replay_enabled)
        self._take_snapshots(done_rooms)
        extras["log"].update(self.curriculum.log())
        extras["log"].update(self.penalty_schedule.log())
        if self.replay_enabled:
            extras["log"].update(self.replay.log())
        return self._contain_non_finite(self.get_observations(), reward, dones, extras)

    def _abort_group(self, ids: torch.Tensor) -> torch.Tensor:
        """A room's drones reset together: every drone of the rooms of ``ids``."""
        return self.drone_ids(torch.unique(ids // self.drones_per_room))

    def _abort_episodes(self, ids: torch.Tensor, running: torch.Tensor, log: dict) -> None:
        if bool(running.any()):
            self._close_episodes(ids[running], log)
        self._reset_rooms(torch.unique(ids // self.drones_per_room), allow_replay=False)

    def _record_outcome(self, rooms: torch.Tensor, bad: torch.Tensor, pos_err: torch.Tensor, extras: dict) -> None:
        m = self.drones_per_room
        ids = self.drone_ids(rooms)
        log = extras["log"]
        steps = self.room_view(self.episode_length_buf)[rooms, 0].float().clamp_min(1.0)
        duration = steps * self.control_dt  # [B] s
        ret = self._close_episodes(ids, log).view(-1, m).mean(-1)  # [B]: the room's mean drone return
        held = (self.in_tol_steps[ids] >= self.success_hold_steps).view(-1, m)
        at_goal = held.float().mean(-1)  # fraction of each room's drones at their goal
        success = held.all(-1) & ~bad
        collisions = self.ep_collisions[ids].view(-1, m)
        boundary = self.ep_boundary[ids].view(-1, m)
        fresh = ~self.replayed[rooms]
        drone_minutes = m * duration / 60.0
        if fresh.any():
            log["Metrics/success_rate"] = success[fresh].float().mean()
            log["Metrics/at_goal_rate"] = at_goal[fresh].mean()
            log["Metrics/collisions_per_drone_minute"] = collisions[fresh].sum() / drone_minutes[fresh].sum()
            log["Metrics/final_pos_error"] = torch.nan_to_num(pos_err[ids].view(-1, m)[fresh], nan=10.0).mean()
        if self.replayed[rooms].any():
            log["Replay/success_rate"] = success[~fresh].float().mean()
        log["Episode_Termination/unstable"] = bad.float().mean()
        per_drone = {"success": success.float().repeat_interleave(m), "at_goal": held.reshape(-1).float(),
                     "collisions": collisions.reshape(-1), "boundary": boundary.reshape(-1),
                     "column_contacts": self.ep_obstacle[ids], "pos_error": pos_err[ids],
                     "final_speed": torch.linalg.vector_norm(self.dyn.lin_vel_w[ids], dim=-1),
                     "duration_s": duration.repeat_interleave(m),
                     "replayed": self.replayed[rooms].float().repeat_interleave(m)}
        self._record_outcomes(ids, per_drone)
        ccfg = self.cfg["curriculum"]
        promote = (at_goal >= ccfg["promote_at_goal"]) & fresh & ~bad
        if ccfg.get("promote_max_contacts") is not None:  # contact-free flight is part of the skill (issue 22)
            promote &= (collisions + boundary).mean(-1) <= ccfg["promote_max_contacts"]
        demote = ((collisions.mean(-1) >= ccfg["demote_collisions"]) | bad) & fresh
        # Replayed episodes restarted from a stored state, not from what the teacher chose: they do not count.
        self.curriculum.episode_end(rooms[fresh], EpisodeOutcome(promote[fresh], (demote & ~promote)[fresh],
                                                                 score=at_goal[fresh], episode_return=ret[fresh]))
        if not self.eval_mode:  # competence-annealed penalties: the rooms' at-goal fraction (no collision counted)
            self.penalty_schedule.record(at_goal[fresh].tolist())

    # --- resets, replay ------------------------------------------------------------------------------------
    def _room_levels(self, rooms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Obstacle density ``[B]``, visible neighbour slots ``[B]`` and goal-distance fraction ``[B]`` of rooms
        being reset."""
        ccfg, k, b = self.cfg["curriculum"], self.obs.num_neighbors, len(rooms)
        if self.eval_mode and self.curriculum.teacher.name != "fixed":  # (set_fixed_tasks: the levels given)
            ev = self.cfg["eval"]
            return (torch.full((b,), float(ev["density"]), device=self.device),
                    torch.full((b,), k, dtype=torch.long, device=self.device),
                    torch.full((b,), float(ev["goal_fraction"]), device=self.device))
        level = self.curriculum.sample(rooms)[:, 0]
        density = ccfg["density_min"] + level * (ccfg["density_max"] - ccfg["density_min"])
        visible = torch.round(ccfg["neighbors_min"] + level * (k - ccfg["neighbors_min"])).long()
        fraction = ccfg["goal_fraction_min"] + level * (1.0 - ccfg["goal_fraction_min"])
        return density, visible, fraction

    def _reset_rooms(self, rooms: torch.Tensor, allow_replay: bool) -> None:
        self._before_reset(self.drone_ids(rooms))
        b, m = len(rooms), self.drones_per_room
        if b == 0:
            return
        dev = self.device
        ids = self.drone_ids(rooms)
        density, visible, fraction = self._room_levels(rooms)
        starts, goals = sample_starts_and_goals(self.cfg["goals"], b, m, dev)
        # Shorter flights: the room's goal set is translated towards the starts' centroid (which keeps the goals'
        # spacing), by (1 - fraction) of the centroid offset.
        shift = starts.mean(1, keepdim=True) - goals.mean(1, keepdim=True)
        goals = goals + (1.0 - fraction).view(b, 1, 1) * shift
        occupied = sample_occupancy(density, self.room.num_cells) & ~self._cells_near(goals)
        quat = torch.zeros(b, m, 4, device=dev)
        quat[..., 0] = 1.0
        zeros = torch.zeros(b, m, 3, device=dev)
        step = torch.zeros(b, dtype=torch.long, device=dev)
        state = {"pos_w": starts, "quat_w": quat, "lin_vel_w": zeros, "ang_vel_b": zeros.clone(),
                 "motor_thrust": None, "goal_w": goals, "occupied": occupied, "step": step, "density": density,
                 "num_visible": visible}
        hover = self.drones.reset(ids, self.cfg["domain_rand"])  # DR and a hover action history
        state["motor_thrust"] = hover.view(b, m, 4)

        replayed = torch.zeros(b, dtype=torch.bool, device=dev)
        if allow_replay and len(self.replay) > 0:
            replayed = torch.rand(b, device=dev) < self.cfg["replay"]["fraction"]
            count = int(replayed.sum())
            saved = self.replay.sample(count) if count else None
            if saved is not None:
                for key, value in saved.items():
                    state[key][replayed] = value
            else:
                replayed[:] = False
        self.replayed[rooms] = replayed
        self.replay_pushed[rooms] = False

        self.occupied[rooms] = state["occupied"]
        self.density[rooms] = state["density"]
        self.num_visible[rooms] = state["num_visible"]
        self.goal_w[ids] = state["goal_w"].reshape(-1, 3)
        self.dyn.set_state(ids, state["pos_w"].reshape(-1, 3), state["quat_w"].reshape(-1, 4),
                           state["lin_vel_w"].reshape(-1, 3), state["ang_vel_b"].reshape(-1, 3),
                           state["motor_thrust"].reshape(-1, 4))
        self.in_tol_steps[ids] = 0
        self.ep_collisions[ids] = 0.0
        self.ep_boundary[ids] = 0.0
        self.ep_obstacle[ids] = 0.0
        self.prev_pairs[rooms] = False
        self.prev_obstacle[ids] = False
        self.prev_boundary[ids] = False
        self.episode_length_buf[ids] = state["step"].repeat_interleave(m)

    def _cells_near(self, goals: torch.Tensor) -> torch.Tensor:
        """Cells ``[B, C]`` whose column would stand within ``goal_clearance`` of a goal (no column is placed
        there: every goal is reachable)."""
        d = torch.cdist(goals[..., :2], self.centers.unsqueeze(0).expand(goals.shape[0], -1, -1))  # [B, M, C]
        reach = self.room.obstacle_radius + self.room.drone_radius + self.cfg["goals"]["goal_clearance"]
        return (d < reach).any(dim=1)

    def room_state(self, rooms: torch.Tensor) -> dict[str, torch.Tensor]:
        """The replayable state of ``rooms`` (``REPLAY_KEYS``; drone tensors ``[B, M, ...]``)."""
        ids = self.drone_ids(rooms)
        b, m = len(rooms), self.drones_per_room
        d = self.dyn
        return {"pos_w": d.pos_w[ids].view(b, m, 3), "quat_w": d.quat_w[ids].view(b, m, 4),
                "lin_vel_w": d.lin_vel_w[ids].view(b, m, 3), "ang_vel_b": d.ang_vel_b[ids].view(b, m, 3),
                "motor_thrust": d.motor_thrust[ids].view(b, m, 4), "goal_w": self.goal_w[ids].view(b, m, 3),
                "occupied": self.occupied[rooms].clone(),
                "step": self.room_view(self.episode_length_buf)[rooms, 0].clone(),
                "density": self.density[rooms].clone(), "num_visible": self.num_visible[rooms].clone()}

    def _take_snapshots(self, reset_rooms: torch.Tensor, force: bool = False) -> None:
        """Keep two snapshots per room, ``snapshot_every`` control steps apart (rooms just reset: both = now)."""
        if not self.replay_enabled and not force:
            return
        steps = self.room_view(self.episode_length_buf)[:, 0]
        due = (steps % self.snapshot_every) == 0
        if force or not self.snapshots:
            now = self.room_state(torch.arange(self.num_rooms, device=self.device))
            self.snapshots = [now, {k: v.clone() for k, v in now.items()}]
            return
        due[reset_rooms] = True
        rooms = due.nonzero(as_tuple=False).squeeze(-1)
        if len(rooms) == 0:
            return
        now = self.room_state(rooms)
        older, newer = self.snapshots
        fresh = torch.zeros(self.num_rooms, dtype=torch.bool, device=self.device)
        fresh[reset_rooms] = True
        for key in REPLAY_KEYS:
            # Rooms just reset: both snapshots are the new episode's start; others: shift newer -> older.
            older[key][rooms] = torch.where(_bcast(fresh[rooms], now[key]), now[key], newer[key][rooms])
            newer[key][rooms] = now[key]

    def _push_collision_states(self, new_collisions: torch.Tensor) -> None:
        """Store the older snapshot of each room with its first collision of the episode (fresh episodes only)."""
        if not self.replay_enabled or not self.snapshots:
            return
        hit = (self.room_view(new_collisions).sum(-1) > 0) & ~self.replay_pushed & ~self.replayed
        rooms = hit.nonzero(as_tuple=False).squeeze(-1)
        if len(rooms) == 0:
            return
        self.replay_pushed[rooms] = True
        older = self.snapshots[0]
        self.replay.push({k: older[k][rooms] for k in REPLAY_KEYS})

    # --- evaluation and checkpoints ------------------------------------------------------------------------
    @staticmethod
    def summarize_outcomes(outcome: dict[str, torch.Tensor]) -> dict:
        """Held-out metrics of one episode per room (``last_outcome`` tensors ``[N]``, one row per drone).

        Room metrics: ``success_rate`` (rooms with every drone within ``env.success_pos_tol`` of its goal for the
        last ``success_hold_s``), ``at_goal_rate`` (drones doing so). Per drone (issue 22's rule, stricter than
        Huang et al. 2024, who count a drone within 0.5 m, 1.0 m among obstacles, that never collided):
        ``drone_success_rate``, no contact at all in the flight (drone-drone, column, floor, wall, ceiling) and
        within :data:`DRONE_SUCCESS_TOL` of the goal at the end; ``deadlock_rate``, drones with no contact that end
        farther than that and slower than :data:`DEADLOCK_SPEED` (stopped short). Contacts per drone-minute of
        flight: ``contacts_per_drone_minute`` (every kind), ``collisions_per_drone_minute`` (drone-drone and
        column), ``column_contacts_per_drone_minute``, ``boundary_per_drone_minute`` (floor, wall, ceiling).
        ``pos_error_mean`` [m]; ``score`` (what picks ``best.pt``)."""
        minutes = outcome["duration_s"].sum().clamp_min(1e-9) / 60.0
        err = torch.nan_to_num(outcome["pos_error"], nan=10.0)
        success = float(outcome["success"].mean())
        collisions = float(outcome["collisions"].sum() / minutes)
        each = outcome["collisions"] + outcome["boundary"]  # [N] contacts of every kind per drone
        touched = each > 0
        contacts = float(each.sum() / minutes)
        drone_success = float((~touched & (err < DRONE_SUCCESS_TOL)).float().mean())
        stopped = outcome["final_speed"] < DEADLOCK_SPEED
        deadlock = float((~touched & (err >= DRONE_SUCCESS_TOL) & stopped).float().mean())
        return {
            "success_rate": success,
            "at_goal_rate": float(outcome["at_goal"].mean()),
            "drone_success_rate": drone_success,
            "deadlock_rate": deadlock,
            "contacts_per_drone_minute": contacts,
            "collisions_per_drone_minute": collisions,
            "column_contacts_per_drone_minute": float(outcome["column_contacts"].sum() / minutes),
            "boundary_per_drone_minute": float(outcome["boundary"].sum() / minutes),
            "pos_error_mean": float(err.mean()),
            "score": drone_success + 0.5 * float(outcome["at_goal"].mean()) - 0.01 * contacts,
        }

    # --- curriculum ----------------------------------------------------------------------------------------
    def task_spaces(self) -> dict[str, TaskSpace]:
        """``difficulty``: each room's level in [0, 1] (density, visible neighbours and flight length)."""
        return {"difficulty": LEVEL_SPACE}

    def reset_all(self) -> None:
        rooms = torch.arange(self.num_rooms, device=self.device)
        self._reset_rooms(rooms, allow_replay=False)
        self._take_snapshots(rooms, force=True)

    def curriculum_learning_signal(self, signal: torch.Tensor) -> None:
        """Per-transition signal ``[T, rooms * drones]``; a room's transitions count as one: their mean."""
        self.curriculum.learning_signal(signal.reshape(signal.shape[0], self.num_rooms, -1).mean(-1))

    def curriculum_state_dict(self) -> dict:
        return {"teacher": self.curriculum.state_dict(), "penalty_schedule": self.penalty_schedule.state_dict(),
                "replay": self.replay.state_dict()}

    def load_curriculum_state_dict(self, state: dict) -> None:
        self.curriculum.load_state_dict(state["teacher"] if "teacher" in state else state["levels"])
        self.penalty_schedule.load_state_dict(state["penalty_schedule"])
        if "replay" in state:
            self.replay.load_state_dict(state["replay"])

    def model_cfg(self) -> dict:
        """rsl-rl model configuration of the actor and critic (attention over neighbours and obstacles)."""
        t = self.cfg["train"]
        return {"class_name": "sim2real.policies.attention:SwarmAttentionModel", "layout": self.obs.model_layout(),
                "embed_dim": int(t["embed_dim"]), "num_heads": int(t["num_heads"])}

    def metadata(self) -> dict:
        """What an exported policy of this task must carry (see :mod:`sim2real.policies.artefact.metadata`)."""
        return {
            "task": "quadrotor-swarm",
            "control_period_s": self.control_dt,
            "observation": {"policy": self.obs.layout()},
            "action": self.action_term.metadata(),
            "swarm": self.obs.metadata(),
        }


def _bcast(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool -> broadcastable against ``like`` ``[B, ...]``."""
    return mask.view(-1, *([1] * (like.dim() - 1)))

