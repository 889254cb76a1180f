"""The edge actor of a fine-tuning session: the policy that runs on the robot, records and streams every transition,
and takes new policy versions from the learner only when they are verified and only at a safe boundary: between
episodes, or (``swap_at="hold"``) where the held residual is redrawn anyway.

Each control step (:meth:`EdgeActor.act`, then :meth:`EdgeActor.record`):

* the base policy (the session's ``base/policy.onnx``, frozen, normaliser baked in) maps the observation ``o``
  ``[1, D]`` (built by the task's ObservationBuilder, as in training) to ``a_base`` ``[1, A]``;
* every ``hold_steps`` control steps (from each episode's start), the current residual version maps
  ``[o, a_base]`` to ``r`` ``[1, A]`` in (-1, 1), sampled from its squashed Gaussian while fine-tuning (SAC's
  behaviour policy), its mean otherwise; ``r`` is held in between (see :mod:`sim2real.deploy.finetune.residual_sac`);
  version 0 is the zero residual;
* the robot executes ``a = clip(a_base + residual_scale * r)`` within the base policy's action bounds
  (:func:`~sim2real.deploy.finetune.residual_sac.compose_action`);
* the control-step transition is appended to the session's MCAP recording (durable at every flush, see
  :mod:`sim2real.deploy.recording`) with the version that chose it and the robot's state estimate before and after
  the step (:data:`STATE_FIELD`, what system identification replays); each completed hold (``hold_steps`` steps or
  an episode end) becomes one learner transition (:func:`~sim2real.deploy.finetune.residual_sac.macro_transitions`),
  queued for the learner.

At an episode end (:meth:`EdgeActor.end_episode`) the recording is flushed, the queue sent, and the newest package
the learner published is verified (:func:`sim2real.deploy.finetune.policy_package.verify_policy`: session key, newer
version, metadata, parameter names/shapes, finite weights). Only then is it stored in the session and swapped in;
with ``swap_at="hold"`` the newest package is also taken at every hold boundary inside an episode (there the residual
is redrawn anyway, and any version's residual is bounded by the same ``residual_scale`` around the frozen base: a
swap changes the action no more than a redraw does), which keeps the behaviour policy close to the learner's;
a rejected package is logged in ``versions/actor.jsonl`` with its reason, and the robot keeps its current policy.
When the learner stops answering, the actor keeps running its last good version and keeps recording.

On resume the actor restarts on the last version it had accepted (``versions/actor.jsonl``), re-verified from its
stored package, and numbers its episodes after the highest one the session used (recording, metrics, decisions).
Each episode's line in ``metrics.jsonl`` carries ``acked``: every recorded seq below it was durable before the line.
"""

from __future__ import annotations

import logging
import math
import re
import time

import numpy as np
import torch

from sim2real.deploy.finetune.policy_package import PolicyRejected, read_header, verify_policy
from sim2real.configs.durable import sha256_bytes
from sim2real.tasks.state import STATE_ESTIMATE_VERSION
from sim2real.deploy.finetune.residual_sac import (
    ResidualActor, ResidualSpec, actor_template, compose_action, macro_transitions, residual_input,
)

log = logging.getLogger("sim2real.finetune.actor")

#: Fields of one recorded transition besides the vectors sized by the policy (see :func:`transition_sizes`).
SCALAR_FIELDS = ("episode", "step", "version", "reward", "terminated", "truncated", "intervention")
#: The recorded robot state before / after each control step: :func:`~sim2real.tasks.state.state_estimate`, its
#: layout version in the label (a reader refuses a version it does not know; see :func:`is_state_field`).
STATE_FIELD = f"state.v{STATE_ESTIMATE_VERSION}"
NEXT_STATE_FIELD = f"next_state.v{STATE_ESTIMATE_VERSION}"
_STATE_FIELD_RE = re.compile(r"^(next_)?state\.v(\d+)$")


def is_state_field(name: str) -> bool:
    """Whether ``name`` is a recorded state field (``state.v<N>`` / ``next_state.v<N>``, any layout version): data
    for system identification, never a learner input."""
    return _STATE_FIELD_RE.match(name) is not None


def transition_sizes(spec: ResidualSpec, state_dim: int = 0) -> dict[str, int]:
    """Field name -> size of one recorded transition (the MCAP layout; ``seq`` is the MCAP sequence number).

    ``obs``/``next_obs`` ``[D]`` the policy observation before/after the step (units of the observation layout in
    the base policy's metadata); ``base_action``/``next_base_action`` ``[A]`` the base policy's action at each;
    ``residual`` ``[A]`` in [-1, 1]; ``action`` ``[A]`` the executed normalised action; ``reward`` the task's
    reward of the step; ``terminated`` (a true end: crash, safety stop), ``truncated`` (time limit),
    ``intervention`` (the action came from the operator) as 0/1; ``episode``, ``step``, ``version`` integers.

    With ``state_dim`` > 0 also :data:`STATE_FIELD` / :data:`NEXT_STATE_FIELD` ``[S]``: the robot's state estimate
    when the observation was taken and after the step (the state the step ended in, also at an episode end), in the
    layout of :func:`~sim2real.tasks.state.state_estimate_fields` (base position [m], orientation (w, x, y, z),
    linear velocity [m/s] world frame, angular velocity [rad/s] body frame, then joint positions [rad] and
    velocities [rad/s]): what system identification (:mod:`sim2real.deploy.finetune.identify`) replays.
    """
    d, a = spec.obs_dim, spec.action_dim
    sizes = {"episode": 1, "step": 1, "version": 1, "obs": d, "next_obs": d, "base_action": a,
             "next_base_action": a, "residual": a, "action": a, "reward": 1, "terminated": 1, "truncated": 1,
             "intervention": 1}
    if state_dim > 0:
        sizes |= {STATE_FIELD: int(state_dim), NEXT_STATE_FIELD: int(state_dim)}
    return sizes


def recording_layout(recordings_dir, spec: ResidualSpec, state_dim: int = 0):
    """The :class:`~sim2real.deploy.recording.layout.TransitionLayout` a session's actor records with: the one its
    recording already has (a resumed session keeps its layout; one recorded before the state was recorded goes on
    without it, with a warning: identification needs a new session), else :func:`transition_sizes` with the state.
    """
    from sim2real.deploy.recording.layout import TransitionLayout
    from sim2real.deploy.recording.transitions import recorded_layout

    layout = recorded_layout(recordings_dir)
    if layout is None:
        return TransitionLayout.from_sizes(transition_sizes(spec, state_dim))
    if state_dim > 0 and not any(is_state_field(n) for n in layout.names):
        log.warning("this session's recording started without the robot state (an older version): it goes on "
                    "without it; system identification needs a session recorded with the state")
    return layout


def expected_metadata(session, spec: ResidualSpec) -> dict:
    """What every pushed version must carry: the residual's sizes and bound, the session's base policy hash and the
    base policy's observation names (a version trained on another base or layout is refused)."""
    meta = session.base_metadata()
    names = [t["name"] for t in meta["observation"]["policy"]]
    return {**spec.metadata(), "base_sha256": session.base_sha256, "obs_names": names}


class EdgeActor:
    """See the module docstring.

    Args:
        session: the :class:`~sim2real.deploy.finetune.session.FinetuneSession`.
        base: callable ``obs [1, D] tensor -> a_base [1, A] tensor`` (the base ONNX policy).
        spec: the residual's sizes and bound.
        recorder: a :class:`~sim2real.deploy.recording.transitions.TransitionRecorder` on
            ``session.recordings_dir`` (or None: nothing recorded, for evaluation).
        link: an :class:`~sim2real.deploy.finetune.policy_channel.ActorLink` (None: no learner, the control session).
        explore: sample the residual (fine-tuning) instead of its mean (evaluation).
        hold_steps: control steps a residual is held.
        send_every: learner transitions per batch sent (also sent at every episode end).
        seed: seeds the exploration noise.
        init_log_std: version 0's exploration log std (the config's ``learner.init_log_std``, as the learner's).
        swap_at: ``"episode"``: new versions only between episodes; ``"hold"``: also at every hold boundary.
    """

    def __init__(self, session, base, spec: ResidualSpec, *, recorder=None, link=None, explore: bool = True,
                 hold_steps: int = 5, send_every: int = 20, seed: int = 0, init_log_std: float = -1.5,
                 swap_at: str = "episode"):
        if int(hold_steps) < 1:
            raise ValueError(f"hold_steps must be >= 1, got {hold_steps}")
        if swap_at not in ("episode", "hold"):
            raise ValueError(f"swap_at must be 'episode' or 'hold', got {swap_at!r}")
        self.swap_at = swap_at
        self.hold_steps = int(hold_steps)
        self._held: torch.Tensor | None = None
        self._macro_rows: list[dict] = []
        self.session, self.base, self.spec = session, base, spec
        self.recorder, self.link, self.explore = recorder, link, bool(explore)
        self.send_every = int(send_every)
        self.key = session.load_key()
        self.expected = expected_metadata(session, spec)
        self.template = actor_template(spec)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.policy = ResidualActor(spec).zero_(init_log_std)
        self.version, self.version_sha = 0, session.base_sha256
        self.episode, self.step_in_episode = 0, 0
        self._pending: dict[str, list] = {}
        # Learner transitions are numbered from the recording's next seq at start: increasing across resumes.
        self._macro_seq = int(recorder.next_seq) if recorder is not None else 0
        self.rejections: list[tuple[int, str]] = []
        self._learner_was_alive: bool | None = None  # None: not asked yet (a first answer is no return)
        resumed = session.current_actor_version()
        if resumed > 0:
            blob = session.read_version(resumed)
            _, state = verify_policy(blob, self.key, expected_metadata=self.expected, template=self.template,
                                     current_version=resumed - 1)
            self.policy.load_state_dict(state)
            self.version, self.version_sha = resumed, sha256_bytes(blob)
            log.info("resumed on policy version %d", resumed)
        # Episode numbers continue after every episode the session has already used, so a resumed session never
        # reuses one (a reused number would mix two runs, and versions, in one "episode" of the recording). The
        # decisions alone lag: a decision carries the episode it ENDED (the new version runs from the next one),
        # and the last episodes of a stopped or killed run are recorded without a decision or a metrics line.
        seen = [int(d.get("episode") or 0) for d in session.actor_decisions()]
        seen += [int(m["episode"]) for m in session.metrics() if m.get("event") == "episode" and "episode" in m]
        if recorder is not None and recorder.next_seq > 0:
            from sim2real.deploy.recording.transitions import read_transitions

            recorded = read_transitions(recorder.directory).get("episode")  # ~10 ms per 1000 control steps
            if recorded is not None and len(recorded):
                seen.append(int(recorded.max()))
        if seen:
            self.episode = max(seen) + 1

    # --- control -----------------------------------------------------------------------------------------------
    def act(self, obs: torch.Tensor):
        """``(a [1, A], a_base [1, A], r [1, A])`` for the observation ``obs`` ``[1, D]``."""
        obs = torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1)
        base_action = torch.as_tensor(self.base(obs), dtype=torch.float32).reshape(1, -1)
        if self._held is None or self.step_in_episode % self.hold_steps == 0:
            if self.swap_at == "hold" and self.link is not None and self.step_in_episode > 0:
                blobs = self.link.poll()
                if blobs:
                    self.offer(blobs, between_episodes=False)
            self._held = self.policy(residual_input(obs, base_action), deterministic=not self.explore,
                                     generator=self.generator)
        r = self._held
        return compose_action(base_action, r, self.spec), base_action, r

    def record(self, obs, base_action, residual, action, reward: float, next_obs, next_base_action, *,
               terminated: bool, truncated: bool, intervention: bool = False, state=None,
               next_state=None) -> int | None:
        """Record one transition (and queue it for the learner); returns its seq (None without a recorder).

        ``state`` / ``next_state`` ``[S]`` (or ``[1, S]``): the robot's state estimate when ``obs`` was taken and
        after the step; recorded when the recording's layout has the state fields (a ValueError from the recorder
        if they are missing then), ignored otherwise. Never sent to the learner.
        """
        values = {"episode": float(self.episode), "step": float(self.step_in_episode), "version": float(self.version),
                  "obs": obs, "next_obs": next_obs, "base_action": base_action, "next_base_action": next_base_action,
                  "residual": residual, "action": action, "reward": float(reward),
                  "terminated": float(terminated), "truncated": float(truncated), "intervention": float(intervention)}
        values = {k: np.asarray(torch.as_tensor(v).detach().cpu(), dtype=np.float32).reshape(-1)
                  for k, v in values.items()}
        self.step_in_episode += 1
        seq = None
        if self.recorder is not None:
            row = values
            if STATE_FIELD in getattr(getattr(self.recorder, "layout", None), "sizes", {}):
                row = dict(values)
                for name, given in ((STATE_FIELD, state), (NEXT_STATE_FIELD, next_state)):
                    if given is not None:
                        row[name] = np.asarray(torch.as_tensor(given).detach().cpu(), dtype=np.float32).reshape(-1)
            seq = self.recorder.append(row)
        if self.link is None:
            return seq
        self._macro_rows.append(values)
        if len(self._macro_rows) == self.hold_steps or terminated or truncated:
            rows = {k: np.stack([r[k] for r in self._macro_rows]) for k in values}
            self._macro_rows = []
            for k, v in macro_transitions(rows, self.hold_steps).items():
                self._pending.setdefault(k, []).extend(v)
            if len(self._pending.get("reward", ())) >= self.send_every:
                self._send()
        return seq

    def _send(self) -> None:
        if not self._pending.get("reward"):
            return
        arrays = {k: np.stack(v) for k, v in self._pending.items()}
        # Dropped when no learner listens: the recording on disk stays the source of truth.
        self.link.send(self._macro_seq, arrays)
        self._macro_seq += len(arrays["reward"])
        self._pending = {}

    # --- episode boundaries: the only place a version changes ------------------------------------------------------
    def end_episode(self, outcome: dict | None = None) -> int:
        """Close the current episode: flush the recording, send the queue, take the newest verified version.
        ``outcome`` (e.g. success, pos_error) is logged to the session metrics. Returns the version now running."""
        if self.recorder is not None:
            self.recorder.flush()
        if self.link is not None:
            self._send()
            alive = self.link.learner_alive()
            if self._learner_was_alive is None and not alive:
                log.warning("no learner answers (start one: sim2real finetune learner --session ...): transitions are "
                            "recorded, nothing learns, and policy version %d stays in control until one answers",
                            self.version)
            elif self._learner_was_alive and not alive:
                log.warning("the learner stopped answering: keeping policy version %d", self.version)
            elif alive and self._learner_was_alive is False:
                log.info("the learner answers again (policy version %d)", self.version)
            self._learner_was_alive = alive
            blobs = self.link.poll()
            if blobs:
                self.offer(blobs)
        # ``acked``: the recording's seqs below it were durable (flushed, fsynced) before this line was written.
        acked = {"acked": self.recorder.acked} if self.recorder is not None else {}
        # an outcome's NaN (a figure the episode has none of, e.g. standing after a jump it never made) is JSON null
        outcome = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in (outcome or {}).items()}
        self.session.log_metrics({"event": "episode", "episode": self.episode, "version": self.version,
                                  "steps": self.step_in_episode, **acked, **outcome})
        self.episode += 1
        self.step_in_episode = 0
        self._held, self._macro_rows = None, []
        return self.version

    def offer(self, blobs: list[bytes], between_episodes: bool = True) -> bool:
        """Try the offered packages, newest version first; swap to the first that verifies. Returns whether the
        policy changed. Every rejection except a stale version is recorded in ``versions/actor.jsonl``."""
        def version_of(blob):
            try:
                return int(read_header(blob)["version"])
            except Exception:  # malformed: tried (and rejected) last
                return -1

        for blob in sorted(blobs, key=version_of, reverse=True):
            try:
                header, state = verify_policy(blob, self.key, expected_metadata=self.expected,
                                              template=self.template, current_version=self.version)
            except PolicyRejected as exc:
                if exc.reason != "stale_version":
                    log.warning("policy package rejected (%s): %s", exc.reason, exc)
                    self.rejections.append((version_of(blob), exc.reason))
                    self.session.record_actor_decision(max(version_of(blob), 0), sha256_bytes(bytes(blob)),
                                                       accepted=False, reason=f"{exc.reason}: {exc}"[:500],
                                                       episode=self.episode, time_s=time.time())
                continue
            version = int(header["version"])
            if self.session.version_record(version) is None:  # a remote learner: the actor stores what it runs
                try:
                    self.session.publish_version(bytes(blob), version=version, learner_step=header["learner_step"])
                except ValueError as exc:  # e.g. another package already stored under this number: never run it
                    log.warning("policy package version %d not stored, so not run: %s", version, exc)
                    self.rejections.append((version, "not_stored"))
                    self.session.record_actor_decision(version, sha256_bytes(bytes(blob)), accepted=False,
                                                       reason=f"not_stored: {exc}"[:500], episode=self.episode,
                                                       time_s=time.time())
                    continue
            elif self.session.version_record(version)["sha256"] != sha256_bytes(bytes(blob)):
                log.warning("policy package version %d differs from the one stored under that number: not run",
                            version)
                self.rejections.append((version, "not_stored"))
                self.session.record_actor_decision(version, sha256_bytes(bytes(blob)), accepted=False,
                                                   reason="not_stored: another package is stored as this version",
                                                   episode=self.episode, time_s=time.time())
                continue
            self.session.record_actor_decision(version, sha256_bytes(bytes(blob)), accepted=True,
                                               episode=self.episode,
                                               step=None if between_episodes else self.step_in_episode,
                                               time_s=time.time())
            self.policy.load_state_dict(state)
            self.version, self.version_sha = version, sha256_bytes(bytes(blob))
            if between_episodes:
                log.info("policy version %d in control from episode %d", version, self.episode + 1)
            else:
                log.info("policy version %d in control from step %d of episode %d", version, self.step_in_episode,
                         self.episode)
            return True
        return False

    def close(self) -> None:
        if self.link is not None:
            self._send()
        if self.recorder is not None:
            self.recorder.close()
