"""What the live view shows of one robot, built from the ROS 2 messages of its topics (no ROS import: messages are
read by their fields): the state as a JSON-ready dict, the base pose as a ``foxglove.FrameTransform``, and the
body, goal and footstep markers as ``foxglove.SceneEntity``.

A *robot* is a namespace holding robot topics (:data:`ROBOT_TOPICS`, relative names as the deploy nodes, stand-ins
and bridges use them): ``/crazyflie``, ``/go2``, each drone ``/swarm/cf0`` of a swarm.

Frames and conventions: quaternions are w, x, y, z in the JSON (the project's), x, y, z, w in ROS and Foxglove
messages; SI units, angles in radians. The base frame of a robot is ``<namespace without the leading />/base``
(e.g. ``go2/base``), a child of its odometry's ``header.frame_id`` (``world`` for drones, ``odom`` for legged
robots); without odometry (a legged robot on its IMU only) it is placed at the origin of ``world`` with the IMU's
orientation. Odometry twist is in the base frame (``nav_msgs/Odometry`` convention), as the JSON says
(``linear_velocity_b``).
"""

from __future__ import annotations

import math
import time

#: Robot topics, relative to the robot's namespace, and what they carry (see the deploy nodes' docstrings).
ROBOT_TOPICS = (
    "odom", "imu", "joint_states", "contacts", "goal", "estop", "jump_command",
    "cmd/motors", "cmd/ctbr", "cmd/joint_targets", "cmd/joint_gains",
    "footstep_plan", "footstep_plan_poses", "footstep_status", "finetune/goal", "finetune/status",
)
#: A robot's command topics (the policy's output).
COMMAND_TOPICS = ("cmd/motors", "cmd/ctbr")
#: Marker sizes [m]: a drone's body, a legged robot's base, a footstep.
DRONE_BODY = (0.12, 0.12, 0.03)
LEGGED_BODY = (0.45, 0.25, 0.12)
FOOT = (0.22, 0.10, 0.02)
GOAL_DIAMETER = 0.08

_GREEN, _ORANGE, _RED = (0.2, 0.8, 0.3, 0.9), (1.0, 0.6, 0.1, 0.9), (0.9, 0.1, 0.1, 0.9)
_BLUE, _GREY, _GOAL = (0.2, 0.5, 1.0, 0.7), (0.5, 0.5, 0.5, 0.4), (0.1, 0.9, 0.2, 0.8)


def split_robot_topic(topic: str) -> tuple[str, str] | None:
    """``(robot namespace, relative name)`` of a robot topic, e.g. ``/swarm/cf0/cmd/ctbr`` ->
    ``("/swarm/cf0", "cmd/ctbr")``; None for any other topic."""
    for rel in sorted(ROBOT_TOPICS, key=len, reverse=True):
        if topic.endswith("/" + rel):
            ns = topic[: -len(rel) - 1]
            return (ns or "/"), rel
    return None


def base_frame(namespace: str) -> str:
    """The base frame id of the robot at ``namespace`` (``/go2`` -> ``go2/base``)."""
    return (namespace.strip("/") or "robot") + "/base"


def _stamp_s(header) -> float:
    return float(header.stamp.sec) + 1e-9 * float(header.stamp.nanosec)


def _finite(values) -> list[float | None]:
    """JSON has no NaN/Inf: those become null."""
    return [float(v) if math.isfinite(float(v)) else None for v in values]


def _yaw(q) -> float:
    """Heading [rad] of a ROS quaternion (x, y, z, w fields)."""
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def _labels(msg) -> list[str]:
    """Value names of a ``Float32MultiArray`` whose ``layout.dim[0].label`` is the names comma-joined."""
    dims = list(msg.layout.dim)
    names = dims[0].label.split(",") if dims and dims[0].label else []
    return names if len(names) == len(msg.data) else []


def _pose_list(poses) -> list[list[float]]:
    return [[p.position.x, p.position.y, p.position.z, _yaw(p.orientation)] for p in poses]


class RobotView:
    """The latest of each robot topic of one robot, as the live view shows it.

    Args:
        namespace: the robot's namespace (``/go2``).
        joint_names: joint order of the JSON arrays (the robot config's, policy order); None: the order of the
            joint states as they arrive.
    """

    def __init__(self, namespace: str, joint_names: list[str] | None = None):
        self.namespace = namespace
        self.frame = base_frame(namespace)
        self.joint_names = list(joint_names) if joint_names else None
        self.received: dict[str, float] = {}  # relative topic -> time.monotonic() of its latest message
        self.odom = self.imu = self.goal = None
        self.joints: dict[str, tuple[float, float]] = {}
        self.targets: dict[str, float] = {}
        self.gains: dict[str, tuple[float, float]] = {}
        self.command: dict | None = None
        self.estop = False
        self.jump_command: list[float] | None = None
        self.contacts: list[float] | None = None
        self.footstep_status: dict | None = None
        self.plan: dict | None = None
        self.finetune_status: dict | None = None
        self.safety: dict | None = None  # this robot's node diagnostics (set by the caller)

    # --- inputs ---------------------------------------------------------------------------------------------------
    def update(self, rel: str, msg) -> None:
        """Take a message of the robot topic ``rel`` (a deserialised ROS 2 message)."""
        self.received[rel] = time.monotonic()
        if rel == "odom":
            p, q = msg.pose.pose.position, msg.pose.pose.orientation
            v, w = msg.twist.twist.linear, msg.twist.twist.angular
            self.odom = {"frame": msg.header.frame_id or "world", "stamp_s": _stamp_s(msg.header),
                         "position": [p.x, p.y, p.z], "quat_xyzw": [q.x, q.y, q.z, q.w],
                         "linear_velocity_b": [v.x, v.y, v.z], "angular_velocity_b": [w.x, w.y, w.z]}
        elif rel == "imu":
            q, w = msg.orientation, msg.angular_velocity
            self.imu = {"quat_xyzw": [q.x, q.y, q.z, q.w], "angular_velocity": [w.x, w.y, w.z]}
        elif rel == "joint_states":
            vel = list(msg.velocity)
            self.joints = {n: (float(msg.position[i]) if i < len(msg.position) else math.nan,
                               float(vel[i]) if i < len(vel) else math.nan) for i, n in enumerate(msg.name)}
            if self.joint_names is None:
                self.joint_names = list(msg.name)
        elif rel == "cmd/joint_targets":
            self.targets = {n: float(x) for n, x in zip(msg.name, msg.position)}
        elif rel == "cmd/joint_gains":
            self.gains = {n: (float(kp), float(kd)) for n, kp, kd in zip(msg.name, msg.position, msg.velocity)}
        elif rel in COMMAND_TOPICS:
            self.command = {"topic": rel, "names": _labels(msg), "values": _finite(msg.data)}
        elif rel in ("goal", "finetune/goal"):
            p = msg.pose.position
            self.goal = {"topic": rel, "frame": msg.header.frame_id, "position": [p.x, p.y, p.z]}
        elif rel == "estop":
            self.estop = self.estop or bool(msg.data)  # latched, as the nodes latch it
        elif rel == "jump_command":
            self.jump_command = _finite(msg.data)
        elif rel == "contacts":
            self.contacts = _finite(msg.data)
        elif rel == "footstep_status":
            names = _labels(msg) or [f"v{i}" for i in range(len(msg.data))]
            self.footstep_status = dict(zip(names, _finite(msg.data)))
        elif rel == "footstep_plan_poses":
            self.plan = {"frame": msg.header.frame_id, "steps": _pose_list(msg.poses)}
        elif rel == "footstep_plan":
            self.plan = {"frame": msg.header.frame_id, "steps": _pose_list(p.pose for p in msg.poses)}
        elif rel == "finetune/status":
            names = _labels(msg) or [f"v{i}" for i in range(len(msg.data))]
            self.finetune_status = dict(zip(names, _finite(msg.data)))

    @property
    def legged(self) -> bool:
        return bool(self.joints or self.targets)

    # --- outputs --------------------------------------------------------------------------------------------------
    def state(self) -> dict:
        """The JSON state (see :data:`STATE_SCHEMA`)."""
        now = time.monotonic()
        out: dict = {"namespace": self.namespace, "frame": self.frame, "estop": self.estop,
                     "input_age_s": {k: round(now - t, 4) for k, t in sorted(self.received.items())}}
        if self.odom is not None or self.imu is not None:
            src = self.odom if self.odom is not None else self.imu
            x, y, z, w = src["quat_xyzw"]
            base = {"source": "odom" if self.odom is not None else "imu",
                    "quat_wxyz": _finite([w, x, y, z]),
                    "rpy": _finite([math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y)),
                                    math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x)))),
                                    math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))])}
            if self.odom is not None:
                base.update(parent=self.odom["frame"], position=_finite(self.odom["position"]),
                            linear_velocity_b=_finite(self.odom["linear_velocity_b"]),
                            angular_velocity_b=_finite(self.odom["angular_velocity_b"]))
            else:
                base["angular_velocity_b"] = _finite(self.imu["angular_velocity"])
            out["base"] = base
        if self.joints or self.targets:
            names = list(self.joint_names or self.targets)
            pos = [self.joints.get(n, (math.nan, math.nan))[0] for n in names]
            tgt = [self.targets.get(n, math.nan) for n in names]
            out["joints"] = {"names": names, "position": _finite(pos),
                             "velocity": _finite(self.joints.get(n, (math.nan, math.nan))[1] for n in names),
                             "target": _finite(tgt), "error": _finite(t - p for t, p in zip(tgt, pos)),
                             "kp": _finite(self.gains.get(n, (math.nan, math.nan))[0] for n in names),
                             "kd": _finite(self.gains.get(n, (math.nan, math.nan))[1] for n in names)}
        if self.command is not None:
            out["command"] = self.command
        if self.goal is not None:
            goal = dict(self.goal)
            if self.odom is not None:
                goal["error"] = _finite(g - p for g, p in zip(goal["position"], self.odom["position"]))
                goal["distance_m"] = _finite([math.dist(goal["position"], self.odom["position"])])[0]
            out["goal"] = goal
        if self.footstep_status is not None or self.plan is not None:
            out["footsteps"] = {**(self.footstep_status or {}), **({"plan": self.plan} if self.plan else {})}
        for key in ("jump_command", "contacts", "finetune_status"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.safety is not None:
            out["safety"] = self.safety.get("safety")
        return out

    def transform(self):
        """The base pose as a ``foxglove.messages.FrameTransform`` (None before odometry or IMU)."""
        from foxglove.messages import FrameTransform, Quaternion, Timestamp, Vector3

        if self.odom is not None:
            parent, pos, q = self.odom["frame"], self.odom["position"], self.odom["quat_xyzw"]
        elif self.imu is not None:
            parent, pos, q = "world", [0.0, 0.0, 0.0], self.imu["quat_xyzw"]
        else:
            return None
        if not all(math.isfinite(v) for v in (*pos, *q)) or sum(v * v for v in q) < 0.5:
            return None
        return FrameTransform(timestamp=Timestamp.from_epoch_secs(time.time()), parent_frame_id=parent,
                              child_frame_id=self.frame, translation=Vector3(x=pos[0], y=pos[1], z=pos[2]),
                              rotation=Quaternion(x=q[0], y=q[1], z=q[2], w=q[3]))

    def entities(self) -> list:
        """``foxglove.messages.SceneEntity`` markers, ids ``<namespace>/body``, ``/goal``, ``/footsteps``: the body
        (coloured by the safety state: green in control, orange on a fault, red after an e-stop) with its safety
        text, the goal and a line to it, the footsteps (the target step orange, steps done grey)."""
        from foxglove.messages import (
            Color, CubePrimitive, LinePrimitive, Point3, Pose, Quaternion, SceneEntity, SpherePrimitive, TextPrimitive,
            Timestamp, Vector3,
        )

        stamp = Timestamp.from_epoch_secs(time.time())
        color = lambda c: Color(r=c[0], g=c[1], b=c[2], a=c[3])  # noqa: E731
        ident = Quaternion(x=0.0, y=0.0, z=0.0, w=1.0)
        out = []
        safety = (self.safety or {}).get("safety")
        if self.odom is not None or self.imu is not None:
            c = _RED if self.estop else (_GREEN if safety in (None, "policy in control") else _ORANGE)
            size = LEGGED_BODY if self.legged else DRONE_BODY
            label = self.namespace + ("  E-STOP" if self.estop else (f"  {safety}" if safety else ""))
            out.append(SceneEntity(
                timestamp=stamp, frame_id=self.frame, id=f"{self.namespace}/body", frame_locked=True,
                cubes=[CubePrimitive(pose=Pose(position=Vector3(x=0.0, y=0.0, z=0.0), orientation=ident),
                                     size=Vector3(x=size[0], y=size[1], z=size[2]), color=color(c))],
                texts=[TextPrimitive(pose=Pose(position=Vector3(x=0.0, y=0.0, z=size[2] + 0.15), orientation=ident),
                                     billboard=True, font_size=14.0, scale_invariant=True, color=color(c),
                                     text=label)]))
        if self.goal is not None:
            frame = self.goal["frame"] or (self.odom or {}).get("frame", "world")
            g = self.goal["position"]
            lines = []
            if self.odom is not None and self.odom["frame"] == frame:
                p = self.odom["position"]
                lines = [LinePrimitive(pose=Pose(position=Vector3(x=0.0, y=0.0, z=0.0), orientation=ident),
                                       thickness=2.0, scale_invariant=True, color=color(_GOAL),
                                       points=[Point3(x=p[0], y=p[1], z=p[2]), Point3(x=g[0], y=g[1], z=g[2])])]
            out.append(SceneEntity(
                timestamp=stamp, frame_id=frame, id=f"{self.namespace}/goal",
                spheres=[SpherePrimitive(pose=Pose(position=Vector3(x=g[0], y=g[1], z=g[2]), orientation=ident),
                                         size=Vector3(x=GOAL_DIAMETER, y=GOAL_DIAMETER, z=GOAL_DIAMETER),
                                         color=color(_GOAL))], lines=lines))
        if self.plan is not None:
            target = int((self.footstep_status or {}).get("index") or 1)
            cubes = []
            for k, (x, y, z, yaw) in enumerate(self.plan["steps"]):
                q = Quaternion(x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2))
                cubes.append(CubePrimitive(pose=Pose(position=Vector3(x=x, y=y, z=z + FOOT[2] / 2), orientation=q),
                                           size=Vector3(x=FOOT[0], y=FOOT[1], z=FOOT[2]),
                                           color=color(_ORANGE if k == target else (_GREY if k < target else _BLUE))))
            out.append(SceneEntity(timestamp=stamp, frame_id=self.plan["frame"] or "odom",
                                   id=f"{self.namespace}/footsteps", cubes=cubes))
        return out


#: JSON schema of the state channel (``<robot namespace>/viz/state``).
_VEC = {"type": "array", "items": {"type": ["number", "null"]}}
STATE_SCHEMA = {
    "title": "sim2real robot state",
    "type": "object",
    "properties": {
        "namespace": {"type": "string"}, "frame": {"type": "string", "description": "the base frame id"},
        "estop": {"type": "boolean"}, "safety": {"type": ["string", "null"]},
        "input_age_s": {"type": "object", "additionalProperties": {"type": "number"},
                        "description": "seconds since each robot topic's latest message"},
        "base": {"type": "object", "properties": {
            "source": {"type": "string"}, "parent": {"type": "string"}, "position": _VEC, "quat_wxyz": _VEC,
            "rpy": _VEC, "linear_velocity_b": _VEC, "angular_velocity_b": _VEC}},
        "joints": {"type": "object", "properties": {
            "names": {"type": "array", "items": {"type": "string"}}, "position": _VEC, "velocity": _VEC,
            "target": _VEC, "error": _VEC, "kp": _VEC, "kd": _VEC}},
        "command": {"type": "object", "properties": {
            "topic": {"type": "string"}, "names": {"type": "array", "items": {"type": "string"}}, "values": _VEC}},
        "goal": {"type": "object", "properties": {
            "topic": {"type": "string"}, "frame": {"type": "string"}, "position": _VEC, "error": _VEC,
            "distance_m": {"type": ["number", "null"]}}},
        "footsteps": {"type": "object"}, "jump_command": _VEC, "contacts": _VEC, "finetune_status": {"type": "object"},
    },
}
