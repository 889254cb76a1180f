"""The transition layout of a recording and its ``std_msgs/msg/Float32MultiArray`` encoding (see
:mod:`sim2real.deploy.recording` for the convention), and the constants every part of a recording shares."""

from __future__ import annotations

import functools
import logging
import struct
from typing import Iterable, Mapping

import numpy as np
from mcap.records import Schema
from mcap.well_known import MessageEncoding
from mcap.writer import LIBRARY_IDENTIFIER as _MCAP_LIBRARY

#: One logger for every part of a recording (its name predates the split into modules).
logger = logging.getLogger("sim2real.deploy.recording")

MCAP_MAGIC = b"\x89MCAP0\r\n"
DEFAULT_TOPIC = "/finetune/transitions"
TRANSITIONS_PREFIX = "transitions"
TOPICS_PREFIX = "topics"
FLOAT32_MULTI_ARRAY = "std_msgs/msg/Float32MultiArray"
_SEPARATOR = "=" * 80
#: The complete ``ros2msg`` definition of ``std_msgs/msg/Float32MultiArray`` (rosbag2's concatenation, comments
#: dropped) embedded so that recording transitions needs no ROS installation; same fields as the installed .msg.
FLOAT32_MULTI_ARRAY_MSGDEF = (
    "MultiArrayLayout layout\nfloat32[] data\n"
    f"{_SEPARATOR}\nMSG: std_msgs/MultiArrayLayout\nMultiArrayDimension[] dim\nuint32 data_offset\n"
    f"{_SEPARATOR}\nMSG: std_msgs/MultiArrayDimension\nstring label\nuint32 size\nuint32 stride\n"
)
#: rosbag2 requires this channel metadata key in the ros2 profile (a YAML list of QoS profiles; empty: defaults).
_ROS2_CHANNEL_METADATA = {"offered_qos_profiles": ""}
_RESERVED_FIELDS = ("time_ns",)
_MAX_SEQUENCE = 2**32 - 1
_RECOVERY_CHUNK_MESSAGES = 1000

_RECORD_HEAD = struct.Struct("<BQ")
_MESSAGE_HEAD = struct.Struct("<BQHIQQ")  # opcode, length, channel id, sequence, log time, publish time
_MESSAGE_FIELDS = struct.Struct("<HIQQ")
_FOOTER_RECORD_SIZE = 9 + 20


def _library() -> str:
    from sim2real import __version__

    return f"sim2real/{__version__} {_MCAP_LIBRARY}"



class RecordingWarning(UserWarning):
    """Data of a recording was lost or could not be read (skipped chunk, truncated file, sequence gap)."""


# ---------------------------------------------------------------------------------------------------------------
# Transition layout and its Float32MultiArray encoding


class TransitionLayout:
    """The ordered fields of one transition: ``(name, size)`` pairs, e.g. ``[("obs", 22), ("reward", 1)]``.

    ``dim`` is the total number of floats, ``slices[name]`` the field's slice of the concatenated values,
    ``sizes[name]`` its size. A field named ``seq`` is filled by the recorder with the assigned sequence number
    (as float32, informational; the exact value is the MCAP sequence). ``time_ns`` is reserved (it is a column of
    :func:`read_transitions`' result).

    Raises:
        ValueError: no fields, a duplicate / empty / reserved name, or a size < 1.
    """

    def __init__(self, fields: Iterable[tuple[str, int]] | Mapping[str, int]):
        if isinstance(fields, Mapping):
            fields = fields.items()
        pairs = []
        for name, size in fields:
            if not isinstance(name, str) or not name or "\x00" in name:
                raise ValueError(f"transition field names must be non-empty strings without NUL, got {name!r}")
            if name in _RESERVED_FIELDS:
                raise ValueError(f"transition field name {name!r} is reserved")
            if int(size) != size or int(size) < 1:
                raise ValueError(f"transition field {name!r} must have an integer size >= 1, got {size!r}")
            pairs.append((name, int(size)))
        if not pairs:
            raise ValueError("a transition layout needs at least one field")
        names = [n for n, _ in pairs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate transition field(s) {dupes}")
        self.fields: tuple[tuple[str, int], ...] = tuple(pairs)
        self.names: tuple[str, ...] = tuple(names)
        self.sizes: dict[str, int] = dict(pairs)
        self.slices: dict[str, slice] = {}
        start = 0
        for name, size in pairs:
            self.slices[name] = slice(start, start + size)
            start += size
        self.dim: int = start

    @classmethod
    def from_sizes(cls, sizes: Mapping[str, int]) -> "TransitionLayout":
        """The layout of ``{name: size}`` in the dict's order."""
        return cls(list(sizes.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TransitionLayout) and self.fields == other.fields

    def __hash__(self) -> int:
        return hash(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __repr__(self) -> str:
        return f"TransitionLayout({list(self.fields)!r})"


@functools.lru_cache(maxsize=32)
def _layout_prefix(layout: TransitionLayout) -> bytes:
    """The CDR bytes of a Float32MultiArray with ``layout``'s dims, up to (excluding) the length of ``data``.

    Encoded once per layout with mcap_ros2's dynamic encoder (the one ``mcap_ros2.writer.Writer`` uses; it has no
    public standalone entry point). ``data_offset`` ends 4-aligned, so ``data`` is its uint32 length then the raw
    little-endian float32s with no padding: ``prefix + <u4 n> + values`` is the full message.
    """
    from mcap_ros2._dynamic import serialize_dynamic

    encode = serialize_dynamic(FLOAT32_MULTI_ARRAY, FLOAT32_MULTI_ARRAY_MSGDEF)[FLOAT32_MULTI_ARRAY]
    dims = [{"label": name, "size": size, "stride": size} for name, size in layout.fields]
    empty = encode({"layout": {"dim": dims, "data_offset": 0}, "data": []})
    if not empty.endswith(b"\x00\x00\x00\x00") or (len(empty) - 4) % 4:  # pragma: no cover - encoder invariant
        raise RuntimeError("unexpected CDR layout of std_msgs/msg/Float32MultiArray")
    return empty[:-4]


def _encode_transition(layout: TransitionLayout, values: np.ndarray) -> bytes:
    return _layout_prefix(layout) + struct.pack("<I", layout.dim) + values.astype("<f4", copy=False).tobytes()


def _decode_float32_multi_array(schema: Schema, data: bytes) -> tuple[list[tuple[str, int, int]], np.ndarray]:
    """(dims as (label, size, stride), data) of a CDR Float32MultiArray, via mcap_ros2's public decoder."""
    from mcap_ros2.decoder import DecoderFactory

    decoder = DecoderFactory().decoder_for(MessageEncoding.CDR, schema)
    msg = decoder(data)
    dims = [(d.label, int(d.size), int(d.stride)) for d in msg.layout.dim]
    return dims, np.asarray(msg.data, dtype=np.float32)
