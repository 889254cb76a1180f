"""The Foxglove side of the live view: the SDK's WebSocket server, its channels, and the ``viz.mcap`` copy of the
view (:class:`FoxgloveLive`); the node diagnostics as the safety and timing tables (:func:`diagnostics_rows`).

Channels, under the watched namespace ``<ns>`` (``/crazyflie``, ``/go2``, ``/swarm``) and each robot's namespace
``<robot>`` (the same as ``<ns>`` for one robot, ``<ns>/<drone>`` in a swarm):
  * ``<ns>/viz/tf`` (``foxglove.FrameTransforms``): each robot's base frame in its odometry frame;
  * ``<ns>/viz/scene`` (``foxglove.SceneUpdate``): body, safety text, goal, footsteps (see
    :meth:`~sim2real.deploy.watch.view.RobotView.entities`), a swarm's obstacle columns;
  * ``<robot>/viz/state`` (JSON, :data:`~sim2real.deploy.watch.view.STATE_SCHEMA`): the robot's state, command,
    goal, footsteps;
  * ``<ns>/viz/safety`` (JSON, :data:`SAFETY_SCHEMA`): each deploy node's safety state and level from its
    ``/diagnostics``, and the e-stop;
  * ``<ns>/viz/timing`` (JSON, :data:`TIMING_SCHEMA`): each deploy node's control-clock timing from its
    ``/diagnostics``;
  * every recorded ROS 2 topic under its own name (``ros2msg`` schema, CDR), as in the recording.
"""

from __future__ import annotations

import math
from pathlib import Path

from sim2real.configs import ConfigError
from sim2real.deploy.watch.options import VizAddress

#: The view's own channels carry this in their name (``viz.mcap`` keeps only them).
VIZ_SEGMENT = "/viz/"
_LEVELS = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}
#: Diagnostic values that are text, not numbers.
_TEXT_VALUES = ("safety", "scheduling")

SAFETY_SCHEMA = {
    "title": "sim2real safety", "type": "object",
    "properties": {
        "level": {"type": "string", "description": "worst level of the nodes: OK, WARN, ERROR, STALE"},
        "estop": {"type": "boolean", "description": "an e-stop was seen (latched)"},
        "nodes": {"type": "array", "items": {"type": "object", "properties": {
            "node": {"type": "string"}, "level": {"type": "string"}, "safety": {"type": "string"},
            "age_s": {"type": "number"}}}},
    },
}
TIMING_SCHEMA = {
    "title": "sim2real control timing", "type": "object",
    "properties": {"nodes": {"type": "array", "items": {"type": "object", "properties": {
        "node": {"type": "string"}, "rate_hz": {"type": "number"}, "period_error_p50_ms": {"type": "number"},
        "period_error_p99_ms": {"type": "number"}, "compute_p50_us": {"type": "number"},
        "compute_p99_us": {"type": "number"}, "inference_p50_us": {"type": "number"},
        "inference_p99_us": {"type": "number"}, "overruns": {"type": "number"}, "skipped": {"type": "number"},
        "ticks": {"type": "number"}, "scheduling": {"type": "string"}}}}},
}


def topic_under(namespace: str, name: str) -> str:
    """``<namespace>/<name>`` (``/`` + name at the root)."""
    return f"{namespace.rstrip('/')}/{name}"


def diagnostics_rows(status, received_s: float) -> tuple[dict, dict]:
    """``(safety row, timing row)`` of one deploy node's ``diagnostic_msgs/DiagnosticStatus`` (see
    :meth:`~sim2real.deploy.nodes.base.PolicyLifecycleNode.diagnostics`); numbers as floats (NaN: None)."""
    values = {kv.key: kv.value for kv in status.values}
    level = status.level if isinstance(status.level, int) else int.from_bytes(bytes(status.level), "little")
    node = status.name.rsplit(": ", 1)[0] if ": " in status.name else status.name
    safety = {"node": node, "level": _LEVELS.get(level, str(level)),
              "safety": values.get("safety", status.message), "message": status.message,
              "namespace": status.hardware_id, "received_s": received_s}
    timing = {"node": node}
    for key, text in values.items():
        if key in _TEXT_VALUES:
            if key != "safety":
                timing[key] = text
            continue
        try:
            value = float(text)
        except ValueError:
            timing[key] = text
            continue
        timing[key] = value if math.isfinite(value) else None
    return safety, timing


class FoxgloveLive:
    """The Foxglove SDK's WebSocket server on ``address`` with a context of its own (only this view's channels).

    Raises:
        ConfigError: the SDK is not installed, or the address cannot be bound (busy port, unknown host, no
            permission), one line naming ``--viz``.
    """

    def __init__(self, address: VizAddress, name: str = "sim2real"):
        try:
            import foxglove
        except ImportError as exc:
            raise ConfigError(f"--viz needs the Foxglove SDK (pip install foxglove-sdk): {exc}") from None
        self._foxglove = foxglove
        self.address = address
        self.context = foxglove.Context()
        try:
            self.server = foxglove.start_server(name=name, host=address.host, port=address.port,
                                                context=self.context)
        except (RuntimeError, OSError, ValueError) as exc:
            reason = str(exc).replace("FoxgloveError: ", "")
            raise ConfigError(f"--viz {address.host}:{address.port}: cannot listen there: {reason}") from None
        self.port = int(self.server.port)
        self.url = address.url(self.port)
        self._channels: dict[str, object] = {}
        self._mcap = None
        self.mcap_path: Path | None = None

    def record_view(self, path: Path) -> None:
        """Also write the view's own channels (``.../viz/...``) to an MCAP file at ``path`` (closed by
        :meth:`close`)."""
        self._mcap = self._foxglove.open_mcap(str(path), context=self.context,
                                              channel_filter=lambda ch: VIZ_SEGMENT in ch.topic)
        self.mcap_path = path

    def _channel(self, topic: str, make):
        channel = self._channels.get(topic)
        if channel is None:
            channel = self._channels[topic] = make()
        return channel

    def log_json(self, topic: str, schema: dict, message: dict) -> None:
        """Log ``message`` on the JSON channel ``topic`` (created with ``schema`` on first use)."""
        self._channel(topic, lambda: self._foxglove.Channel(topic, schema=schema, context=self.context)).log(message)

    def log_transforms(self, topic: str, transforms: list) -> None:
        from foxglove.channels import FrameTransformsChannel
        from foxglove.messages import FrameTransforms

        self._channel(topic, lambda: FrameTransformsChannel(topic, context=self.context)).log(
            FrameTransforms(transforms=transforms))

    def log_scene(self, topic: str, entities: list) -> None:
        from foxglove.channels import SceneUpdateChannel
        from foxglove.messages import SceneUpdate

        self._channel(topic, lambda: SceneUpdateChannel(topic, context=self.context)).log(
            SceneUpdate(entities=entities))

    def log_ros(self, topic: str, type_name: str, msgdef: str, data: bytes, time_ns: int) -> None:
        """Forward a CDR-serialised ROS 2 message as received (schema: its ``ros2msg`` definition)."""
        def make():
            schema = self._foxglove.Schema(name=type_name, encoding="ros2msg", data=msgdef.encode())
            return self._foxglove.Channel(topic, schema=schema, message_encoding="cdr", context=self.context)

        channel = self._channel(topic, make)
        if channel.has_sinks():
            channel.log(bytes(data), log_time=time_ns)

    def close(self) -> None:
        """Close ``viz.mcap`` (properly finished) and stop the server. Idempotent."""
        mcap, self._mcap = self._mcap, None
        if mcap is not None:
            mcap.close()
        server, self.server = getattr(self, "server", None), None
        if server is not None:
            server.stop()
