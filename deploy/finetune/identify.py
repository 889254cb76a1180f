"""System identification from a fine-tuning session's recordings (``sim2real finetune identify``): which robot the
session flew, in the simulator's own parameters.

The data
--------
Every recorded control step (:func:`~sim2real.deploy.finetune.actor.transition_sizes`) carries the executed action
``a_t`` ``[A]`` (normalised, as the robot received it), the robot's state estimate ``s_t`` when the observation was
taken and ``s'_t`` after the step (``state.v1`` / ``next_state.v1``: :func:`~sim2real.tasks.state.state_estimate`,
for the quadrotor ``[13]``: position [m] world frame, orientation (w, x, y, z) body-to-world, linear velocity [m/s]
world frame, angular velocity [rad/s] body frame), its episode and step in the episode. :func:`session_trajectories`
reads them; a session recorded before the state was recorded raises :class:`IdentificationError` (one line).

The method: batched replay of recorded windows (SimOpt, Chebotar et al. 2019, "Closing the Sim-to-Real Loop:
Adapting Simulation Randomization with Real World Experience"; the identification stage of ASAP, He et al. 2025)
-----------------------------------------------------------------------------------------------------------------
A *window* starts at a recorded step ``t`` whose episode has at least ``warmup + max_latency`` steps before it and
``K = round(horizon_s / control_dt)`` steps after it, all recorded without a gap; windows start every ``stride``
steps. For a candidate ``theta`` (the task's DR parameters of the robot, plus what its DR cannot represent) every
window's simulated robot is set to the recorded ``s_t``, its motors to the thrust the recorded commands of the
``warmup`` steps before ``t`` leave them at (first-order lag, exact), and it is rolled ``K`` control steps with the
recorded actions shifted by the candidate latency (``a_{t+j-L}``, as the task env delays them). The error against
the recorded ``s'_{t+j}`` (``j = 0..K-1``) is taken per state group, position [m], attitude (geodesic angle, rad),
linear velocity [m/s], angular velocity [rad/s], and each group is divided by its error under the nominal robot
(so the nominal robot scores 1.0 and each group weighs the same there: unit-free and unit-aware). A constant
external force per episode (the DR's ``ext_force``; on a robot: a wind, an off-centre battery) is profiled out: the
velocity error's least-squares constant acceleration per (candidate, episode) is removed before scoring, and its
size is reported. Thousands of candidate-window rollouts run as one batch of
:class:`~sim2real.sim.quadrotor.QuadrotorDynamics` (one ``[n, ...]`` tensor per state, ``n`` = candidates x
windows).

What the robot has once (mass, each motor's share of the thrust) is told apart from what may change between episodes
(thrust-to-mass and thrust-to-inertia ratios, motor time constant, latency: a stand-in draws them per episode from
its DR, a robot's battery sags between flights): :func:`identify_quadrotor`'s four stages are

1. the cross-entropy method (CEM; Rubinstein 1999) over the whole search vector with one latency for the session
   (a categorical distribution over ``0..max_latency`` control steps), each iteration on random windows common to
   its candidates;
2. a CEM per episode of the per-episode offsets, every episode on its own windows (all episodes in one batch), at
   the latency that fits the session best and its neighbours; each episode keeps its best latency;
3. a gradient polish: the replay is differentiable, and L-BFGS fits the motor shares and each episode's values on
   every window, the latencies held; then the mass, by line search along the valley where each episode's
   thrust-to-mass and thrust-to-inertia ratios stay (only the drag tells the mass: a shallow minimum);
4. the fit of the nominal and of the identified robot on every window.

The robot's values are the medians over the episodes (with at least ``min_episode_windows`` windows) and their
per-episode ranges are reported beside them.

Quadrotor parameters (``theta``), searched in logs of these combinations, which the data fix independently:
``log(thrust / mass)``, ``log(thrust / inertia)``, ``log(mass)``, the four motors' log thrust relative to their
geometric mean (zero-sum; a motor giving 85 % of the others' thrust), ``log(motor_time_constant)``. With the
``motor_thrust`` interface the commands are fractions of the maximum thrust: translation fixes only
thrust-to-mass, rotation thrust-to-inertia; the mass itself is seen only through the body drag (``linear_drag / m``,
known from the robot config), which makes it the least certain value: on a real robot whose drag is not known to
better than the mass, weigh the robot instead.

Reported as the DR keys of the task (``domain_rand.mass_scale`` / ``thrust_scale`` / ``inertia_scale``: scales of
the robot config's mass, maximum motor thrust (of the strongest motor) and inertia; ``motor_time_constant`` [s];
``latency_steps`` [control steps]; ``ext_force`` [N], the per-axis bound of a uniform draw with the profiled
forces' RMS), and what the DR cannot represent: ``motor_thrust_scale`` ``[4]``, each motor's thrust relative to the
strongest (the structured delta-action correction of the identified model: motor ``i`` produces ``scale_i`` times
its command). Measured accuracy and time: ``docs/finetuning.md``.

Legged robots: :mod:`~sim2real.deploy.finetune.identify_legged` (the same windows, replayed in batched C MuJoCo:
friction, motor strength, the floor's contact time constant, latency); :func:`identify` picks by the robot kind.

Only ``sim2real.cli`` (``finetune identify``) and the fine-tuning package use this module; it imports sim/, tasks/,
configs/ and deploy.recording.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from sim2real.deploy.finetune.identify_data import (  # noqa: F401 (re-exported)
    GROUPS, IDENTIFIED_FILE, QUADROTOR_DR_KEYS, READS_STATE_VERSIONS, IdentificationError, Identified, Options,
    Trajectories, session_trajectories, trajectories_from_recording,
)
from sim2real.deploy.finetune.identify_data import cem_update as _cem_update
from sim2real.deploy.finetune.identify_data import replay_windows as _windows

# --- the quadrotor replay ----------------------------------------------------------------------------------------

class QuadrotorReplay:
    """The recorded windows of a quadrotor session, replayed for batches of (candidate robot, window) rows.

    Args:
        traj: the session's :class:`Trajectories` (state layout v1, ``[T, 13]``).
        task_cfg: the base policy's task config (robot, ``env.sim_dt`` / ``decimation`` / ``action_interface``).
        horizon: control steps per window ``K``; ``warmup``, ``max_latency``: see :class:`Options`.
        starts: the windows' start indices ``[W]`` into ``traj``.

    Attributes:
        window_episode: ``[W]`` the episode of each window, numbered ``0..E-1``; ``num_episodes``: E;
        ``episode_numbers``: ``[E]`` their episode numbers in the recording.

    Raises:
        IdentificationError: the recording's control period differs from the task's, or the state is not 13 wide.
    """

    def __init__(self, traj: Trajectories, task_cfg: dict, horizon: int, warmup: int, max_latency: int,
                 starts: np.ndarray):
        from sim2real.sim.quadrotor import QuadrotorParams
        from sim2real.tasks.actions import QuadrotorAction

        env = task_cfg["env"]
        self.robot = task_cfg["robot"]
        self.sim_dt, self.decimation = float(env["sim_dt"]), int(env["decimation"])
        if abs(self.sim_dt * self.decimation - traj.control_dt) > 1e-6:
            raise IdentificationError(f"the recording's control period {traj.control_dt} s differs from the task's "
                                      f"{self.sim_dt * self.decimation} s")
        if traj.state.shape[1] != 13:
            raise IdentificationError(f"a quadrotor state has 13 values, the recording has {traj.state.shape[1]}")
        self.term = QuadrotorAction(self.robot, env["action_interface"])
        self.nominal = QuadrotorParams.from_robot(self.robot, 1)
        self.horizon, self.warmup, self.max_latency = int(horizon), int(warmup), int(max_latency)
        self.starts = torch.as_tensor(starts, dtype=torch.long)
        self.state = torch.as_tensor(traj.state, dtype=torch.float32)
        self.next_state = torch.as_tensor(traj.next_state, dtype=torch.float32)
        action = torch.as_tensor(traj.action, dtype=torch.float32).clamp(-1.0, 1.0)
        self.command = self.term.to_command(action)  # [T, 4]
        self.episode_numbers, self.window_episode = torch.unique(torch.as_tensor(traj.episode[starts]),
                                                                 return_inverse=True)
        self.num_episodes = int(self.window_episode.max()) + 1 if len(starts) else 0
        j = torch.arange(1, self.horizon + 1, dtype=torch.float32) * self.decimation  # physics steps
        self._vel_coef = (j * self.sim_dt).view(1, -1, 1)  # the velocity change of a unit constant acceleration
        self._pos_coef = (self.sim_dt ** 2 * j * (j + 1) / 2).view(1, -1, 1)  # its position change (Euler)

    @property
    def num_windows(self) -> int:
        return len(self.starts)

    def rollout(self, theta: dict, latency: torch.Tensor, win: torch.Tensor) -> torch.Tensor:
        """Predicted states ``[n, K, 13]`` of ``n`` rows: robot ``theta`` (``{"mass": [n] kg, "motor_thrust": [n, 4]
        N max per motor, "inertia": [n, 3] kg m^2, "tau": [n] s}``) with ``latency`` ``[n]`` control steps on
        window ``win`` ``[n]`` (indices into :attr:`starts`)."""
        from sim2real.sim.quadrotor import QuadrotorDynamics, QuadrotorParams

        n, k, d = len(win), self.horizon, self.decimation
        p = QuadrotorParams.from_robot(self.robot, n)
        p.mass, p.inertia, p.motor_time_constant = theta["mass"], theta["inertia"], theta["tau"]
        p.max_motor_thrust = theta["motor_thrust"].max(-1).values
        relative = theta["motor_thrust"] / p.max_motor_thrust.unsqueeze(-1)  # each motor's share of the strongest
        dyn = QuadrotorDynamics(p, self.sim_dt)
        t0 = self.starts[win]
        # the commands acting at control steps t0 - warmup .. t0 + K - 1: those recorded L steps earlier
        applied = self.command[t0.unsqueeze(-1) + torch.arange(-self.warmup, k) - latency.unsqueeze(-1)]
        # the motors' state at t0: the first-order lag over the warmup commands, from their steady state
        alpha = (1.0 - torch.exp(-self.sim_dt / p.motor_time_constant)).unsqueeze(-1)
        rates = self.state[t0.unsqueeze(-1) + torch.arange(-self.warmup, 0), 10:13]  # the ctbr rate loop's input
        dyn.ang_vel_b = rates[:, 0]
        f = self.term.apply(applied[:, 0], dyn) * relative
        for i in range(self.warmup):
            dyn.ang_vel_b = rates[:, i]
            target = self.term.apply(applied[:, i], dyn) * relative
            for _ in range(d):
                f = f + (target - f) * alpha
        s0 = self.state[t0]
        quat = s0[:, 3:7] / torch.linalg.vector_norm(s0[:, 3:7], dim=-1, keepdim=True)
        # set_state writes in place: not into the recorded rates the warm-up's rate loop read (autograd keeps them)
        dyn.ang_vel_b = torch.zeros(n, 3)
        dyn.set_state(torch.arange(n), s0[:, 0:3], quat, s0[:, 7:10], s0[:, 10:13], f)
        out = torch.empty(n, k, 13)
        for j in range(k):
            for _ in range(d):
                dyn.step(self.term.apply(applied[:, self.warmup + j], dyn) * relative)
            out[:, j, 0:3], out[:, j, 3:7] = dyn.pos_w, dyn.quat_w
            out[:, j, 7:10], out[:, j, 10:13] = dyn.lin_vel_w, dyn.ang_vel_b
        return out

    def errors(self, pred: torch.Tensor, win: torch.Tensor, group: torch.Tensor,
               num_groups: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sq [G, 4], accel [G, 3])``: the squared errors of the predictions ``pred`` ``[n, K, 13]`` of windows
        ``win`` ``[n]`` against the recording, summed over steps and over the rows of each group (``group`` ``[n]``
        in ``0..G-1``, e.g. candidate x episode) per state group (:data:`GROUPS`), after removing each group's
        least-squares constant acceleration ``accel`` [m/s^2] (world frame: a constant external force) from the
        velocity and position errors. NaN/inf predictions give inf."""
        idx = self.starts[win].unsqueeze(-1) + torch.arange(pred.shape[1])  # [n, K]
        target = self.next_state[idx]  # [n, K, 13]
        e_vel = target[..., 7:10] - pred[..., 7:10]
        num = torch.zeros(num_groups, 3).index_add_(0, group, (e_vel * self._vel_coef).sum(1))
        den = torch.zeros(num_groups).index_add_(0, group, torch.full((len(win),), float(self._vel_coef.pow(2).sum())))
        accel = num / den.clamp_min(1e-12).unsqueeze(-1)
        a = accel[group].unsqueeze(1)  # [n, 1, 3]
        e_vel = e_vel - self._vel_coef * a
        e_pos = target[..., 0:3] - pred[..., 0:3] - self._pos_coef * a
        # attitude: the angle of q_pred^-1 q_target, 2 atan2(|vector part|, |scalar part|): exact near 0 in float32
        qp = pred[..., 3:7] / torch.linalg.vector_norm(pred[..., 3:7], dim=-1, keepdim=True)
        qt = target[..., 3:7] / torch.linalg.vector_norm(target[..., 3:7], dim=-1, keepdim=True)
        vec = qp[..., :1] * qt[..., 1:] - qt[..., :1] * qp[..., 1:] - torch.cross(qp[..., 1:], qt[..., 1:], dim=-1)
        angle = 2.0 * torch.atan2(torch.linalg.vector_norm(vec, dim=-1), (qp * qt).sum(-1).abs())
        e_ang = target[..., 10:13] - pred[..., 10:13]
        sq = torch.stack((e_pos.pow(2).sum(-1), angle.pow(2), e_vel.pow(2).sum(-1), e_ang.pow(2).sum(-1)), -1)
        sq = torch.zeros(num_groups, 4).index_add_(0, group, sq.sum(1))
        return torch.where(torch.isfinite(sq), sq, torch.full_like(sq, float("inf"))), accel


# --- candidates -----------------------------------------------------------------------------------------------------
#: The search vector: log(thrust/mass), log(thrust/inertia), log(mass), 4 motor log-thrusts (zero-sum), log(tau).
_DIM = 8
#: Its entries that may vary between episodes (the per-episode search): thrust/mass, thrust/inertia, tau.
_EPISODE_DIMS = (0, 1, 7)


def _decode(x: torch.Tensor, replay: QuadrotorReplay) -> dict:
    """Search vectors ``x`` ``[n, 8]`` -> rows of physical robots (see :meth:`QuadrotorReplay.rollout`) and their
    scales of the nominal robot (``mass_scale`` [n], ``motor_scale`` [n, 4], ``inertia_scale`` [n])."""
    nom = replay.nominal
    d = x[:, 3:7] - x[:, 3:7].mean(-1, keepdim=True)
    mass_scale = torch.exp(x[:, 2])
    thrust_mean = torch.exp(x[:, 0] + x[:, 2])  # geometric mean of the four motors' scales
    inertia_scale = torch.exp(x[:, 0] + x[:, 2] - x[:, 1])
    motor_scale = thrust_mean.unsqueeze(-1) * torch.exp(d)  # [n, 4]
    return {"mass": nom.mass * mass_scale, "motor_thrust": nom.max_motor_thrust * motor_scale,
            "inertia": nom.inertia * inertia_scale.unsqueeze(-1), "tau": torch.exp(x[:, 7]),
            "mass_scale": mass_scale, "motor_scale": motor_scale, "inertia_scale": inertia_scale}


def _evaluate(replay: QuadrotorReplay, x: torch.Tensor, latency: torch.Tensor, win: torch.Tensor,
              group: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`QuadrotorReplay.errors` of the rows ``(x [n, 8], latency [n], win [n])`` grouped by ``group``."""
    return replay.errors(replay.rollout(_decode(x, replay), latency, win), win, group, num_groups)


def _product(replay, x, latency, win, episode_x=None, episode_latency=None, chunk: int = 65536):
    """Per-episode squared errors ``[C, E, 4]`` and accelerations ``[C, E, 3]`` of every candidate ``x`` ``[C, 8]``
    on every window ``win`` ``[W']``: the candidate's latency ``latency`` ``[C]``, or with ``episode_x``
    (``[E, 8]`` offsets added to the candidate) and ``episode_latency`` (``[E]``) each episode's own. In chunks of
    at most ``chunk`` rows (whole candidates)."""
    c, w, e = len(x), len(win), replay.num_episodes
    ep = replay.window_episode[win]
    per = max(1, chunk // max(1, w))
    sqs, accels = [], []
    for i in range(0, c, per):
        xs = x[i:i + per]
        m = len(xs)
        rows_x = xs.repeat_interleave(w, 0)
        if episode_x is not None:
            rows_x = rows_x + episode_x[ep].repeat(m, 1)
        rows_lat = (episode_latency[ep].repeat(m) if episode_latency is not None
                    else latency[i:i + per].repeat_interleave(w))
        group = (torch.arange(m).repeat_interleave(w) * e + ep.repeat(m))
        sq, accel = _evaluate(replay, rows_x, rows_lat, win.repeat(m), group, m * e)
        sqs.append(sq.view(m, e, 4))
        accels.append(accel.view(m, e, 3))
    return torch.cat(sqs), torch.cat(accels)


def identify_quadrotor(traj: Trajectories, task_cfg: dict, options: Options | None = None, *,
                       log=None) -> Identified:
    """Identify a quadrotor from its recorded :class:`Trajectories` (see the module docstring for the method).

    Four stages, all batched replays of the recorded windows:

    1. global CEM over the search vector (thrust/mass, thrust/inertia, mass, motor shares, motor time constant) and
       one latency for the whole session;
    2. per-episode CEM of what may vary between episodes (thrust/mass, thrust/inertia, motor time constant offsets,
       latency), every episode on its own windows, all episodes in one batch;
    3. the mass line search along the valley of equal thrust/mass and thrust/inertia, on every window with each
       episode's own values (the mass is seen only through the drag);
    4. the fit of the nominal and the identified robot on every window.

    Args:
        traj: the session's control steps (state layout v1).
        task_cfg: the base policy's training config (robot, env timing, action interface, DR ranges).
        options: :class:`Options`.
        log: ``log(text)`` for progress lines (None: quiet).

    Raises:
        IdentificationError: fewer than 20 windows (a session too short, or all in short episodes), a control
            period that differs from the task's.
    """
    opts = options or Options()
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, int(opts.threads)))
    try:
        return _identify_quadrotor(traj, task_cfg, opts, log)
    finally:
        torch.set_num_threads(threads)


def _identify_quadrotor(traj: Trajectories, task_cfg: dict, opts: Options, log) -> Identified:
    t_start = time.monotonic()
    say = log or (lambda text: None)
    gen = torch.Generator().manual_seed(int(opts.seed))
    horizon = max(1, int(round(opts.horizon_s / traj.control_dt)))
    starts = _windows(traj, horizon, opts.warmup + opts.max_latency, max(1, int(opts.stride)), opts.max_windows)
    if len(starts) < 20:
        raise IdentificationError(f"only {len(starts)} windows of {horizon} control steps after {opts.warmup} + "
                                  f"{opts.max_latency} steps of history in {len(traj)} recorded steps: record a longer "
                                  "session (identification needs at least 20)")
    replay = QuadrotorReplay(traj, task_cfg, horizon, opts.warmup, opts.max_latency, starts)
    all_win = torch.arange(replay.num_windows)
    n_lat, n_ep = opts.max_latency + 1, replay.num_episodes

    # the nominal robot: each state group's normaliser (every group weighs 1 there)
    x_nom = torch.zeros(1, _DIM)
    x_nom[0, 7] = math.log(float(replay.nominal.motor_time_constant[0]))
    sq_nom, _ = _product(replay, x_nom, torch.zeros(1, dtype=torch.long), all_win)
    norm = sq_nom[0].sum(0).clamp_min(1e-20)  # [4]

    def cost_of(sq, share=1.0):  # [..., 4] summed errors -> the normalised cost
        return (sq / (norm * share)).mean(-1)

    # 1. global CEM: the search vector and one latency
    mean, std = x_nom[0].clone(), torch.tensor([0.3, 0.3, 0.25, 0.1, 0.1, 0.1, 0.1, 0.5])
    if not opts.per_motor:
        std[3:7] = 0.0
    probs = torch.full((n_lat,), 1.0 / n_lat)
    n_elite = max(2, int(round(opts.elite_frac * opts.population)))
    for it in range(int(opts.iterations)):
        x = mean + std * torch.randn(opts.population, _DIM, generator=gen)
        x[0] = mean  # the current mean competes
        x[:, 7] = x[:, 7].clamp(math.log(0.005), math.log(0.3))
        latency = torch.multinomial(probs, opts.population, replacement=True, generator=gen)
        latency[0] = int(probs.argmax())
        win = torch.randperm(replay.num_windows, generator=gen)[:opts.batch_windows]
        sq, _ = _product(replay, x, latency, win)
        cost = cost_of(sq.sum(1), len(win) / replay.num_windows)
        mean, std, elite = _cem_update(x, cost, mean, std, n_elite)
        counts = torch.bincount(latency[elite], minlength=n_lat).float() / n_elite
        probs = (0.7 * counts + 0.3 * probs).clamp_min(1e-3)
        probs = probs / probs.sum()
        say(f"global {it + 1}/{opts.iterations}: best {float(cost[elite[0]]):.4f}, latency {int(probs.argmax())} "
            f"(p {float(probs.max()):.2f})")

    # 2. per-episode CEM of thrust/mass, thrust/inertia and tau offsets, each episode on its own windows, at the
    # session's best latency and its neighbours (a stand-in draws the latency per episode); each episode keeps its best
    with torch.no_grad():
        sq, _ = _product(replay, mean.repeat(n_lat, 1), torch.arange(n_lat), all_win)
    lat_cost = cost_of(sq.sum(1))
    best_lat = int(torch.argmin(lat_cost))
    lat_cands = torch.arange(max(0, best_lat - opts.episode_latency_reach),
                             min(n_lat, best_lat + opts.episode_latency_reach + 1))
    n_l = len(lat_cands)
    say("latencies searched per episode: " + ", ".join(f"{int(v)} (session fit {float(lat_cost[v]):.3f})"
                                                       for v in lat_cands))
    counts_ep = torch.bincount(replay.window_episode, minlength=n_ep)
    by_episode = [torch.nonzero(replay.window_episode == e).flatten() for e in range(n_ep)]
    dims = list(_EPISODE_DIMS)
    p_ep = opts.episode_population
    e_mean = torch.zeros(n_ep, n_l, len(dims))
    e_std = torch.tensor([0.1, 0.1, 0.3]).expand(n_ep, n_l, -1).clone()
    n_elite_ep = max(2, int(round(opts.elite_frac * p_ep)))
    for it in range(int(opts.episode_iterations)):
        offsets = e_mean.unsqueeze(2) + e_std.unsqueeze(2) * torch.randn(n_ep, n_l, p_ep, len(dims), generator=gen)
        offsets[:, :, 0] = e_mean
        sq = torch.empty(n_ep * n_l * p_ep, 4)
        block: list[int] = []
        for e in range(n_ep + 1):  # episodes in blocks of at most ~65536 rows
            if e < n_ep and (not block or (len(block) + 1) * n_l * p_ep * opts.episode_windows <= 65536):
                block.append(e)
                continue
            rows_x, rows_lat, rows_win, rows_group = [], [], [], []
            for i, b in enumerate(block):
                pick = by_episode[b][torch.randperm(len(by_episode[b]), generator=gen)[:opts.episode_windows]]
                k = len(pick)
                xe = mean.repeat(n_l * p_ep, 1)
                xe[:, dims] += offsets[b].reshape(n_l * p_ep, -1)
                rows_x.append(xe.repeat_interleave(k, 0))
                rows_lat.append(lat_cands.repeat_interleave(p_ep * k))
                rows_win.append(pick.repeat(n_l * p_ep))
                rows_group.append((i * n_l * p_ep + torch.arange(n_l * p_ep)).repeat_interleave(k))
            with torch.no_grad():
                sq_block, _ = _evaluate(replay, torch.cat(rows_x), torch.cat(rows_lat), torch.cat(rows_win),
                                        torch.cat(rows_group), len(block) * n_l * p_ep)
            sq[block[0] * n_l * p_ep:(block[-1] + 1) * n_l * p_ep] = sq_block
            block = [e]
        cost = cost_of(sq).view(n_ep, n_l, p_ep)
        e_mean, e_std, _ = _cem_update(offsets, cost, e_mean, e_std, n_elite_ep)
        best = float(cost.min(-1).values.min(-1).values.sum())
        say(f"per episode {it + 1}/{opts.episode_iterations}: best {best:.4f} (sum over episodes)")
    # each episode's latency: the best of its means on all its windows
    ep = replay.window_episode
    with torch.no_grad():
        rows_x = mean.repeat(n_l * replay.num_windows, 1)
        rows_x[:, dims] += e_mean[ep].transpose(0, 1).reshape(-1, len(dims))
        sq, _ = _evaluate(replay, rows_x, lat_cands.repeat_interleave(replay.num_windows), all_win.repeat(n_l),
                          (torch.arange(n_l).repeat_interleave(replay.num_windows) * n_ep + ep.repeat(n_l)),
                          n_l * n_ep)
    best_l = cost_of(sq).view(n_l, n_ep).argmin(0)  # [E]
    episode_latency = lat_cands[best_l]
    episode_x = torch.zeros(n_ep, _DIM)
    episode_x[:, dims] = e_mean[torch.arange(n_ep), best_l]

    # 3a. gradient polish (the replay is differentiable): L-BFGS on every window of the motor shares and each
    # episode's thrust/mass, thrust/inertia and tau, the latencies held
    if opts.polish_iterations > 0:
        fixed = mean.clone()
        shares = mean[3:7].clone().requires_grad_(True)
        own = (mean[dims] + episode_x[:, dims]).clone().requires_grad_(True)  # [E, 3]: each episode's own values
        optimiser = torch.optim.LBFGS([shares, own], lr=1.0, max_iter=int(opts.polish_iterations),
                                      line_search_fn="strong_wolfe")

        def closure():
            optimiser.zero_grad()
            rows = torch.cat((own[:, :2], fixed[2:3].expand(n_ep, 1), shares.expand(n_ep, 4), own[:, 2:]), -1)
            sq, _ = _evaluate(replay, rows[ep], episode_latency[ep], all_win, ep, n_ep)
            loss = cost_of(sq.sum(0))
            loss.backward()
            return loss

        before_polish = float(closure().detach())
        optimiser.step(closure)
        mean[3:7] = shares.detach()
        episode_x[:, dims] = own.detach() - mean[dims]
        say(f"polish: {before_polish:.5f} -> {float(closure().detach()):.5f}")

    # 3b. the mass along the valley of equal thrust/mass and thrust/inertia, each episode with its own values: only
    # the drag tells the mass, a shallow minimum that a line search finds where the gradient polish crawls
    if opts.mass_grid > 1:
        with torch.no_grad():
            steps = torch.linspace(-opts.mass_span, opts.mass_span, opts.mass_grid)
            for _ in range(2):  # a coarse pass, then a fine one around its best
                x_line = mean.repeat(opts.mass_grid, 1)
                x_line[:, 2] += steps
                sq, _ = _product(replay, x_line, None, all_win, episode_x, episode_latency)
                line = cost_of(sq.sum(1))
                i = int(torch.argmin(line))
                h, shift = float(steps[1] - steps[0]), 0.0
                if 0 < i < opts.mass_grid - 1:  # the vertex of the parabola through the best three points
                    y0, y1, y2 = (float(line[j]) for j in (i - 1, i, i + 1))
                    curv = y0 - 2 * y1 + y2
                    shift = max(-h, min(h, 0.5 * h * (y0 - y2) / curv)) if curv > 0 else 0.0
                mean[2] += float(steps[i]) + shift
                steps = steps * (2.0 / (opts.mass_grid - 1))
        say(f"mass line: mass x{math.exp(float(mean[2])):.3f}")

    # the robot's values: the medians over the episodes with enough windows (the others count in no range)
    reliable = counts_ep >= opts.min_episode_windows
    if not bool(reliable.any()):
        reliable = counts_ep > 0
    centre = episode_x[reliable][:, dims].median(0).values
    mean[dims] += centre
    episode_x[:, dims] -= centre
    latency_median = int(episode_latency[reliable].median())

    # 4. the fit: per-episode values, and the medians everywhere
    x_best = mean.unsqueeze(0)
    with torch.no_grad():
        sq_after, accel = _product(replay, x_best, None, all_win, episode_x, episode_latency)
        sq_global, _ = _product(replay, x_best, torch.tensor([latency_median]), all_win)
    theta = _decode(x_best + episode_x, replay)  # [E] rows: each episode's robot
    force = accel[0] * theta["mass"].unsqueeze(-1)  # [E, 3] N
    centre = _decode(x_best, replay)
    motor = centre["motor_scale"][0]
    params = {
        "mass_scale": float(centre["mass_scale"][0]),
        "thrust_scale": float(motor.max()),
        "inertia_scale": float(centre["inertia_scale"][0]),
        "motor_time_constant": float(centre["tau"][0]),
        "latency_steps": latency_median,
        "ext_force": float(math.sqrt(3.0) * force[reliable].pow(2).mean().sqrt()),
        "motor_thrust_scale": [float(v) for v in motor / motor.max()],
    }
    spread = {}
    per_episode = {"thrust_scale": theta["motor_scale"].max(-1).values, "inertia_scale": theta["inertia_scale"],
                   "motor_time_constant": theta["tau"], "latency_steps": episode_latency}
    for key, values in per_episode.items():
        v = values[reliable]
        spread[key] = [int(v.min()), int(v.max())] if key == "latency_steps" else [float(v.min()), float(v.max())]
    nominal = {"mass_scale": 1.0, "thrust_scale": 1.0, "inertia_scale": 1.0,
               "motor_time_constant": float(replay.nominal.motor_time_constant[0]), "latency_steps": 0,
               "ext_force": 0.0, "motor_thrust_scale": [1.0, 1.0, 1.0, 1.0]}
    dr = task_cfg.get("domain_rand", {})
    training_range = {}
    if dr.get("enabled", False):
        for key in QUADROTOR_DR_KEYS:
            if key == "ext_force" and key in dr:
                training_range[key] = [0.0, float(dr[key])]
            elif key in dr:
                training_range[key] = [float(dr[key][0]), float(dr[key][1])]
    count = replay.num_windows * horizon

    def rms(sq):
        return {name: float((sq[i] / count).sqrt()) for i, (name, _) in enumerate(GROUPS)}

    lat_hist = torch.bincount(episode_latency[reliable], minlength=n_lat)
    return Identified(
        task=str(task_cfg.get("task", "?")), robot_kind="quadrotor", params=params, spread=spread, nominal=nominal,
        training_range=training_range, fit_before=1.0, fit_after=float(cost_of(sq_after[0].sum(0))),
        fit_global=float(cost_of(sq_global[0].sum(0))), rms_before=rms(sq_nom[0].sum(0)),
        rms_after=rms(sq_after[0].sum(0)),
        latency_episodes={i: int(c) for i, c in enumerate(lat_hist) if c > 0},
        per_episode={int(number): {"thrust_scale": float(per_episode["thrust_scale"][e]),
                                   "inertia_scale": float(per_episode["inertia_scale"][e]),
                                   "motor_time_constant": float(per_episode["motor_time_constant"][e]),
                                   "latency_steps": int(per_episode["latency_steps"][e]),
                                   "ext_force_w": [float(v) for v in force[e]], "windows": int(counts_ep[e])}
                     for e, number in enumerate(replay.episode_numbers)},
        windows=replay.num_windows, episodes=n_ep, horizon_steps=horizon, steps=len(traj),
        control_dt=traj.control_dt, wall_s=time.monotonic() - t_start,
        method=(f"replay of {horizon}-step windows every {opts.stride} steps: global CEM {opts.iterations} x "
                f"{opts.population}, per-episode CEM {opts.episode_iterations} x {opts.episode_population} x {n_l} "
                f"latencies, L-BFGS {opts.polish_iterations}, mass line 2 x {opts.mass_grid}; a constant force per "
                "episode profiled out"))


def identify(session, options: Options | None = None, *, log=None) -> Identified:
    """Identify the robot of a :class:`~sim2real.deploy.finetune.session.FinetuneSession` from its recordings.

    Raises:
        IdentificationError: no state recorded (an older session), too little data, or a robot kind that is neither
            a quadrotor nor legged.

    ``options``: :class:`Options` (quadrotor) or :class:`~sim2real.deploy.finetune.identify_data.LeggedOptions`
    (legged; an :class:`Options` given for a legged session passes on its ``max_latency`` and ``seed``).
    """
    traj, task_cfg = session_trajectories(session)
    kind = task_cfg["robot"].get("kind")
    if kind == "legged":
        from sim2real.deploy.finetune.identify_data import LeggedOptions
        from sim2real.deploy.finetune.identify_legged import identify_legged

        if options is not None and not isinstance(options, LeggedOptions):  # the CLI's: keep its latency and seed
            options = LeggedOptions(max_latency=options.max_latency, seed=options.seed)
        return identify_legged(traj, task_cfg, options, log=log)
    if kind != "quadrotor":
        raise IdentificationError(f"{session.path}: identification of {kind} robots is not implemented")
    return identify_quadrotor(traj, task_cfg, options, log=log)


def write_identified(session, result: Identified) -> Path:
    """Write ``result`` as ``<session>/identified.json`` atomically; returns its path."""
    from sim2real.configs.durable import atomic_write_json

    path = Path(session.path) / IDENTIFIED_FILE
    atomic_write_json(path, result.to_json())
    return path
