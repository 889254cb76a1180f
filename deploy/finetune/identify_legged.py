"""System identification of a legged robot from a fine-tuning session's recordings (``sim2real finetune identify``
on a ``quadruped-jump`` or other legged session): the contact and actuator parameters the reality gap is made of.

The data are those of :mod:`~sim2real.deploy.finetune.identify` (``state.v1``: base position [m] and orientation
(w, x, y, z) in the world frame, linear velocity [m/s] world frame, angular velocity [rad/s] body frame, then the
joint positions [rad] and velocities [rad/s] in policy order: ``[T, 13 + 2 J]``; the executed normalised actions
``[T, J]``). The method is the same batched replay of recorded windows (SimOpt, Chebotar et al. 2019; the
identification stage of ASAP, He et al. 2025), here in batched C MuJoCo (:class:`~sim2real.sim.mujoco_backend.
MujocoBackend`, one world per candidate x window): every window's world is set to the recorded state ``s_t`` (base
pose and twist, joints), given the candidate robot, and stepped ``K`` control steps with the recorded actions
delayed by the candidate latency (``a_{t+j-L}``: the action buffer the task env keeps, whose earlier entries the
recording holds), as joint targets of the task's PD servos (:class:`~sim2real.tasks.actions.JointPositionAction`).
The error against the recorded ``s'_{t+j}`` is taken per state group (base position, attitude as a geodesic angle,
linear and angular velocity, joint positions, joint velocities), each divided by the nominal robot's median error in
that group, and a window costs ``log(1 + sum)``: a few windows no candidate replays (a random push, a chaotic
landing) must not steer the fit.

Parameters: the floor's sliding friction coefficient (``domain_rand.friction``, ground and feet), the motor strength
(``motor_strength``: scales the PD torque and its limit), the floor's contact time constant (``floor_timeconst``
[s], MuJoCo's ``solref[0]``; a compliant floor is the effect the jump's training DR never varies), searched in logs;
the action latency (``latency_steps`` [control steps]) as a categorical; and, per episode, what a stand-in draws
from its training DR every episode (the PD gain scales ``kp_scale``, ``kd_scale`` and the base's added mass [kg]).
Stages:

1. a CEM (Rubinstein 1999) over ``[log friction, log strength, log timeconst]`` and one latency for the session, each
   iteration on random windows common to its candidates;
2. each episode's latency: every latency in ``0..max_latency`` replayed on every window, the episode keeping the one
   it fits best (a stand-in draws one per episode);
3. ``rounds`` times: a CEM per episode (all episodes in one batch) of its gain scales and added mass, then the
   session's CEM again with each episode's values and latency, then the latencies again;
4. the fit of the nominal and of the identified robot on every window.

Measured (docs/finetuning.md): the motor strength and each episode's latency are recovered; the friction and the
floor's time constant are not under the stand-in's full per-episode DR (the masses of every body and the centre of
mass, which the search leaves at their nominal values, bias them; with that DR off the true friction and floor are
the clear minimum of the same cost). Only ``sim2real.deploy.finetune.identify`` imports this module.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from sim2real.deploy.finetune.identify_data import (
    LEGGED_DR_KEYS, LEGGED_GROUPS, IdentificationError, Identified, LeggedOptions, Trajectories, cem_update,
    replay_windows,
)

#: The search vector: log friction, log motor strength, log floor contact time constant [s].
_NAMES = ("friction", "motor_strength", "floor_timeconst")
#: Where the search starts and may go: (mean, std, low, high) of each log.
_PRIOR = {"friction": (math.log(0.7), 0.8, math.log(0.05), math.log(2.0)),
          "motor_strength": (0.0, 0.3, math.log(0.4), math.log(1.5)),
          "floor_timeconst": (math.log(0.02), 0.8, math.log(0.005), math.log(0.2))}
#: MuJoCo's default contact time constant [s] (the nominal floor when the training config keeps the model's own).
MUJOCO_TIMECONST = 0.02


class LeggedReplay:
    """The recorded windows of a legged session, replayed in batched C MuJoCo for (candidate, window) rows.

    Args:
        traj: the session's :class:`Trajectories` (``[T, 13 + 2 J]`` states, ``[T, J]`` actions).
        task_cfg: the base policy's task config (``robot``, ``sim``).
        horizon: control steps per window ``K``; ``max_latency``: the largest latency replayed [control steps].
        starts: the windows' start indices ``[W]`` into ``traj`` (each with ``max_latency`` recorded steps before).
        worlds: MuJoCo worlds of the batch (rows are replayed ``worlds`` at a time).

    Attributes:
        window_episode: ``[W]`` the episode of each window, numbered ``0..E-1``; ``num_episodes``: E;
        ``episode_numbers``: ``[E]`` their episode numbers in the recording.

    Raises:
        IdentificationError: the state width does not match the robot's joints, or the control period differs.
    """

    def __init__(self, traj: Trajectories, task_cfg: dict, horizon: int, max_latency: int, starts: np.ndarray,
                 worlds: int):
        from sim2real.sim.mujoco_backend import MujocoBackend
        from sim2real.tasks.actions import JointPositionAction

        self.term = JointPositionAction(task_cfg["robot"])
        j = self.term.num_actions
        if traj.state.shape[1] != 13 + 2 * j:
            raise IdentificationError(f"a state of this {j}-joint robot has {13 + 2 * j} values, the recording has "
                                      f"{traj.state.shape[1]}")
        sim_cfg = dict(task_cfg["sim"], backend="mujoco")
        self.sim = MujocoBackend(task_cfg["robot"], int(worlds), sim_cfg)
        if abs(self.sim.control_dt - traj.control_dt) > 1e-6:
            raise IdentificationError(f"the recording's control period {traj.control_dt} s differs from the task's "
                                      f"{self.sim.control_dt} s")
        self.horizon, self.max_latency, self.worlds, self.joints = int(horizon), int(max_latency), int(worlds), j
        self.starts = torch.as_tensor(starts, dtype=torch.long)
        self.state = torch.as_tensor(traj.state, dtype=torch.float32)
        self.next_state = torch.as_tensor(traj.next_state, dtype=torch.float32)
        self.command = self.term.to_command(torch.as_tensor(traj.action, dtype=torch.float32))  # [T, J] rad
        self.episode_numbers, self.window_episode = torch.unique(torch.as_tensor(traj.episode[starts]),
                                                                 return_inverse=True)
        self.num_episodes = int(self.window_episode.max()) + 1 if len(starts) else 0

    @property
    def num_windows(self) -> int:
        return len(self.starts)

    def rollout(self, params: torch.Tensor, latency: torch.Tensor, win: torch.Tensor) -> torch.Tensor:
        """Predicted states ``[n, K, 13 + 2 J]`` of ``n`` rows: robot ``params`` ``[n, 6]`` (friction, motor
        strength, floor time constant [s], then the episode's PD gain scales kp and kd and the base's added mass
        [kg]) with ``latency`` ``[n]`` control steps on windows ``win`` ``[n]``."""
        n, k = len(win), self.horizon
        out = torch.empty(n, k, self.state.shape[1])
        for lo in range(0, n, self.worlds):
            hi = min(n, lo + self.worlds)
            out[lo:hi] = self._rollout_batch(params[lo:hi], latency[lo:hi], win[lo:hi])
        return out

    def _rollout_batch(self, params, latency, win) -> torch.Tensor:
        sim, m, k = self.sim, len(win), self.horizon
        ids = torch.arange(m)
        t0 = self.starts[win]
        s0 = self.state[t0]
        j = self.joints
        # the robot first (set_body_mass runs set_const, which may overwrite the worlds' data), then the
        # recorded state
        sim.set_friction(ids, params[:, 0])
        sim.set_pd(ids, params[:, 3], params[:, 4], params[:, 1])
        sim.set_floor_timeconst(ids, params[:, 2])
        sim.set_body_mass(ids, torch.ones(m), params[:, 5], torch.zeros(m, 3))
        sim.reset(ids, s0[:, 0:3], s0[:, 3:7] / s0[:, 3:7].norm(dim=-1, keepdim=True), s0[:, 13:13 + j],
                  s0[:, 13 + j:], s0[:, 7:10], s0[:, 10:13])
        applied = self.command[t0.unsqueeze(-1) + torch.arange(k) - latency.unsqueeze(-1)]  # [m, K, J]
        out = torch.empty(m, k, self.state.shape[1])
        targets = torch.zeros(sim.num_envs, j)
        targets[:] = sim.default_joint_pos
        for step in range(k):
            targets[:m] = applied[:, step]
            sim.step(targets)
            s = sim.state()
            out[:, step] = torch.cat((s["base_pos_w"], s["base_quat_w"], s["base_lin_vel_w"], s["base_ang_vel_b"],
                                      s["joint_pos"], s["joint_vel"]), -1)[:m]
        return out

    def errors(self, pred: torch.Tensor, win: torch.Tensor) -> torch.Tensor:
        """Squared errors ``[n, 6]`` of the predictions ``pred`` ``[n, K, S]`` of windows ``win`` ``[n]``, summed
        over the window's steps, per state group (:data:`LEGGED_GROUPS`); a non-finite prediction gives inf."""
        idx = self.starts[win].unsqueeze(-1) + torch.arange(pred.shape[1])
        target, j = self.next_state[idx], self.joints
        qp = pred[..., 3:7] / torch.linalg.vector_norm(pred[..., 3:7], dim=-1, keepdim=True)
        qt = target[..., 3:7] / torch.linalg.vector_norm(target[..., 3:7], dim=-1, keepdim=True)
        vec = qp[..., :1] * qt[..., 1:] - qt[..., :1] * qp[..., 1:] - torch.cross(qp[..., 1:], qt[..., 1:], dim=-1)
        angle = 2.0 * torch.atan2(torch.linalg.vector_norm(vec, dim=-1), (qp * qt).sum(-1).abs())
        e = target - pred
        sq = torch.stack((e[..., 0:3].pow(2).sum(-1), angle.pow(2), e[..., 7:10].pow(2).sum(-1),
                          e[..., 10:13].pow(2).sum(-1), e[..., 13:13 + j].pow(2).sum(-1),
                          e[..., 13 + j:].pow(2).sum(-1)), -1).sum(1)
        return torch.where(torch.isfinite(sq), sq, torch.full_like(sq, float("inf")))


def _decode(x: torch.Tensor) -> torch.Tensor:
    """Search vectors ``[..., 3]`` (logs) -> physical ``[..., 3]`` (friction, strength, time constant [s]), clamped."""
    lo = torch.tensor([_PRIOR[k][2] for k in _NAMES])
    hi = torch.tensor([_PRIOR[k][3] for k in _NAMES])
    return torch.exp(torch.minimum(torch.maximum(x, lo), hi))


def _decode_episode(y: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
    """Per-episode search vectors ``[..., 3]`` (log kp scale, log kd scale, added mass [kg]) -> physical, clamped to
    ``bounds`` ``[2, 3]`` (the task's training DR ranges, widened)."""
    v = torch.cat((torch.exp(y[..., :2]), y[..., 2:]), -1)
    return torch.minimum(torch.maximum(v, bounds[0]), bounds[1])


def _window_cost(sq: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Robust per-window cost ``[...]``: ``log(1 + sum_g sq_g / scale_g)`` (``scale``: the nominal robot's median
    squared error per group); a window the candidate cannot replay (non-finite) costs as a 1e6 error. The log keeps
    the few windows no candidate replays (a random push, a chaotic landing) from steering the fit."""
    c = (sq / scale).sum(-1)
    return torch.log1p(torch.where(torch.isfinite(c), c, torch.full_like(c, 1e6)))


def identify_legged(traj: Trajectories, task_cfg: dict, options=None, *, log=None) -> Identified:
    """Identify a legged robot (see the module docstring) from its recorded :class:`Trajectories`.

    Args:
        traj: the session's trajectories; task_cfg: the base policy's task config.
        options: :class:`~sim2real.deploy.finetune.identify_data.LeggedOptions` (defaults: the docs' example).
        log: a ``print``-like callable for progress lines (None: quiet).

    Raises:
        IdentificationError: fewer than ``min_windows`` replayable windows, or a state/period mismatch.
    """
    opts = options or LeggedOptions()
    log = log or (lambda *a, **k: None)
    t_start = time.perf_counter()
    gen = torch.Generator().manual_seed(int(opts.seed))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        horizon = max(1, int(round(opts.horizon_s / traj.control_dt)))
        starts = replay_windows(traj, horizon, opts.max_latency, opts.stride, opts.max_windows)
        if len(starts) < opts.min_windows:
            raise IdentificationError(f"only {len(starts)} replayable windows of {horizon} control steps in "
                                      f"{len(traj)} recorded steps (need {opts.min_windows}): record longer")
        replay = LeggedReplay(traj, task_cfg, horizon, opts.max_latency, starts, opts.population * opts.batch_windows)
        return _identify(replay, traj, task_cfg, opts, gen, log, t_start)
    finally:
        torch.set_num_threads(threads)


def _nominal(task_cfg: dict, model_floor: float) -> dict:
    """The nominal robot of the task: the middle of the training DR ranges, the model's own floor time constant
    ``model_floor`` [s] where training keeps it (``floor_timeconst: [0, 0]``), no latency."""
    dr = task_cfg["domain_rand"]
    floor = [float(v) for v in dr.get("floor_timeconst", [0.0, 0.0])]
    return {"friction": float(np.mean(dr["friction"])), "motor_strength": float(np.mean(dr["motor_strength"])),
            "floor_timeconst": float(np.mean(floor)) if max(floor) > 0 else float(model_floor), "latency_steps": 0}


def _episode_bounds(task_cfg: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``(start [3], bounds [2, 3])`` of the per-episode values (kp scale, kd scale, added mass [kg]): the middle of
    the task's training DR ranges, and the ranges widened by half their width (nominal where the task has no key)."""
    dr = task_cfg["domain_rand"]
    rng = [[float(v) for v in dr.get(key, default)] for key, default in
           (("kp_scale", [1.0, 1.0]), ("kd_scale", [1.0, 1.0]), ("base_added_mass", [0.0, 0.0]))]
    r = torch.tensor(rng).T  # [2, 3]
    width = r[1] - r[0]
    return r.mean(0), torch.stack((r[0] - 0.5 * width, r[1] + 0.5 * width))


def _identify(replay: LeggedReplay, traj, task_cfg, opts, gen, log, t_start) -> Identified:
    w_all = torch.arange(replay.num_windows)
    n_ep, ep_of_window = replay.num_episodes, replay.window_episode
    model_floor = float(replay.sim.model.geom_solref[replay.sim.index.ground_geoms[0], 0]) or MUJOCO_TIMECONST
    nominal = _nominal(task_cfg, model_floor)
    ep_start, ep_bounds = _episode_bounds(task_cfg)
    episode_values = ep_start.expand(n_ep, -1).clone()  # [E, 3] kp scale, kd scale, added mass

    def rows(global_values, ep_values):
        """Replay rows: ``global_values`` ``[n, 3]`` and ``ep_values`` ``[n, 3]`` -> ``[n, 6]``."""
        return torch.cat((global_values, ep_values), -1)

    def replay_sq(params, latency, win):
        return replay.errors(replay.rollout(params, latency, win), win)

    nom3 = torch.tensor([[nominal[k] for k in _NAMES]])
    zero_lat = torch.zeros(len(w_all), dtype=torch.long)
    sq_nominal = replay_sq(rows(nom3.expand(len(w_all), -1), episode_values[ep_of_window]), zero_lat, w_all)
    finite = torch.isfinite(sq_nominal).all(-1)
    scale = sq_nominal[finite].median(0).values.clamp_min(1e-12)
    log(f"{replay.num_windows} windows of {replay.horizon} control steps from {n_ep} episodes")

    def search(latency_of_window, mean, std, iterations, label):
        """CEM over the 3 logs (and the session's latency when ``latency_of_window`` is None), the per-episode
        values held."""
        p, b = opts.population, min(opts.batch_windows, replay.num_windows)
        lat_prob = torch.full((opts.max_latency + 1,), 1.0 / (opts.max_latency + 1))
        n_elite = max(2, int(round(opts.elite_frac * p)))
        for it in range(iterations):
            x = mean + std * torch.randn(p, 3, generator=gen)
            x[0] = mean
            win = w_all[torch.randperm(replay.num_windows, generator=gen)[:b]]
            if latency_of_window is None:
                lat = torch.multinomial(lat_prob, p, replacement=True, generator=gen)
                lat_rows = lat.repeat_interleave(b)
            else:
                lat, lat_rows = None, latency_of_window[win].repeat(p)
            params = rows(_decode(x).repeat_interleave(b, 0), episode_values[ep_of_window[win]].repeat(p, 1))
            cost = _window_cost(replay_sq(params, lat_rows, win.repeat(p)).view(p, b, -1), scale).mean(-1)
            mean, std, _ = cem_update(x, cost, mean, std, n_elite)
            if lat is not None:
                counts = torch.bincount(lat[torch.argsort(cost)[:n_elite]], minlength=opts.max_latency + 1).float()
                lat_prob = 0.7 * counts / counts.sum() + 0.3 * lat_prob
            log(f"  {label} {it + 1}/{iterations}: cost {float(cost.min()):.3f}, "
                + ", ".join(f"{k} {v:.3g}" for k, v in zip(_NAMES, _decode(mean).tolist()))
                + (f", latency {int(lat_prob.argmax())}" if lat is not None else ""))
        return mean, std, (int(lat_prob.argmax()) if latency_of_window is None else None)

    def episode_latencies(global_values):
        """Each episode's best latency ``[E]`` at ``global_values`` ``[3]`` (every latency on every window)."""
        lats = torch.arange(opts.max_latency + 1)
        rw, rl = w_all.repeat(len(lats)), lats.repeat_interleave(len(w_all))
        params = rows(global_values.expand(len(rw), -1), episode_values[ep_of_window[rw]])
        cost = _window_cost(replay_sq(params, rl, rw), scale).view(len(lats), -1)
        return torch.zeros(len(lats), n_ep).index_add_(1, ep_of_window, cost).argmin(0)

    def episode_search(global_values, latency_of_window, iterations):
        """CEM per episode (all in one batch) of its kp scale, kd scale and added mass."""
        p, b = opts.episode_population, opts.episode_windows
        counts = torch.bincount(ep_of_window, minlength=n_ep)
        order = torch.argsort(ep_of_window, stable=True)
        first = torch.cumsum(counts, 0) - counts
        y_mean = torch.cat((episode_values[:, :2].log(), episode_values[:, 2:]), -1)
        y_std = torch.tensor([0.1, 0.2, 0.5]).expand(n_ep, -1).clone()
        n_elite = max(2, int(round(opts.elite_frac * p)))
        for _ in range(iterations):
            y = y_mean.unsqueeze(1) + y_std.unsqueeze(1) * torch.randn(n_ep, p, 3, generator=gen)  # [E, P, 3]
            y[:, 0] = y_mean
            pick = (torch.rand(n_ep, b, generator=gen) * counts.unsqueeze(-1)).long()
            win = order[first.unsqueeze(-1) + pick]  # [E, b]
            ep_rows = _decode_episode(y, ep_bounds).unsqueeze(2).expand(-1, -1, b, -1).reshape(-1, 3)
            win_rows = win.unsqueeze(1).expand(-1, p, -1).reshape(-1)
            params = rows(global_values.expand(len(win_rows), -1), ep_rows)
            sq = replay_sq(params, latency_of_window[win_rows], win_rows)
            cost = _window_cost(sq, scale).view(n_ep, p, b).mean(-1)
            y_mean, y_std, _ = cem_update(y, cost, y_mean, y_std, n_elite)
        return _decode_episode(y_mean, ep_bounds)

    mean0 = torch.tensor([_PRIOR[k][0] for k in _NAMES])
    std0 = torch.tensor([_PRIOR[k][1] for k in _NAMES])
    log("stage 1: CEM over the session (friction, strength, floor time constant, one latency)")
    mean, std, lat_global = search(None, mean0, std0, opts.iterations, "iteration")
    episode_latency = episode_latencies(_decode(mean))
    log(f"stage 2: episodes per latency 0..{opts.max_latency}: "
        f"{torch.bincount(episode_latency, minlength=opts.max_latency + 1).tolist()}")
    for rnd in range(opts.rounds):
        episode_values = episode_search(_decode(mean), episode_latency[ep_of_window], opts.episode_iterations)
        log(f"stage 3.{rnd + 1}: per-episode kp, kd scales and added mass (medians "
            + ", ".join(f"{v:.3g}" for v in episode_values.median(0).values.tolist()) + ")")
        mean, std, _ = search(episode_latency[ep_of_window], mean, std.clamp_min(0.05), opts.iterations_refine,
                              f"refine {rnd + 1}")
        episode_latency = episode_latencies(_decode(mean))
    final = _decode(mean)
    latency_of_window = episode_latency[ep_of_window]
    sq_after = replay_sq(rows(final.expand(len(w_all), -1), episode_values[ep_of_window]),
                         latency_of_window, w_all)

    def fit(sq):  # mean robust window cost, relative to the nominal robot's
        return float(_window_cost(sq, scale).mean())

    base_fit = fit(sq_nominal)
    fit_before, fit_after = 1.0, fit(sq_after) / base_fit
    # the identified robot with the medians of the per-episode values and latency in every episode
    medians = episode_values.median(0).values.expand(len(w_all), -1)
    lat_median = torch.full((len(w_all),), int(episode_latency.median()), dtype=torch.long)
    fit_global = fit(replay_sq(rows(final.expand(len(w_all), -1), medians), lat_median, w_all)) / base_fit

    def rms(sq):  # per control step, over the windows every candidate replays finitely
        ok = torch.isfinite(sq).all(-1)
        return {name: float((sq[ok, g].sum() / max(1, int(ok.sum()) * replay.horizon)).sqrt())
                for g, (name, _) in enumerate(LEGGED_GROUPS)}

    values = dict(zip(_NAMES, (float(v) for v in final)))
    ep_lat = episode_latency.tolist()
    values["latency_steps"] = int(np.median(ep_lat)) if ep_lat else int(lat_global)
    dr = task_cfg["domain_rand"]
    training = {key: [float(v) for v in dr[key]] for key in LEGGED_DR_KEYS if key in dr}
    if training.get("floor_timeconst") == [0.0, 0.0]:  # training keeps the model's own floor
        training["floor_timeconst"] = [model_floor, model_floor]
    per_episode = {int(e): {"latency_steps": int(ep_lat[i]), "kp_scale": float(episode_values[i, 0]),
                            "kd_scale": float(episode_values[i, 1]), "base_added_mass": float(episode_values[i, 2]),
                            "windows": int((ep_of_window == i).sum())}
                   for i, e in enumerate(replay.episode_numbers.tolist())}
    counts = {int(v): ep_lat.count(v) for v in sorted(set(ep_lat))}
    k = replay.horizon * len(w_all)
    return Identified(
        task=str(task_cfg.get("task", "")), robot_kind="legged", params=values,
        spread={"latency_steps": [int(min(ep_lat)), int(max(ep_lat))]} if ep_lat else {},
        nominal=nominal, training_range=training, fit_before=fit_before, fit_after=fit_after, fit_global=fit_global,
        rms_before=rms(sq_nominal), rms_after=rms(sq_after), latency_episodes=counts, per_episode=per_episode,
        windows=int(replay.num_windows), episodes=int(n_ep), horizon_steps=int(replay.horizon),
        steps=len(traj), control_dt=float(traj.control_dt), wall_s=time.perf_counter() - t_start,
        method=(f"batched C MuJoCo replay of {replay.num_windows} windows x {replay.horizon} steps ({k} steps); CEM "
                "over friction, motor strength, floor time constant and latency; per-episode latency, PD gain "
                "scales and added mass; robust (log) window cost"),
        dr_keys=list(LEGGED_DR_KEYS), groups=[list(g) for g in LEGGED_GROUPS])
