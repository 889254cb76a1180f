"""A recorded session for the viewer: the robot's poses over time from the MCAP topics a
:class:`~sim2real.deploy.recording.topics.TopicRecorder` wrote (a fine-tuning session's ``recordings/``).

Recordings hold no body poses: they are rebuilt by forward kinematics of the robot's MuJoCo model from the base
pose of ``nav_msgs/msg/Odometry`` (the first odometry topic) and the joint positions of
``sensor_msgs/msg/JointState`` messages (matched to the model's joints by name). A ``geometry_msgs/msg/PoseStamped``
on a topic ending in ``goal`` is drawn as the goal marker. Frames are sampled every ``dt`` from the first to the
last odometry message (log times), each holding the latest message of every topic at or before it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mujoco
import numpy as np

from sim2real.configs import ConfigError, load_robot
from sim2real.deploy.finetune.session import BASE_DIR, METADATA_FILE, RECORDINGS_DIR, SESSION_FILE
from sim2real.deploy.recording.layout import TOPICS_PREFIX, TRANSITIONS_PREFIX
from sim2real.sim.markers import TARGET_RGBA, Marker
from sim2real.sim.scene import SceneTrace, TraceRecorder, quadrotor_model

ODOMETRY = "nav_msgs/msg/Odometry"
JOINT_STATE = "sensor_msgs/msg/JointState"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
#: Radius [m] of the drawn goal (a sphere in the goal colour of the task markers' palette).
GOAL_RADIUS = 0.03
#: Most frames of a recorded session's trace (a longer session is sampled more coarsely).
MAX_FRAMES = 20_000


def read_topics(directory: str | Path, types: tuple[str, ...] = (ODOMETRY, JOINT_STATE, POSE_STAMPED)
                ) -> dict[str, tuple[str, list[tuple[int, object]]]]:
    """The messages of ``directory``'s ``topics-*.mcap`` segments whose schema is one of ``types``: topic ->
    (type name, [(log time ns, decoded message)] in time order).

    Raises:
        FileNotFoundError: no segment in ``directory``.
        ConfigError: a segment that cannot be read (one line; recover it by opening a recorder on the folder).
    """
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    paths = sorted(Path(directory).glob(f"{TOPICS_PREFIX}-*.mcap"))
    if not paths:
        raise FileNotFoundError(f"view --recording: no {TOPICS_PREFIX}-*.mcap (the robot's topics) in {directory}: "
                                f"{_holds(Path(directory))}")
    out: dict[str, tuple[str, list]] = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                for schema, channel, message, decoded in make_reader(
                        f, decoder_factories=[DecoderFactory()]).iter_decoded_messages(
                        topics=None, log_time_order=False):
                    if schema is not None and schema.name in types:
                        out.setdefault(channel.topic, (schema.name, []))[1].append((int(message.log_time), decoded))
        except Exception as exc:  # mcap's own errors: a damaged or unfinished segment
            raise ConfigError(f"view --recording: cannot read {path} ({type(exc).__name__}: {exc}); a recorder "
                              f"opened on the folder recovers unfinished segments") from None
    for _, messages in out.values():
        messages.sort(key=lambda m: m[0])
    return out


def _holds(folder: Path) -> str:
    """What a folder without topic recordings holds, in words (for the error saying so)."""
    if not folder.is_dir():
        return "no such folder"
    files = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    transitions = [f for f in files if f.startswith(f"{TRANSITIONS_PREFIX}-") and f.endswith(".mcap")]
    if transitions:
        return (f"it holds {len(transitions)} {TRANSITIONS_PREFIX}-*.mcap (what 'sim2real finetune run' records: the "
                f"policy's observations and actions, no robot poses to draw); the robot's topics are recorded by "
                f"'sim2real deploy --finetune' on ROS 2")
    if not files:
        return "it is empty"
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return f"it holds {shown}"


def _session_robot(path: Path, robot: str | None) -> tuple[dict, Path, str]:
    """(robot config, recordings folder, title) of a fine-tuning session folder or a plain recordings folder."""
    if (path / SESSION_FILE).is_file():
        if robot is not None:
            raise ConfigError("view --robot: a fine-tuning session names its own robot (its base policy's)")
        info = json.loads((path / SESSION_FILE).read_text())
        meta = json.loads((path / BASE_DIR / METADATA_FILE).read_text())
        return meta["training"]["task_config"]["robot"], path / RECORDINGS_DIR, \
            f"{info.get('task', meta.get('task', '?'))} session {path.name}"
    if robot is None:
        raise ConfigError(f"view --recording {path}: not a fine-tuning session (no {SESSION_FILE}): name the robot "
                          f"with --robot")
    return load_robot(robot), path, f"recording {path.name}"


def robot_model(robot: dict) -> mujoco.MjModel:
    """The MuJoCo model a recording of ``robot`` is drawn with: a quadrotor's visual stand-in, a legged robot's
    MJCF as the simulation compiles it (floor included).

    Raises:
        ConfigError: another robot kind, or a model that does not compile.
    """
    kind = robot.get("kind")
    if kind == "quadrotor":
        return quadrotor_model(robot)
    if kind == "legged":
        from sim2real.sim.mujoco_model import build_model

        return build_model(robot)[0]
    raise ConfigError(f"view --recording: robot kind {kind!r} cannot be drawn (quadrotor or legged)")


def _check_joint_names(topics: dict, joints: dict, robot: str) -> None:
    """A one-line warning on stderr when the recording's joint states do not fit ``robot``'s model (``joints``:
    its joint names): none of its joints recorded (a recording of another robot, e.g. a drone's opened with a
    legged robot), or joint states recorded for a robot without joints."""
    recorded = sorted({name for kind, messages in topics.values() if kind == JOINT_STATE
                       for _, msg in messages for name in msg.name})
    shown = ", ".join(recorded[:4]) + (f" and {len(recorded) - 4} more" if len(recorded) > 4 else "")
    problem = None
    if joints and not recorded:
        problem = (f"it holds no {JOINT_STATE} messages: {robot}'s {len(joints)} joints stay in their default "
                   f"pose")
    elif joints and not set(recorded) & set(joints):
        problem = (f"its joint states name none of {robot}'s {len(joints)} joints (recorded: {shown}): they stay "
                   f"in their default pose")
    elif recorded and not joints:
        problem = f"its joint states name joints ({shown}) and {robot} has none"
    if problem is not None:
        print(f"warning: view --recording: {problem}; a recording of another robot? (--robot names the robot)",
              file=sys.stderr)


def _latest(times: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the latest time <= each ``t`` (0 before the first)."""
    return np.clip(np.searchsorted(times, t, side="right") - 1, 0, None)


def record_session(path: str | Path, robot: str | None = None, dt: float = 0.02) -> SceneTrace:
    """The :class:`SceneTrace` (one scene) of a recorded session: ``path`` is a fine-tuning session folder (its
    robot is its base policy's) or a folder of ``topics-*.mcap`` (``robot``: a robot config name or YAML path).
    Frames every ``dt`` s (coarser when the session would have more than :data:`MAX_FRAMES`).

    Raises:
        FileNotFoundError: no such folder, or no recordings in it.
        ConfigError: no odometry recorded, ``robot`` missing or given for a session, or see :func:`read_topics`
            and :func:`robot_model`.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"view --recording: {path}: no such folder")
    robot_cfg, folder, title = _session_robot(path, robot)
    topics = read_topics(folder)
    odom = sorted(t for t, (kind, _) in topics.items() if kind == ODOMETRY)
    if not odom:
        raise ConfigError(f"view --recording: {folder} holds no {ODOMETRY} messages (the base pose)")
    model = robot_model(robot_cfg)
    kinds = [int(k) for k in model.jnt_type]
    free = [j for j in range(model.njnt) if kinds[j] == int(mujoco.mjtJoint.mjJNT_FREE)]
    if not free:
        raise ConfigError("view --recording: the robot's model has no free joint to put the recorded base pose on")
    base = int(model.jnt_qposadr[free[0]])
    joint_adr = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j): int(model.jnt_qposadr[j])
                 for j in range(model.njnt) if kinds[j] in (int(mujoco.mjtJoint.mjJNT_HINGE),
                                                            int(mujoco.mjtJoint.mjJNT_SLIDE))}

    pose_msgs = topics[odom[0]][1]
    pose_t = np.array([t for t, _ in pose_msgs], dtype=np.int64)
    span_s = (pose_t[-1] - pose_t[0]) / 1e9
    dt = max(float(dt), span_s / (MAX_FRAMES - 1))
    frames_t = pose_t[0] + (np.arange(int(span_s / dt) + 1) * dt * 1e9).astype(np.int64)
    qpos = np.tile(model.qpos0, (len(frames_t), 1))
    for row, k in enumerate(_latest(pose_t, frames_t)):
        p = pose_msgs[k][1].pose.pose
        qpos[row, base:base + 7] = (p.position.x, p.position.y, p.position.z,
                                    p.orientation.w, p.orientation.x, p.orientation.y, p.orientation.z)
    _check_joint_names(topics, joint_adr, robot_cfg.get("name", robot or "the robot"))
    for kind, messages in topics.values():
        if kind != JOINT_STATE:
            continue
        times = np.array([t for t, _ in messages], dtype=np.int64)
        for row, k in enumerate(_latest(times, frames_t)):
            if times[k] > frames_t[row]:
                continue  # no joint state yet: the model's default pose
            msg = messages[k][1]
            for name, value in zip(msg.name, msg.position):
                if name in joint_adr:
                    qpos[row, joint_adr[name]] = value
    goals = [(t, m) for t, (kind, m) in topics.items() if kind == POSE_STAMPED and t.rstrip("/").endswith("goal")]
    recorder = TraceRecorder([model], [title])
    goal_t = np.array([t for t, _ in goals[0][1]], dtype=np.int64) if goals else None
    for row, t in enumerate(frames_t):
        markers = []
        if goal_t is not None and goal_t[0] <= t:
            p = goals[0][1][int(_latest(goal_t, np.array([t]))[0])][1].pose.position
            markers.append(Marker("goal", "sphere", (GOAL_RADIUS,), TARGET_RGBA, (p.x, p.y, p.z)))
        recorder.add(qpos[row:row + 1], [markers])
    return recorder.trace(title, dt)
