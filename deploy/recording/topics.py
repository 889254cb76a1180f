"""Live ROS 2 topics: ``ros2msg`` schemas of installed message types and :class:`TopicRecorder`."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from mcap.well_known import MessageEncoding, SchemaEncoding

from sim2real.deploy.recording.layout import _ROS2_CHANNEL_METADATA, _SEPARATOR, TOPICS_PREFIX, TRANSITIONS_PREFIX
from sim2real.deploy.recording.writer import _check_time_ns, _Recorder, _SessionWriter


_MSG_FIELD_TYPE = re.compile(r"(?:^|\n)\s*([a-zA-Z0-9_/]+)(?:\[[^\]]*\])?\s+")  # rosbag2's dependency regex
_PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
               "int64", "uint64", "string", "wstring"}


def ros2_type_name(msg_or_class: Any) -> str:
    """``pkg/msg/Name`` of a rosidl-generated message (instance or class), e.g. ``nav_msgs/msg/Odometry``.

    Raises:
        TypeError: not a generated ROS 2 message.
    """
    cls = msg_or_class if isinstance(msg_or_class, type) else type(msg_or_class)
    parts = cls.__module__.split(".")
    if len(parts) < 3 or parts[1] != "msg" or not hasattr(cls, "get_fields_and_field_types"):
        raise TypeError(f"{cls!r} is not a generated ROS 2 message class")
    return f"{parts[0]}/msg/{cls.__name__}"


def _split_type(type_name: str) -> tuple[str, str]:
    parts = type_name.split("/")
    if len(parts) == 2 or (len(parts) == 3 and parts[1] == "msg"):
        if all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", p) for p in parts):
            return parts[0], parts[-1]
    raise ValueError(f"not a ROS 2 message type name (pkg/msg/Name or pkg/Name): {type_name!r}")


def _share_prefixes(package: str) -> list[Path]:
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    prefixes += [Path(sys.prefix), Path(sys.base_prefix)]
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:  # e.g. <prefix>/lib/python3.x/site-packages/<package>/__init__.py
        prefixes += list(Path(spec.origin).resolve().parents)
    return list(dict.fromkeys(prefixes))


@functools.lru_cache(maxsize=256)
def _load_msg(package: str, name: str) -> str:
    tried = []
    for prefix in _share_prefixes(package):
        path = prefix / "share" / package / "msg" / f"{name}.msg"
        tried.append(str(path))
        if path.is_file():
            return path.read_text()
    raise FileNotFoundError(f"no definition of {package}/msg/{name}; looked at {tried}")


@functools.lru_cache(maxsize=256)
def ros2_msgdef_text(type_name: str) -> str:
    """The complete ``ros2msg`` definition of a message type, as rosbag2 writes it into MCAP schemas.

    The type's installed ``.msg`` text, then each dependency (found with rosbag2's field-type regex, unqualified
    types resolved in the same package, sorted, depth-first, each once) preceded by ``"\\n" + "=" * 80 + "\\n"``
    and ``"MSG: pkg/Name\\n"``. ``.msg`` files are looked up under ``share/<pkg>/msg`` of ``$AMENT_PREFIX_PATH``,
    ``sys.prefix`` and the installed Python package's parents.

    Raises:
        ValueError: a malformed type name. FileNotFoundError: a definition is not installed.
    """
    seen: set[str] = set()

    def expand(package: str, name: str, depth: int) -> str:
        if depth > 64:
            raise ValueError(f"message definition of {type_name} nests too deeply")
        text = _load_msg(package, name)
        deps = set()
        for match in _MSG_FIELD_TYPE.finditer(text):
            field_type = match.group(1)
            if field_type in _PRIMITIVES:
                continue
            deps.add(field_type if "/" in field_type else f"{package}/{field_type}")
        for dep in sorted(deps):
            if dep in seen:
                continue
            seen.add(dep)
            dep_package, dep_name = _split_type(dep)
            text += f"\n{_SEPARATOR}\nMSG: {dep}\n" + expand(dep_package, dep_name, depth + 1)
        return text

    return expand(*_split_type(type_name), 0)


class TopicRecorder(_Recorder):
    """Records live ROS 2 messages of robot topics into segmented, crash-safe MCAP files (``topics-NNNNNN.mcap``).

    Each message is stored CDR-serialised (``rclpy.serialization.serialize_message``) on a channel of its topic
    with the type's complete ``ros2msg`` schema (:func:`ros2_msgdef_text`), ``log_time`` = ``publish_time`` =
    ``time_ns`` (ns since the Unix epoch) and the MCAP ``sequence`` = a session-wide message counter (resumed like
    transitions). Chunking, fsync, segments, resume/recovery and the durability contract are those of
    :class:`TransitionRecorder` (messages instead of transitions). rclpy is imported on first :meth:`write`.
    """

    def __init__(self, directory: str | os.PathLike, prefix: str = TOPICS_PREFIX, *, flush_every: int | None = 100,
                 segment_max_messages: int = 100_000, compression: str = ""):
        if prefix == TRANSITIONS_PREFIX:
            raise ValueError(f"prefix {TRANSITIONS_PREFIX!r} is the transitions' own")
        self._session = _SessionWriter(directory, prefix, flush_every=flush_every,
                                       segment_max_messages=segment_max_messages, compression=compression)

    def write(self, topic: str, msg: Any, time_ns: int | None = None) -> int:
        """Record one ROS 2 message (a rosidl-generated instance) on ``topic``; returns its sequence number.

        Raises:
            TypeError: ``msg`` is not a ROS 2 message. FileNotFoundError: its ``.msg`` definition is not installed.
            ValueError: bad ``time_ns`` / topic. RuntimeError: closed or failed. OSError: an automatic flush failed.
        """
        from rclpy.serialization import serialize_message

        type_name = ros2_type_name(msg)
        return self.write_serialized(topic, type_name, serialize_message(msg), time_ns)

    def write_serialized(self, topic: str, type_name: str, data: bytes, time_ns: int | None = None) -> int:
        """Record an already CDR-serialised message (e.g. from a ``raw=True`` subscription) of ``type_name``."""
        self._session._check_usable()
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty string, got {topic!r}")
        package, name = _split_type(type_name)
        full_name = f"{package}/msg/{name}"
        schema = (full_name, SchemaEncoding.ROS2, ros2_msgdef_text(full_name).encode())
        stamp = _check_time_ns(time_ns)
        return self._session.add(schema, topic, MessageEncoding.CDR, _ROS2_CHANNEL_METADATA, bytes(data), stamp)
