"""Control-step transitions: :class:`TransitionRecorder` writes them, :func:`read_transitions` reads a session's
back, :func:`recorded_layout` tells the layout a session was recorded with (see :mod:`sim2real.deploy.recording` for
the message convention)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
from mcap.records import Schema
from mcap.well_known import MessageEncoding, SchemaEncoding

from sim2real.deploy.recording.layout import (
    _ROS2_CHANNEL_METADATA, DEFAULT_TOPIC, FLOAT32_MULTI_ARRAY, FLOAT32_MULTI_ARRAY_MSGDEF, TRANSITIONS_PREFIX,
    RecordingWarning, TransitionLayout, _decode_float32_multi_array, _encode_transition, _layout_prefix,
)
from sim2real.deploy.recording.recovery import recover_mcap
from sim2real.deploy.recording.writer import _check_time_ns, _list_segments, _Recorder, _SessionWriter


class TransitionRecorder(_Recorder):
    """Records control-step transitions of a fine-tuning session, crash-safely, to segmented MCAP files.

    Args:
        directory: the session directory (created if missing). If it already holds ``transitions-*.mcap``
            segments the session is *resumed*: segments not closed properly are recovered (see module doc;
            reports in ``recovery_reports``) and recording continues at ``highest recovered seq + 1`` in a new
            segment.
        layout: a :class:`TransitionLayout` (or its ``[(name, size), ...]`` / ``{name: size}``).
        topic: the MCAP channel topic of the transitions.
        flush_every: ``append`` calls :meth:`flush` once this many transitions are unacknowledged (None: only
            explicit flushes).
        segment_max_transitions: a segment holding this many transitions is closed and the next append starts a
            new one.
        compression: chunk compression, ``""`` (default), ``"zstd"`` or ``"lz4"``.
        robot_id: the robot that records (a fleet's robots each record apart): stored as the channel metadata
            ``robot_id`` of the transitions' channel (see :func:`recorded_robot_ids`); None: not stored.

    Durability: see :meth:`flush`. A recorder whose write failed (OSError, e.g. disk full) refuses further calls;
    open a new one on the directory to recover what reached the disk.
    """

    def __init__(self, directory: str | os.PathLike, layout: TransitionLayout | Iterable[tuple[str, int]]
                 | Mapping[str, int], *, topic: str = DEFAULT_TOPIC, flush_every: int | None = 100,
                 segment_max_transitions: int = 100_000, compression: str = "", robot_id: str | None = None):
        self._metadata = dict(_ROS2_CHANNEL_METADATA, **({"robot_id": str(robot_id)} if robot_id else {}))
        self.layout = layout if isinstance(layout, TransitionLayout) else TransitionLayout(layout)
        self.topic = topic
        self._schema = (FLOAT32_MULTI_ARRAY, SchemaEncoding.ROS2, FLOAT32_MULTI_ARRAY_MSGDEF.encode())
        _layout_prefix(self.layout)
        self._session = _SessionWriter(directory, TRANSITIONS_PREFIX, flush_every=flush_every,
                                       segment_max_messages=segment_max_transitions, compression=compression)

    def append(self, values: Mapping[str, Any], time_ns: int | None = None) -> int:
        """Record one transition; returns its seq. Flushes automatically every ``flush_every`` transitions.

        Args:
            values: ``{field: value}`` for every field of the layout (a ``seq`` field may be omitted: it is
                filled in; if given it must equal the seq being assigned). Values are array-likes of the field's
                size (scalars for size 1; bools become 0/1), stored as float32.
            time_ns: wall time of the transition in ns since the Unix epoch (default: now).

        Raises:
            ValueError: a field missing, unknown, of the wrong size, non-numeric or not finite (NaN/inf, also
                after the float32 cast), naming the field; a bad ``time_ns``. Nothing is recorded then.
            OverflowError: seq would exceed 2**32 - 1. RuntimeError: the recorder is closed or failed.
            OSError: an automatic flush could not write.
        """
        self._session._check_usable()
        layout = self.layout
        seq = self._session.next_seq
        unknown = [k for k in values if k not in layout.sizes]
        if unknown:
            raise ValueError(f"unknown transition field(s) {unknown}; the layout has {list(layout.names)}")
        flat = np.empty(layout.dim, dtype=np.float32)
        with np.errstate(over="ignore", invalid="ignore"):  # a float32 overflow becomes inf: reported below
            for name, size in layout.fields:
                if name not in values:
                    if name == "seq":
                        flat[layout.slices[name]] = seq
                        continue
                    raise ValueError(f"transition field {name!r} is missing")
                try:
                    arr = np.asarray(values[name], dtype=np.float64).reshape(-1)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"transition field {name!r} is not numeric: {exc}") from None
                if arr.size != size:
                    raise ValueError(f"transition field {name!r} has {arr.size} values, the layout says {size}")
                if name == "seq" and arr[0] != seq:
                    raise ValueError(f"transition field 'seq' is {arr[0]}, but this transition gets seq {seq}")
                flat[layout.slices[name]] = arr
        if not np.isfinite(flat).all():  # one check for all fields (NaN/inf, also overflow of the float32 cast)
            for name in layout.names:
                bad = np.flatnonzero(~np.isfinite(flat[layout.slices[name]]))
                if bad.size:
                    given = np.asarray(values[name], dtype=np.float64).reshape(-1)[bad]
                    raise ValueError(f"transition field {name!r} is not finite at index {bad.tolist()}: "
                                     f"{given.tolist()}")
        stamp = _check_time_ns(time_ns)
        data = _encode_transition(layout, flat)
        return self._session.add(self._schema, self.topic, MessageEncoding.CDR, self._metadata, data, stamp)




def read_transitions(directory: str | os.PathLike, layout: TransitionLayout | Iterable[tuple[str, int]] | None
                     = None, *, topic: str = DEFAULT_TOPIC) -> dict[str, np.ndarray]:
    """All transitions of a session directory (every ``transitions-*.mcap`` segment), sorted by seq.

    Segments that are unclosed or damaged are recovered in memory (files are never modified); skipped chunks,
    truncations and gaps in seq are reported as :class:`RecordingWarning`.

    Args:
        layout: the expected layout; None: taken from the dim labels/sizes of the first message.

    Returns:
        ``{field: float32 [T, size] (size-1 fields: [T]), "seq": int64 [T] (the exact MCAP sequence),
        "time_ns": int64 [T] (log time, ns since the epoch)}``. With no transitions and no layout only ``seq``
        and ``time_ns`` (empty).

    Raises:
        FileNotFoundError: ``directory`` does not exist. ValueError: a seq occurs twice (naming it and its files),
        or a message's dims differ from the layout (naming its seq and file).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no recording directory {directory}")
    if layout is not None and not isinstance(layout, TransitionLayout):
        layout = TransitionLayout(layout)
    found: list[tuple[int, int, bytes, Schema, str]] = []
    for _, path in _list_segments(directory, TRANSITIONS_PREFIX):
        messages, _ = recover_mcap(path)
        for schema, channel, message in messages:
            if channel.topic == topic and schema is not None and schema.name in (
                    FLOAT32_MULTI_ARRAY, "std_msgs/Float32MultiArray"):
                found.append((message.sequence, message.log_time, bytes(message.data), schema, path.name))
    if layout is None and found:
        dims, _ = _decode_float32_multi_array(found[0][3], found[0][2])
        layout = TransitionLayout([(label, size) for label, size, _ in dims])
    if layout is None:
        return {"seq": np.zeros(0, np.int64), "time_ns": np.zeros(0, np.int64)}

    found.sort(key=lambda item: item[0])
    seqs = np.array([f[0] for f in found], dtype=np.int64)
    dup = np.flatnonzero(np.diff(seqs) == 0)
    if dup.size:
        i = int(dup[0])
        raise ValueError(f"transition seq {seqs[i]} is recorded twice (in {found[i][4]} and {found[i + 1][4]})")
    prefix = _layout_prefix(layout)
    expected = [(name, size, size) for name, size in layout.fields]
    size = len(prefix) + 4 + 4 * layout.dim
    payloads = []
    for seq, _, data, schema, name in found:
        if len(data) == size and data.startswith(prefix):
            payloads.append(data[len(prefix) + 4:])
            continue
        try:
            dims, values = _decode_float32_multi_array(schema, data)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"transition seq {seq} in {name} does not decode as Float32MultiArray: {exc}") from None
        if dims != expected or values.size != layout.dim:
            raise ValueError(f"transition seq {seq} in {name} has dims {dims} and {values.size} values; the layout "
                             f"is {expected}")
        payloads.append(values.astype("<f4").tobytes())
    table = np.frombuffer(b"".join(payloads), dtype="<f4").reshape(len(found), layout.dim).astype(np.float32)
    if seqs.size:
        gaps = np.flatnonzero(np.diff(seqs) > 1)
        missing = [(int(seqs[i]) + 1, int(seqs[i + 1]) - 1) for i in gaps]
        if seqs[0] > 0:
            missing.insert(0, (0, int(seqs[0]) - 1))
        for lo, hi in missing:
            warnings.warn(f"{directory}: transitions seq {lo}-{hi} are missing", RecordingWarning, stacklevel=2)
    out: dict[str, np.ndarray] = {}
    for name, fsize in layout.fields:
        column = table[:, layout.slices[name]]
        out[name] = column[:, 0].copy() if fsize == 1 else column.copy()
    out["seq"] = seqs
    out["time_ns"] = np.array([f[1] for f in found], dtype=np.int64)
    return out


def recorded_layout(directory: str | os.PathLike, *, topic: str = DEFAULT_TOPIC) -> TransitionLayout | None:
    """The layout of the first transition recorded in ``directory`` (its dim labels and sizes), or None when no
    transition is recorded there yet (or the directory does not exist). A recorder resuming a session must keep this
    layout: :func:`read_transitions` refuses a session whose messages have different dims. Files are never
    modified; damage is not reported here (:func:`read_transitions` does)."""
    directory = Path(directory)
    for _, path in _list_segments(directory, TRANSITIONS_PREFIX):
        messages, _ = recover_mcap(path, emit_warnings=False)
        for schema, channel, message in messages:
            if channel.topic == topic and schema is not None and schema.name in (
                    FLOAT32_MULTI_ARRAY, "std_msgs/Float32MultiArray"):
                dims, _ = _decode_float32_multi_array(schema, bytes(message.data))
                return TransitionLayout([(label, size) for label, size, _ in dims])
    return None


def recorded_robot_ids(directory: str | os.PathLike, *, topic: str = DEFAULT_TOPIC) -> set[str]:
    """The robot ids (channel metadata ``robot_id``, see :class:`TransitionRecorder`) of the transitions recorded in
    ``directory`` (not its subfolders); a channel recorded without one counts as ``""``. Empty when nothing is
    recorded. Files are never modified."""
    out: set[str] = set()
    for _, path in _list_segments(Path(directory), TRANSITIONS_PREFIX):
        messages, _ = recover_mcap(path, emit_warnings=False)
        out |= {channel.metadata.get("robot_id", "") for _, channel, _ in messages if channel.topic == topic}
    return out
