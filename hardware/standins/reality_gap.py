"""Stand-in "real" robots with a reality gap: the training simulator, shifted outside its domain-randomisation ranges.

A fine-tuning session (``sim2real finetune``) is measured against a robot that is *not* the simulator the policy
was trained in. :data:`REALITY_GAPS` names, per robot kind, config overrides that pin the task's DR to values
outside the training ranges (the shifts of the fine-tuning issue):

* quadrotor: mass x1.2, thrust coefficient (max motor thrust) x0.8, and 2-3 control steps of extra action latency
  (training draws 0-1 steps of 10 ms; a task env under the gap draws 2-3 steps per episode, the ROS stand-in's
  ``--gap quadrotor`` takes the middle, 25 ms). Thrust-to-weight falls from 2.2 to 1.47 (Crazyflie
  2.x): it still hovers, at 68 % of full thrust instead of 45 %; :func:`check_thrust_to_weight` refuses a gap that
  would leave less than :data:`MIN_THRUST_TO_WEIGHT`;
* legged: friction 0.25 (training 0.4-1.2), motor strength x0.8 (training 0.9-1.1), latency 2-3 control steps;
* humanoid (the ``humanoid-footsteps`` task's, :attr:`~sim2real.tasks.spec.FinetuneSpec.gap`): friction, every
  body's mass and latency (:data:`REALITY_GAPS` ``humanoid``).

A task may name its own gap (its spec's ``finetune.gap``); :func:`default_gap_name` gives the one a session uses for
``standin.gap: default``.

:class:`SimulatedRobot` is one such robot (the task's env with one instance and the shifted config), stepped one
control period at a time; with ``realtime=True`` each step takes the control period of wall-clock time, so "N
minutes of robot time" are N minutes on the clock. Episodes start as the task's evaluation episodes do (random
start around a random goal); on a real robot this is the autonomous reset behaviour or the operator.
"""

from __future__ import annotations

import copy
import time

import torch

from sim2real.deploy.control_clock import sleep_until
from sim2real.tasks import make_env
from sim2real.tasks.state import state_estimate

#: Named reality gaps: dotted config overrides with values outside the training DR ranges. ``quadrotor`` and
#: ``legged`` are each robot kind's default (the issue's shifts); ``quadrotor_mass_thrust`` is the quadrotor's
#: without the latency (a gap that a short session closes, for tests); ``quadrotor_weak_motor`` the default plus motor
#: m1 at 85 % (``domain_rand.motor_thrust_scale``, per motor, not a range: not checked against training);
#: ``legged_compliant`` the legged one plus a compliant floor (``domain_rand.floor_timeconst``, the jump task's key).
REALITY_GAPS: dict[str, dict[str, list]] = {
    "quadrotor": {"domain_rand.mass_scale": [1.2, 1.2], "domain_rand.thrust_scale": [0.8, 0.8],
                  "domain_rand.latency_steps": [2, 3]},
    "quadrotor_mass_thrust": {"domain_rand.mass_scale": [1.2, 1.2], "domain_rand.thrust_scale": [0.8, 0.8]},
    # the issue's full hover gap: the default one plus motor m1 at 85 % of the others' thrust, an effect the
    # training DR cannot represent (domain_rand.motor_thrust_scale is fixed at 1 in training)
    "quadrotor_weak_motor": {"domain_rand.mass_scale": [1.2, 1.2], "domain_rand.thrust_scale": [0.8, 0.8],
                             "domain_rand.latency_steps": [2, 3],
                             "domain_rand.motor_thrust_scale": [0.85, 1.0, 1.0, 1.0]},
    "legged": {"domain_rand.friction": [0.25, 0.25], "domain_rand.motor_strength": [0.8, 0.8],
               "domain_rand.latency_steps": [2, 3]},
    # the full jump gap: the legged one plus a compliant floor (contact time constant 0.05 s, MuJoCo's
    # default 0.02 s), which the training DR does not vary (domain_rand.floor_timeconst [0, 0]: the model's own)
    "legged_compliant": {"domain_rand.friction": [0.25, 0.25], "domain_rand.motor_strength": [0.8, 0.8],
                         "domain_rand.latency_steps": [2, 3], "domain_rand.floor_timeconst": [0.05, 0.05]},
    # the humanoid's (issue 24: a friction + latency + mass gap): friction 0.3 (training 0.5-1.2), every body 20 %
    # heavier (training x0.9-1.1) and two control periods of latency (50 ms at 40 Hz; training 0-1)
    "humanoid": {"domain_rand.friction": [0.3, 0.3], "domain_rand.mass_scale": [1.2, 1.2],
                 "domain_rand.latency_steps": [2, 2]},
}
#: A quadrotor stand-in must keep at least this thrust-to-weight ratio (hover plus a margin to manoeuvre).
MIN_THRUST_TO_WEIGHT = 1.3


def robot_kind(robot: dict) -> str:
    """``quadrotor`` or ``legged`` (the key of :data:`REALITY_GAPS`)."""
    return "quadrotor" if robot.get("kind") == "quadrotor" else "legged"


def default_gap_name(task: str | None, robot: dict) -> str:
    """The key of :data:`REALITY_GAPS` that ``standin.gap: default`` means for a policy of ``task`` on ``robot``:
    the task's own (its spec's ``finetune.gap``) or else its robot kind's (:func:`robot_kind`)."""
    from sim2real.tasks import UnknownTaskError, get_task

    try:
        spec = get_task(str(task)) if task else None
    except UnknownTaskError:
        spec = None
    own = spec.finetune.gap if spec is not None and spec.finetune is not None else None
    return own or robot_kind(robot)


def _get(cfg: dict, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def _set(cfg: dict, dotted: str, value) -> None:
    *head, last = dotted.split(".")
    node = cfg
    for part in head:
        node = node[part]
    node[last] = value


def thrust_to_weight(robot: dict, mass_scale: float = 1.0, thrust_scale: float = 1.0) -> float:
    """Total maximum thrust over weight of a quadrotor robot config with its mass and max motor thrust scaled."""
    gravity = float(robot.get("gravity", 9.81))
    return 4.0 * float(robot["max_motor_thrust"]) * thrust_scale / (float(robot["mass"]) * mass_scale * gravity)


def check_thrust_to_weight(robot: dict, gap: dict) -> float:
    """Thrust-to-weight of the shifted quadrotor; ValueError if below :data:`MIN_THRUST_TO_WEIGHT`."""
    ratio = thrust_to_weight(robot, gap.get("domain_rand.mass_scale", [1.0])[0],
                             gap.get("domain_rand.thrust_scale", [1.0])[0])
    if ratio < MIN_THRUST_TO_WEIGHT:
        raise ValueError(f"the stand-in's thrust-to-weight would be {ratio:.2f} (< {MIN_THRUST_TO_WEIGHT}): it could "
                         "not hover with a margin; use a smaller mass or thrust shift")
    return ratio


def shifted_config(cfg: dict, gap: dict | None = None, *, check_outside: bool = True) -> dict:
    """A copy of the task config ``cfg`` with the robot's reality gap applied (``gap``: dotted overrides, default
    the :data:`REALITY_GAPS` entry :func:`default_gap_name` names for its task and robot). DR stays enabled
    (observation noise and the per-episode draws of the keys the gap does not pin).

    Raises:
        ValueError: a gap key the config lacks; with ``check_outside``, a shifted range that overlaps the
            training range (the gap would not be a gap); a quadrotor that could not hover.
    """
    gap = REALITY_GAPS[default_gap_name(cfg.get("task"), cfg["robot"])] if gap is None else gap
    out = copy.deepcopy(cfg)
    for key, value in gap.items():
        try:
            train_range = _get(cfg, key)
        except (KeyError, TypeError):
            raise ValueError(f"reality gap key '{key}' is not in the task config") from None
        if not (isinstance(train_range, list) and len(train_range) == 2):  # a fixed value (per-motor gains)
            _set(out, key, copy.deepcopy(value))
            continue
        lo, hi = (float(v) for v in value)
        if check_outside:
            t_lo, t_hi = (float(v) for v in train_range)
            if not (hi < t_lo or lo > t_hi):
                raise ValueError(f"reality gap {key}={value} overlaps the training range {train_range}")
        _set(out, key, [type(train_range[0])(v) for v in value])
    out["domain_rand"]["enabled"] = True
    if "adr" in out["domain_rand"]:
        out["domain_rand"]["adr"]["enabled"] = False
    if robot_kind(cfg["robot"]) == "quadrotor":
        check_thrust_to_weight(cfg["robot"], gap)
    return out


class SimulatedRobot:
    """One stand-in robot: the task env (batch 1, evaluation mode) on a shifted config, one control step per call.

    Args:
        cfg: the shifted task config (:func:`shifted_config`).
        seed: seeds the robot's own torch generator state (starts, goals, noise) at construction.
        realtime: pace :meth:`step` to the control period on the wall clock (``time.monotonic``).

    Attributes:
        control_dt: control period [s]; ``steps``: control steps taken; ``robot_time_s``: ``steps * control_dt``.
        period_errors_s: with ``realtime``, the control-period error ``|t_k - t_(k-1) - control_dt|`` [s] of each
        step after the first (the time the step starts, after its paced sleep).
        episode: index of the current episode; ``last_outcome``: dict of the last finished episode
        (``success``, ``crash``, ``pos_error``... as the task env reports them).
        step_state: the robot's state estimate ``[1, S]`` (:func:`~sim2real.tasks.state.state_estimate`) the last
        :meth:`step` ended in (at an episode end: the state it ended in, before the reset), None before any step.
    """

    def __init__(self, cfg: dict, seed: int = 0, realtime: bool = False):
        torch.manual_seed(seed)
        self.env = make_env(cfg, num_envs=1, eval_mode=True)
        self.control_dt = float(self.env.control_dt)
        self.realtime = bool(realtime)
        self.steps = 0
        self.episode = 0
        self.last_outcome: dict | None = None
        self._obs = self.env.get_observations()["policy"]
        # The env resets an ended episode inside step(); keep the observation of the state it ended in (the
        # transition's next state, which a time-out bootstraps from).
        self._terminal_obs: torch.Tensor | None = None
        self._terminal_state: torch.Tensor | None = None
        self.step_state: torch.Tensor | None = None

        def keep_terminal(ids):
            self._terminal_obs = self.env.get_observations()["policy"].clone()
            self._terminal_state = self.state()

        self.env.add_reset_callback(keep_terminal)  # called before the env resets the ended envs
        self._next_tick = time.monotonic()
        self._last_tick: float | None = None
        #: With ``realtime``: per control step after the first, ``|period - control_dt|`` [s] of the paced ticks.
        self.period_errors_s: list[float] = []

    @property
    def robot_time_s(self) -> float:
        return self.steps * self.control_dt

    def observation(self) -> torch.Tensor:
        """The policy observation ``[1, D]`` of the current state (built by the task's ObservationBuilder)."""
        return self._obs

    def state(self) -> torch.Tensor:
        """The robot's current state estimate ``[1, S]`` (a copy; :func:`~sim2real.tasks.state.state_estimate`:
        base pose and twist, and joints for a legged robot): the noise-free simulator state, what a real robot's
        estimator approximates."""
        return state_estimate(self.env.robot_state()).clone()

    def step(self, action: torch.Tensor):
        """Apply ``action`` ``[1, A]`` (normalised) for one control period.

        Returns:
            ``(next_obs [1, D], reward float, terminated bool, truncated bool, next_episode_obs [1, D] | None)``:
            ``next_obs`` is the observation after the step (the transition's next state, also at an episode end);
            at an episode end ``next_episode_obs`` is the first observation of the next episode (the stand-in
            resets itself; a real robot runs its reset behaviour here).
        """
        if self.realtime:
            sleep_until(self._next_tick)  # clock_nanosleep on the absolute deadline
            tick = time.monotonic()
            if self._last_tick is not None:
                self.period_errors_s.append(abs(tick - self._last_tick - self.control_dt))
            self._last_tick = tick
            self._next_tick = max(self._next_tick + self.control_dt, time.monotonic() - self.control_dt)
        env = self.env
        obs, reward, done, extras = env.step(action.reshape(1, -1))
        self.steps += 1
        obs = obs["policy"]
        if bool(done[0]):
            truncated = bool(extras["time_outs"][0])
            next_obs = self._terminal_obs
            self.step_state = self._terminal_state
            self.last_outcome = {k: float(v[0]) for k, v in env.last_outcome.items()}
            self.episode += 1
            self._obs = obs
            return next_obs, float(reward[0]), not truncated, truncated, obs
        self._obs = obs
        self.step_state = self.state()
        return obs, float(reward[0]), False, False, None
