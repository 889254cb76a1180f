""":class:`DeployWatch`: the run recording and the live view of a deploy (or stand-in) process, fed by the
process's own ROS 2 topics.

The watch runs beside the node(s) of the process without touching them: a ROS 2 context and node of its own
(a second DDS participant of the process), spun in a thread of its own (the default scheduling, below the control
thread's real-time priority), subscribes to every topic under the watched namespaces that has a publisher (and to
``/diagnostics``), CDR-serialised as they arrive (``raw=True``: nothing is decoded for the recording). Topics are
found by looking at the ROS graph every :data:`SCAN_PERIOD_S`; each subscription takes the QoS its publishers
offer (reliable unless one is best-effort; transient-local when all are, so latched maps arrive too).

* Recording: every message goes to a :class:`~sim2real.deploy.recording.topics.TopicRecorder` in the run folder
  (``topics-NNNNNN.mcap``: ROS 2 profile, ``ros2msg`` schemas, CDR; a self-contained, fsynced chunk every
  :data:`FLUSH_EVERY` messages and every :data:`FLUSH_PERIOD_S`, closed properly at the end, Ctrl-C included).
  A recording error is logged once and stops the recording, never the robot.
* Live view (``--viz``): the latest message of each robot topic is decoded :data:`VIZ_RATE_HZ` times a second
  into the channels of :mod:`~sim2real.deploy.watch.live` (and every ROS message is forwarded as received); with a
  recording, the view's own channels also go to ``viz.mcap`` in the run folder.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import signal
import threading
import time
from pathlib import Path

from rclpy.node import Node

from sim2real.deploy.watch.live import SAFETY_SCHEMA, TIMING_SCHEMA, FoxgloveLive, diagnostics_rows, topic_under
from sim2real.deploy.watch.options import VizAddress
from sim2real.deploy.watch.view import STATE_SCHEMA, RobotView, split_robot_topic

#: Seconds between looks at the ROS graph for new topics.
SCAN_PERIOD_S = 0.5
#: The live view's update rate [Hz].
VIZ_RATE_HZ = 20.0
#: The recording is flushed (a durable chunk) every this many messages and every this many seconds.
FLUSH_EVERY = 2000
FLUSH_PERIOD_S = 1.0
#: Topics recorded whatever the namespace.
GLOBAL_TOPICS = ("/diagnostics",)
#: Extra time [s] the watch keeps listening after the node has stopped (its last safe command).
DRAIN_S = 0.3

log = logging.getLogger("sim2real.watch")
_NODE_NUMBERS = itertools.count()


def message_class(type_name: str):
    """The rosidl message class of ``pkg/msg/Name``."""
    package, _, name = type_name.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


class DeployWatch:
    """Record and/or show the topics under ``namespaces`` (a context manager; see the module docstring).

    Args:
        namespaces: watched namespaces; the first is the one the view's shared channels go under.
        viz: where the Foxglove server listens (None: no live view). The port is bound here, at construction:
            a busy port is a :class:`ConfigError` before any ROS traffic.
        run_dir: the run folder to record to (None: no recording); removed at the end if nothing was recorded.
        joint_names: joint order of the state's joint arrays for the robot at ``namespaces[0]``.
        name: the server's name shown in Foxglove.
    """

    def __init__(self, namespaces: list[str], *, viz: VizAddress | None = None, run_dir: Path | None = None,
                 joint_names: list[str] | None = None, name: str = "sim2real"):
        self.namespaces = ["/" + ns.strip("/") for ns in namespaces]
        self.root = self.namespaces[0]
        self.run_dir = run_dir
        self.joint_names = joint_names
        self.goals: dict[str, list[float]] = {}  # initial goals by robot namespace (see RobotView.goal)
        self.live = FoxgloveLive(viz, name=name) if viz is not None else None
        self.recorder = None
        self._stack = None
        self._spin = None
        self.node = None
        self.closed = False

    @property
    def url(self) -> str | None:
        return None if self.live is None else self.live.url

    def __enter__(self) -> "DeployWatch":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Open the recording, then the watch's own ROS context and node, spun in a thread."""
        import contextlib

        from sim2real.deploy.ros_runtime import BackgroundSpin, ros_context

        if self.run_dir is not None:
            from sim2real.deploy.recording.topics import TopicRecorder

            self.recorder = TopicRecorder(self.run_dir, flush_every=FLUSH_EVERY)
            if self.live is not None:
                self.live.record_view(self.run_dir / "viz.mcap")
        self._stack = contextlib.ExitStack()
        ctx = self._stack.enter_context(ros_context())
        self.node = _WatchNode(self, ctx)
        self._spin = BackgroundSpin(ctx, self.node)
        self._spin.__enter__()

    def close(self) -> dict:
        """Stop listening (after :data:`DRAIN_S`), close the recording and the view; Ctrl-C is held off meanwhile
        so that the files are finished properly. Returns the summary (:meth:`summary`). Idempotent."""
        if self.closed:
            return self.summary()
        self.closed = True
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if self._spin is not None:
                time.sleep(DRAIN_S)
                try:
                    self._spin.stop()
                except Exception as exc:  # noqa: BLE001 - a failed callback must not keep the files open
                    log.error("watch: %s", exc)
            if self.node is not None:
                self.node.destroy_node()
            if self._stack is not None:
                self._stack.close()
            if self.recorder is not None and not self.recorder.closed:
                try:
                    self.recorder.close()
                except Exception as exc:  # noqa: BLE001
                    log.error("closing the recording failed: %s", exc)
            if self.live is not None:
                self.live.close()
            if self.run_dir is not None and self.recorded == 0 and self.run_dir.is_dir():
                for p in sorted(self.run_dir.iterdir()):  # nothing recorded: no empty run folder is left
                    p.unlink()
                self.run_dir.rmdir()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        return self.summary()

    @property
    def recorded(self) -> int:
        return 0 if self.node is None else sum(self.node.counts.values())

    def summary(self) -> dict:
        """``{"run_dir", "messages", "topics": {topic: count}, "files"}`` of the recording."""
        counts = {} if self.node is None else dict(sorted(self.node.counts.items()))
        files = sorted(str(p) for p in self.run_dir.glob("*.mcap")) if self.run_dir and self.run_dir.is_dir() else []
        return {"run_dir": None if self.run_dir is None else str(self.run_dir), "messages": sum(counts.values()),
                "topics": counts, "files": files}


class _WatchNode(Node):
    """The watch's ROS node and its callbacks (all in the watch's spin thread)."""

    def __init__(self, watch: DeployWatch, context):
        super().__init__(f"sim2real_watch_{os.getpid()}_{next(_NODE_NUMBERS)}", namespace="/", context=context,
                         enable_rosout=False, start_parameter_services=False)
        self._setup(watch)

    def _setup(self, watch: DeployWatch) -> None:
        self.watch = watch
        self.counts: dict[str, int] = {}
        self.types: dict[str, str] = {}
        self.refused: set[str] = set()
        self._subs: dict[str, object] = {}
        self._latest: dict[str, tuple[str, bytes]] = {}
        self.views: dict[str, RobotView] = {}
        self.diagnostics: dict[str, tuple[dict, dict]] = {}
        self.obstacles = None
        self.world = None
        self._recording_failed = False
        self.create_timer(SCAN_PERIOD_S, self._scan)
        if watch.live is not None:
            self.create_timer(1.0 / VIZ_RATE_HZ, self._update_view)
        if watch.recorder is not None:
            self.create_timer(FLUSH_PERIOD_S, self._flush)
        self._scan()

    # --- topics ---------------------------------------------------------------------------------------------------
    def _watched(self, topic: str) -> bool:
        if topic in GLOBAL_TOPICS:
            return True
        return any(ns == "/" or topic == ns or topic.startswith(ns + "/") for ns in self.watch.namespaces)

    def _scan(self) -> None:
        from sim2real.deploy.recording.topics import ros2_msgdef_text

        for topic, types in self.get_topic_names_and_types():
            if topic in self._subs or topic in self.refused or not self._watched(topic):
                continue
            publishers = self.get_publishers_info_by_topic(topic)
            if not publishers:
                continue  # subscribed to only: wait for a publisher, whose QoS the subscription takes
            type_name = types[0]
            try:
                cls = message_class(type_name)
                msgdef = ros2_msgdef_text(type_name)
            except Exception as exc:  # noqa: BLE001 - a type this process cannot load is not recorded
                self.refused.add(topic)
                self.get_logger().warning(f"not recording {topic} ({type_name}): {exc}")
                continue
            self.types[topic] = type_name
            self.counts.setdefault(topic, 0)
            self._subs[topic] = self.create_subscription(
                cls, topic, lambda data, t=topic, n=type_name, d=msgdef: self._on_message(t, n, d, data),
                _matching_qos(publishers), raw=True)
            self.get_logger().info(f"{'recording' if self.watch.recorder is not None else 'watching'} {topic} "
                                   f"({type_name})")

    def _on_message(self, topic: str, type_name: str, msgdef: str, data: bytes) -> None:
        now = time.time_ns()
        self.counts[topic] += 1
        watch = self.watch
        if watch.recorder is not None and not self._recording_failed:
            try:
                watch.recorder.write_serialized(topic, type_name, data, now)
            except Exception as exc:  # noqa: BLE001 - the robot goes on; the recording stops
                self._recording_failed = True
                self.get_logger().error(f"recording stopped: {type(exc).__name__}: {exc}")
        if watch.live is not None:
            self._latest[topic] = (type_name, data)
            try:
                watch.live.log_ros(topic, type_name, msgdef, data, now)
                if topic == "/diagnostics":
                    self._on_diagnostics(self._decode(type_name, data))
            except Exception as exc:  # noqa: BLE001 - the view never stops the recording
                self.get_logger().error(f"live view: {topic}: {type(exc).__name__}: {exc}", throttle_duration_sec=5.0)

    def _flush(self) -> None:
        recorder = self.watch.recorder
        if recorder is None or self._recording_failed or recorder.closed:
            return
        try:
            recorder.flush()
        except Exception as exc:  # noqa: BLE001
            self._recording_failed = True
            self.get_logger().error(f"recording stopped: {type(exc).__name__}: {exc}")

    # --- the live view --------------------------------------------------------------------------------------------
    @staticmethod
    def _decode(type_name: str, data: bytes):
        from rclpy.serialization import deserialize_message

        return deserialize_message(data, message_class(type_name))

    def _on_diagnostics(self, msg) -> None:
        now = time.monotonic()
        for status in msg.status:
            if self._watched(status.hardware_id or "") or any(
                    status.name.startswith(ns + "/") for ns in self.watch.namespaces):
                self.diagnostics[status.name] = diagnostics_rows(status, now)

    def _view(self, ns: str) -> RobotView:
        view = self.views.get(ns)
        if view is None:
            joints = self.watch.joint_names if ns == self.watch.root else None
            view = self.views[ns] = RobotView(ns, joints)
            if ns in self.watch.goals:
                view.goal = {"topic": "command line", "frame": "", "position": list(self.watch.goals[ns])}
        return view

    def _update_view(self) -> None:
        """The view's timer: an error is logged (throttled) and never stops the recording."""
        try:
            self._publish_view()
        except Exception as exc:  # noqa: BLE001
            self.get_logger().error(f"live view update failed: {type(exc).__name__}: {exc}", throttle_duration_sec=5.0)

    def _publish_view(self) -> None:
        latest, self._latest = self._latest, {}
        root = self.watch.root
        for topic, (type_name, data) in latest.items():
            try:
                msg = self._decode(type_name, data)
            except Exception:  # noqa: BLE001 - a message this process cannot decode is left out of the view
                continue
            split = split_robot_topic(topic)
            if topic == "/diagnostics":
                continue  # (taken as it arrives)
            if split is not None:
                self._view(split[0]).update(split[1], msg)
            elif topic == topic_under(root, "obstacles"):
                self.obstacles = [[p.position.x, p.position.y] for p in msg.poses]
            elif topic == topic_under(root, "world"):
                self.world = list(msg.data)
        live = self.watch.live
        now = time.monotonic()
        rows = sorted(self.diagnostics.values(), key=lambda r: r[0]["node"])
        safety_rows = [{k: v for k, v in s.items() if k != "received_s"} | {"age_s": round(now - s["received_s"], 3)}
                       for s, _ in rows]
        for view in self.views.values():
            mine = [s for s in safety_rows if s.get("namespace") == view.namespace]
            view.safety = mine[0] if mine else None
        transforms = [t for t in (v.transform() for v in self.views.values()) if t is not None]
        if transforms:
            live.log_transforms(topic_under(root, "viz/tf"), transforms)
        entities = []
        for ns, view in self.views.items():
            entities += view.entities()
            live.log_json(topic_under(ns, "viz/state"), STATE_SCHEMA, view.state())
        entities += self._obstacle_entities()
        if entities:
            live.log_scene(topic_under(root, "viz/scene"), entities)
        estop = any(v.estop for v in self.views.values())
        levels = [s["level"] for s in safety_rows]
        worst = max(levels, key=["OK", "WARN", "ERROR", "STALE"].index) if levels else "STALE"
        live.log_json(topic_under(root, "viz/safety"), SAFETY_SCHEMA,
                      {"level": "ERROR" if estop else worst, "estop": estop, "nodes": safety_rows})
        live.log_json(topic_under(root, "viz/timing"), TIMING_SCHEMA, {"nodes": [t for _, t in rows]})

    def _obstacle_entities(self) -> list:
        """A swarm room's columns (``<ns>/obstacles`` centres, ``<ns>/world`` radius and height)."""
        if not self.obstacles or not self.world or len(self.world) < 3:
            return []
        from foxglove.messages import Color, CylinderPrimitive, Pose, Quaternion, SceneEntity, Timestamp, Vector3

        height, radius = float(self.world[1]), float(self.world[2])
        cylinders = [CylinderPrimitive(pose=Pose(position=Vector3(x=x, y=y, z=height / 2),
                                                 orientation=Quaternion(x=0.0, y=0.0, z=0.0, w=1.0)),
                                       size=Vector3(x=2 * radius, y=2 * radius, z=height), bottom_scale=1.0,
                                       top_scale=1.0, color=Color(r=0.6, g=0.6, b=0.6, a=0.5))
                     for x, y in self.obstacles]
        return [SceneEntity(timestamp=Timestamp.from_epoch_secs(time.time()), frame_id="world",
                            id=f"{self.watch.root}/obstacles", cylinders=cylinders)]


def _matching_qos(publishers):
    """A subscription QoS every publisher of the topic matches: reliable unless one is best-effort,
    transient-local when all are (rosbag2's rule); keep the last 1000 (10 s of a 100 Hz topic: a recorder stalled
    for a second, e.g. while the deploy's control thread and a busy machine hold the cores, must not lose what
    arrived meanwhile; with 100 a run's recording kept 99 of about 350 odometry messages)."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    reliable = all(p.qos_profile.reliability == ReliabilityPolicy.RELIABLE for p in publishers)
    latched = all(p.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in publishers)
    return QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def watch_from_args(args, robot: dict, namespaces: list[str], *, record: bool) -> DeployWatch | None:
    """The watch of a ``sim2real deploy`` / ``standin`` run: ``--viz [HOST:]PORT`` (bound now) and, with
    ``record``, a run folder under ``--runs-root`` (created when the watch starts). None when neither.

    Raises:
        ConfigError: a bad ``--viz`` value, or a port that cannot be bound (one line; before any ROS traffic).
    """
    from sim2real.configs import ConfigError
    from sim2real.deploy.watch.options import deploy_runs_root, parse_viz_address

    viz_text = getattr(args, "viz", None)
    try:
        viz = None if viz_text is None else parse_viz_address(viz_text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if viz is None and not record:
        return None
    joints = list(robot.get("joint_names") or []) if robot.get("kind") == "legged" else None
    watch = _RunWatch(namespaces, viz=viz, joint_names=joints, name=f"sim2real {robot.get('name', '')}".strip())
    watch.robot = robot
    watch.goals = _initial_goals(args, watch.root)
    watch.runs_root = deploy_runs_root(getattr(args, "runs_root", None)) if record else None
    watch.drones = getattr(args, "drones", None)
    return watch


def _initial_goals(args, root: str) -> dict[str, list[float]]:
    """Goals given on the command line (``--goal``; a swarm's ``--goals``), by robot namespace: what the view shows
    as the goal until a goal message arrives."""
    from sim2real.deploy.ros_names import drone_names, parse_positions

    if getattr(args, "drones", None) is not None:
        try:
            names = drone_names(args.drones)
            positions = parse_positions(args.goals) if getattr(args, "goals", None) else []
        except ValueError:
            return {}  # (the node refuses them, naming why)
        return {f"{root.rstrip('/')}/{n}": list(p) for n, p in zip(names, positions)}
    goal = getattr(args, "goal", None)
    return {} if goal is None else {root: [float(x) for x in goal]}


class _RunWatch(DeployWatch):
    """A :class:`DeployWatch` that creates its run folder on start (nothing is left behind by a run refused
    before it starts), writes the run's Foxglove layout there and says on stdout where it records and serves."""

    robot: dict
    runs_root: Path | None = None
    drones: str | None = None

    def start(self) -> None:
        from sim2real.deploy.watch.layout import write_layout
        from sim2real.deploy.watch.options import new_run_dir

        if self.runs_root is not None:
            self.run_dir = new_run_dir(self.runs_root, str(self.robot.get("name", "robot")))
            write_layout(self.run_dir / "layout.json", [self._tab()])
            print(f"recording to {self.run_dir}/ (topics-*.mcap; Foxglove layout: {self.run_dir}/layout.json)",
                  flush=True)
        if self.live is not None:
            print(f"live view: {self.url} (Foxglove: Open connection > Foxglove WebSocket; layout: "
                  "deploy/foxglove/layout.json)", flush=True)
        super().start()

    def _tab(self) -> tuple:
        if self.drones is not None:
            from sim2real.deploy.ros_names import drone_names

            try:
                names = drone_names(self.drones)
            except ValueError:
                names = []
            return (f"swarm {self.root}", "swarm", self.root, names)
        kind = "legged" if self.robot.get("kind") == "legged" else "quadrotor"
        return (f"{kind} {self.root}", kind, self.root, self.joint_names)

    def close(self) -> dict:
        was_closed = self.closed
        summary = super().close()
        if not was_closed and self.runs_root is not None and self.run_dir is not None:
            if summary["messages"]:
                print(f"recorded {summary['messages']} messages on {len(summary['topics'])} topics to "
                      f"{self.run_dir}/ ({', '.join(Path(f).name for f in summary['files'])})", flush=True)
            else:
                print(f"nothing recorded: removed {self.run_dir}/", flush=True)
        return summary
