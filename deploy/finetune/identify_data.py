"""The data, options and result of :mod:`sim2real.deploy.finetune.identify` (system identification from a
fine-tuning session's recordings): the recorded trajectories, the identified values, the search's options. Split
from that module for size; import these names from it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np
import torch

#: What ``finetune identify`` writes into the session folder (atomically).
IDENTIFIED_FILE = "identified.json"
#: State layout versions this module reads (``state.v<N>`` fields of the recording).
READS_STATE_VERSIONS = (1,)
_STATE_RE = re.compile(r"^state\.v(\d+)$")
#: The state groups of the fit error: name and unit (attitude: the geodesic angle between the quaternions).
GROUPS = (("position", "m"), ("attitude", "rad"), ("lin_vel", "m/s"), ("ang_vel", "rad/s"))


class IdentificationError(ValueError):
    """The session cannot be identified: no state recorded, too little data, a robot kind not supported. Its
    message is one line."""


# --- the data -----------------------------------------------------------------------------------------------------
@dataclass
class Trajectories:
    """The recorded control steps of a session, sorted by seq (``T`` steps).

    Attributes:
        state, next_state: ``[T, S]`` float64, the state estimate before / after each step
            (:func:`~sim2real.tasks.state.state_estimate_fields` layout, version ``state_version``).
        action: ``[T, A]`` float64, the executed normalised action.
        episode, step, seq: ``[T]`` int64: the episode, the step within it, the recording's sequence number (a
            gap in seq is a lost chunk: no window spans it).
        control_dt: the control period [s] (the base policy's ``control_period_s``).
    """

    state: np.ndarray
    next_state: np.ndarray
    action: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    seq: np.ndarray
    control_dt: float
    state_version: int = 1

    def __len__(self) -> int:
        return len(self.seq)


def trajectories_from_recording(data: dict, control_dt: float, where: str = "the recording") -> Trajectories:
    """:class:`Trajectories` from :func:`~sim2real.deploy.recording.transitions.read_transitions`' result.

    Raises:
        IdentificationError: no transition, no state field (a session recorded before the state was), or a state
            layout version this module does not read.
    """
    if "action" not in data or not len(data["action"]):
        raise IdentificationError(f"{where} holds no transitions: nothing to identify")
    versions = sorted(int(m.group(1)) for m in map(_STATE_RE.match, data) if m)
    if not versions:
        raise IdentificationError(f"{where} has no robot state (recorded by a version before the state was recorded): "
                                  f"identification needs a session recorded with state.v1")
    version = versions[-1]
    if version not in READS_STATE_VERSIONS:
        raise IdentificationError(f"{where} records the state in layout v{version}; this version reads "
                                  f"v{', v'.join(map(str, READS_STATE_VERSIONS))}")

    def f64(x):
        return np.asarray(x, dtype=np.float64)

    return Trajectories(state=f64(data[f"state.v{version}"]), next_state=f64(data[f"next_state.v{version}"]),
                        action=f64(data["action"]).reshape(len(data["action"]), -1),
                        episode=np.asarray(data["episode"]).astype(np.int64),
                        step=np.asarray(data["step"]).astype(np.int64), seq=np.asarray(data["seq"], dtype=np.int64),
                        control_dt=float(control_dt), state_version=version)


def session_trajectories(session) -> tuple[Trajectories, dict]:
    """``(trajectories, task config)`` of a :class:`~sim2real.deploy.finetune.session.FinetuneSession`: its
    recorded transitions (damaged chunks skipped with a warning) and the base policy's training config (its
    ``robot.mjcf`` replaced by the session's ``standin.mjcf`` when that is set).

    Raises:
        IdentificationError: see :func:`trajectories_from_recording`.
    """
    from sim2real.deploy.finetune.config import with_session_model
    from sim2real.deploy.recording.transitions import read_transitions
    from sim2real.tasks import complete_saved_config

    meta = session.base_metadata()
    task_cfg = with_session_model(complete_saved_config(meta["training"]["task_config"])[0], session.read_config())
    data = merge_recordings([read_transitions(d) for d in session.recording_dirs().values()])
    return trajectories_from_recording(data, float(meta["control_period_s"]), str(session.path)), task_cfg


# --- windows and the CEM step (shared by the quadrotor and the legged identification) ---------------------------
def replay_windows(traj: Trajectories, horizon: int, history: int, stride: int, max_windows: int) -> np.ndarray:
    """Start indices ``[W]`` of the windows: ``history`` recorded steps before and ``horizon`` from the start, all in
    one episode and without a seq gap; every ``stride``-th step of an episode; at most ``max_windows``."""
    t = len(traj)
    if t < history + horizon:
        return np.zeros(0, np.int64)
    ep, st, seq = traj.episode, traj.step, traj.seq
    # run[i]: how many consecutive steps (same episode, next step, next seq) precede step i
    ok = np.r_[False, (ep[1:] == ep[:-1]) & (st[1:] == st[:-1] + 1) & (seq[1:] == seq[:-1] + 1)]
    breaks = np.flatnonzero(~ok)  # the first step of every run
    run = np.arange(t) - breaks[np.searchsorted(breaks, np.arange(t), side="right") - 1]
    end = np.arange(t) + horizon - 1
    idx = np.flatnonzero(end < t)
    valid = np.zeros(t, bool)
    valid[idx] = (run[end[idx]] - run[idx] == horizon - 1) & (run[idx] >= history)
    starts = np.flatnonzero(valid & (st % stride == 0))
    if len(starts) > max_windows:
        starts = starts[np.linspace(0, len(starts) - 1, max_windows).round().astype(np.int64)]
    return starts


def cem_update(x, cost, mean, std, n_elite, keep=0.2):
    """CEM's update of a Gaussian ``(mean, std)`` (``[..., D]``) from samples ``x`` ``[..., P, D]`` and costs
    ``[..., P]``: the elites' moments, smoothed (``keep`` of the old)."""
    elite = torch.argsort(cost, dim=-1)[..., :n_elite]
    xe = torch.gather(x, -2, elite.unsqueeze(-1).expand(*elite.shape, x.shape[-1]))
    return (1 - keep) * xe.mean(-2) + keep * mean, (1 - keep) * xe.std(-2) + keep * std, elite


def merge_recordings(parts: list[dict]) -> dict:
    """One recording (:func:`~sim2real.deploy.recording.transitions.read_transitions`' format) of several robots'
    (a fleet's): their fields concatenated, each robot's ``episode`` numbers moved past the previous robots' and its
    ``seq`` numbers past theirs with a gap of one, so that no episode and no window of consecutive steps spans two
    robots. Parts without transitions are left out; fields missing from any part are dropped."""
    parts = [d for d in parts if len(d.get("seq", ())) and "episode" in d]
    if len(parts) <= 1:
        return parts[0] if parts else {}
    keys = set.intersection(*(set(d) for d in parts))
    out: dict[str, list] = {k: [] for k in keys}
    episode0 = seq0 = 0
    for d in parts:
        for k in keys:
            v = np.asarray(d[k])
            out[k].append(v + episode0 if k == "episode" else v + seq0 if k == "seq" else v)
        episode0 += int(np.max(d["episode"])) + 1
        seq0 += int(np.max(d["seq"])) + 2
    return {k: np.concatenate(v) for k, v in out.items()}


# --- the result ---------------------------------------------------------------------------------------------------
#: The identified parameters that are DR keys of the quadrotor tasks (the rest need the correction model).
QUADROTOR_DR_KEYS = ("mass_scale", "thrust_scale", "inertia_scale", "motor_time_constant", "latency_steps",
                     "ext_force")
#: The identified parameters of a legged robot, all DR keys of the legged tasks (``floor_timeconst``: the jump's).
LEGGED_DR_KEYS = ("friction", "motor_strength", "floor_timeconst", "latency_steps")
#: The state groups of a legged robot's fit error: the base's (:data:`GROUPS`), then the joints'.
LEGGED_GROUPS = GROUPS + (("joint_pos", "rad"), ("joint_vel", "rad/s"))
_UNITS = {"motor_time_constant": "s", "latency_steps": "steps", "ext_force": "N", "floor_timeconst": "s"}


@dataclass
class Identified:
    """The identified robot.

    Attributes:
        task, robot_kind: the base policy's task and ``quadrotor`` or ``legged``.
        params: a legged robot's: ``friction``, ``motor_strength``, ``floor_timeconst`` [s], ``latency_steps``
            (the median over the episodes; :mod:`~sim2real.deploy.finetune.identify_legged`). A quadrotor's:
            ``mass_scale``, ``thrust_scale``, ``inertia_scale`` (scales of the robot
            config's mass, maximum motor thrust of the strongest motor, inertia), ``motor_time_constant`` [s],
            ``latency_steps`` [control steps], ``ext_force`` [N] (per-axis bound of a uniform draw with the
            per-episode forces' RMS), ``motor_thrust_scale`` ``[4]`` (each motor relative to the strongest). The
            values that may vary between episodes are their median over the episodes.
        spread: ``{key: [low, high]}``: the range over the episodes (with at least ``min_episode_windows`` windows)
            of the per-episode values of ``thrust_scale``, ``inertia_scale``, ``motor_time_constant``,
            ``latency_steps``: what the robot varies between episodes (a DR'd stand-in, a battery on a robot).
        nominal: the same keys for the nominal robot (robot config, no latency, no force).
        training_range: ``{key: [low, high]}`` of the task's training DR for the keys it randomises.
        fit_before, fit_after, fit_global: the normalised fit error (the nominal robot = 1.0 by construction) of the
            nominal robot, of the identified one (per-episode values) and of the identified one with the medians
            in every episode, on every window.
        rms_before, rms_after: ``{group: RMS}`` per state group over every window and step, in the group's unit
            (:data:`GROUPS`), nominal and identified.
        latency_episodes: ``{L: number of episodes}`` identified at each latency [control steps].
        per_episode: ``{episode number: {thrust_scale, inertia_scale, motor_time_constant, latency_steps,
            ext_force_w [3] N (world frame), windows}}``: each recorded episode's own values.
        windows, episodes, horizon_steps, steps: windows used, episodes they came from, control steps per window,
            recorded steps read. control_dt: [s]. wall_s: the identification's wall time [s].
        method: a one-line description.
    """

    task: str
    robot_kind: str
    params: dict
    spread: dict
    nominal: dict
    training_range: dict
    fit_before: float
    fit_after: float
    fit_global: float
    rms_before: dict
    rms_after: dict
    latency_episodes: dict
    per_episode: dict
    windows: int
    episodes: int
    horizon_steps: int
    steps: int
    control_dt: float
    wall_s: float
    method: str = ""
    dr_keys: list = None  # the params that are task DR keys (None: the quadrotor's, QUADROTOR_DR_KEYS)
    groups: list = None  # the fit's state groups [[name, unit], ...] (None: the quadrotor's, GROUPS)

    def __post_init__(self):
        if self.dr_keys is None:
            self.dr_keys = list(QUADROTOR_DR_KEYS)
        if self.groups is None:
            self.groups = [list(g) for g in GROUPS]

    def overrides(self, spread: bool = True) -> dict:
        """Dotted task-config overrides that simulate the identified robot with the task's own DR keys: each
        identified value pinned (``domain_rand.mass_scale: [v, v]``...), or with ``spread`` its per-episode range
        where it has one; ``domain_rand.ext_force`` is the identified bound. ``motor_thrust_scale`` is not among
        them: the task's DR cannot represent it (see :meth:`correction`)."""
        out = {}
        for key in self.dr_keys:
            value = self.params[key]
            lo, hi = self.spread.get(key, (value, value)) if spread else (value, value)
            if key == "latency_steps":
                out[f"domain_rand.{key}"] = [int(lo), int(hi)]
            elif key == "ext_force":
                out[f"domain_rand.{key}"] = float(value)
            else:
                out[f"domain_rand.{key}"] = [float(lo), float(hi)]
        return out

    def correction(self) -> dict:
        """What the task's DR cannot represent, as a structured delta-action model: ``{"motor_thrust_scale": [4]}``,
        motor ``i`` producing ``scale_i`` times its commanded thrust (relative to the strongest motor); ``{}`` for a
        legged robot (its identified parameters are all DR keys)."""
        if "motor_thrust_scale" not in self.params:
            return {}
        return {"motor_thrust_scale": list(self.params["motor_thrust_scale"])}

    def outside_training(self) -> list[str]:
        """The DR keys whose identified value lies outside the task's training range (the reality gap the policy
        never saw), e.g. ``["mass_scale", "latency_steps"]``."""
        out = []
        for key, (lo, hi) in self.training_range.items():
            value = self.params.get(key)
            if value is not None and not (lo - 1e-9 <= float(value) <= hi + 1e-9):
                out.append(key)
        return out

    def to_json(self) -> dict:
        out = asdict(self)
        out["latency_episodes"] = {str(k): v for k, v in self.latency_episodes.items()}
        out["per_episode"] = {str(k): v for k, v in self.per_episode.items()}
        out["overrides"] = self.overrides()
        out["correction"] = self.correction()
        out["outside_training"] = self.outside_training()
        return out

    def table(self) -> str:
        """The result as a text table: parameters (identified, per-episode range, nominal, training range) and the
        fit error per state group."""
        def fmt(value) -> str:
            if isinstance(value, (list, tuple)):
                return "[" + ", ".join(f"{float(v):.3f}" for v in value) + "]"
            if isinstance(value, int):
                return str(value)
            return f"{float(value):.4g}"

        def rng(pair) -> str:
            return f"{fmt(pair[0])} - {fmt(pair[1])}" if pair else ""

        outside = set(self.outside_training())
        lines = [f"{'parameter':24s} {'identified':>28s} {'per episode':>16s} {'nominal':>8s} {'training DR':>15s}"]
        for key, value in self.params.items():
            name = key + (f" [{_UNITS[key]}]" if key in _UNITS else "")
            train = self.training_range.get(key)
            train_text = rng(train) if train else ("not in DR" if key not in self.dr_keys else "")
            nominal = self.nominal.get(key)
            lines.append(f"{name:24s} {fmt(value):>28s} {rng(self.spread.get(key)):>16s} "
                         f"{'' if isinstance(nominal, list) else fmt(nominal):>8s} {train_text:>15s}"
                         + (" *" if key in outside else ""))
        lat = int(self.params["latency_steps"])
        lines.append(f"latency {lat} steps = {1000.0 * self.control_dt * lat:.0f} ms at the "
                     f"{1000.0 * self.control_dt:g} ms control period; episodes per latency: "
                     + ", ".join(f"{k}: {v}" for k, v in sorted(self.latency_episodes.items())))
        if outside:
            lines.append("* outside the training DR range")
        lines.append("")
        lines.append(f"fit error (nominal robot = 1): {self.fit_before:.3f} -> {self.fit_after:.3f} "
                     f"({self.fit_global:.3f} with the medians in every episode)")
        lines.append(f"{'state group':16s} {'RMS nominal':>12s} {'RMS identified':>15s}")
        for name, unit in self.groups:
            lines.append(f"{name + ' [' + unit + ']':16s} {self.rms_before[name]:12.3g} {self.rms_after[name]:15.3g}")
        lines.append(f"{self.windows} windows of {self.horizon_steps} control steps from {self.episodes} episodes "
                     f"({self.steps} steps = {self.steps * self.control_dt:.0f} s recorded); {self.wall_s:.1f} s")
        return "\n".join(lines)




@dataclass
class Options:
    """Settings of :func:`identify_quadrotor` (defaults: those of the docs' measured example).

    Attributes:
        horizon_s: window length [s] (rounded to control steps, at least 1).
        stride: control steps between window starts.
        warmup: recorded control steps before a window that set its motors' state.
        max_latency: the largest latency searched [control steps].
        population, elite_frac, iterations, batch_windows: the global CEM: candidates per iteration, share kept,
            iterations, windows per iteration (drawn at random, common to its candidates).
        episode_population, episode_iterations, episode_windows: the per-episode CEM: candidates per episode,
            latency and iteration, iterations, windows per episode and iteration.
        episode_latency_reach: the per-episode CEM runs at the latencies within this many control steps of the one
            that fits the whole session best.
        polish_iterations: L-BFGS iterations of the gradient polish (0: none).
        mass_grid, mass_span: the mass line search: candidates, evenly in ``log(mass) +- mass_span``, then again
            around the best (0: none).
        min_episode_windows: episodes with fewer windows keep the global values (and count in no range).
        per_motor: also identify each motor's thrust (else all four equal).
        max_windows: at most this many windows are used (evenly spaced), to bound the time.
        threads: torch's intra-op threads while identifying (restored after): the batches are many small
            operations, for which one thread is the fastest on a busy machine (10x faster than two on 2 loaded
            cores) and leaves the other cores to the robot's processes.
        seed: seeds the sampling.
    """

    horizon_s: float = 0.1
    stride: int = 4
    warmup: int = 20
    max_latency: int = 5
    population: int = 160
    elite_frac: float = 0.1
    iterations: int = 10
    batch_windows: int = 160
    episode_population: int = 24
    episode_iterations: int = 6
    episode_windows: int = 32
    episode_latency_reach: int = 1
    polish_iterations: int = 30
    mass_grid: int = 9
    mass_span: float = 0.4
    min_episode_windows: int = 10
    per_motor: bool = True
    max_windows: int = 4000
    threads: int = 1
    seed: int = 0


@dataclass
class LeggedOptions:
    """Settings of :func:`~sim2real.deploy.finetune.identify_legged.identify_legged` (defaults: the docs' example).

    Attributes:
        horizon_s: window length [s] (rounded to control steps, at least 1); stride: control steps between window
            starts; max_latency: the largest latency searched [control steps] (windows need that many recorded
            steps before them).
        population, elite_frac, batch_windows: the CEM's candidates per iteration, share kept, windows per iteration
            (one MuJoCo world per candidate x window); iterations, iterations_refine: CEM iterations of stage 1
            and of stage 3.
        episode_population, episode_windows, episode_iterations: the per-episode CEM (PD gain scales, added mass):
            candidates and windows per episode and iteration, iterations; rounds: how often the per-episode search
            and the session's CEM alternate after stage 1.
        min_windows: fewer replayable windows refuse the session; max_windows: at most this many (evenly spaced).
        seed: seeds the sampling.
    """

    horizon_s: float = 0.1
    stride: int = 5
    max_latency: int = 5
    population: int = 32
    elite_frac: float = 0.15
    batch_windows: int = 48
    iterations: int = 12
    iterations_refine: int = 6
    episode_population: int = 12
    episode_windows: int = 12
    episode_iterations: int = 5
    rounds: int = 2
    min_windows: int = 20
    max_windows: int = 600
    seed: int = 0

