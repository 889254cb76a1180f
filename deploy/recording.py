"""Crash-safe MCAP recordings of on-robot fine-tuning sessions: control-step transitions and live ROS 2 topics.

What is stored
--------------
A recorder writes a *session directory* of MCAP segments ``<prefix>-000000.mcap``, ``<prefix>-000001.mcap``, ...
(``prefix`` is ``transitions`` for :class:`TransitionRecorder`, ``topics`` for :class:`TopicRecorder`). Every
segment is an ordinary ``ros2`` profile MCAP file (ROS 2 ``.msg`` schemas, CDR messages) that ``mcap``'s
readers, ``ros2 bag`` (``rosbag2_storage_mcap``) and Foxglove read once the segment is closed.

* One transition = one ``std_msgs/msg/Float32MultiArray`` message on ``/finetune/transitions``. Convention:
  ``layout.dim[i]`` describes field ``i`` of the :class:`TransitionLayout` in order: ``label`` = field name,
  ``size`` = number of floats of the field, ``stride`` = ``size`` (each dim is an independent 1-D field, not a
  nested axis), ``layout.data_offset`` = 0, ``data`` = the float32 values of all fields concatenated in dim order
  (field ``i`` starts at the sum of the sizes of the fields before it).
* Every message carries the MCAP ``sequence`` (uint32) = its session-wide sequence number ``seq``: 0, 1, 2, ...
  over the whole session (across segments and resumes), never reused. It is exact, unlike a float32 copy
  (integers above 2**24 do not survive float32). ``log_time`` = ``publish_time`` = wall time of the transition /
  message in **nanoseconds since the Unix epoch**.

File structure and durability
-----------------------------
Segments are written with mcap's record classes (``mcap.records``) rather than ``mcap.writer.Writer``: every
:meth:`flush` writes exactly one *self-contained* Chunk (the Schema and Channel records of the channels it uses,
then its messages; uncompressed CRC32 always set) followed by its Message Index records, then ``flush()`` +
``os.fsync``. mcap's ``Writer.flush()`` would also end a chunk per call, but it puts each Schema/Channel record
only into the *first* chunk, so one damaged first chunk would make every later chunk of a crashed (summary-less)
file undecodable; repeating them per chunk (identical records, allowed by the MCAP spec) makes any single CRC-valid
chunk decodable on its own. ``close()`` appends DataEnd (with the data-section CRC), the summary (schemas,
channels, statistics, chunk indexes, summary offsets), the Footer and the closing magic, then fsyncs. Nothing
needed to recover data is written only at close.

Chunks are uncompressed by default (``compression=""``): no codec is needed to read them back, a damaged chunk
cannot take a decompressor down with it, and transitions compress poorly anyway. ``"zstd"`` / ``"lz4"`` are
accepted when ``zstandard`` / ``lz4`` are installed (the CRC covers the uncompressed bytes either way).

**Durability contract.** When ``flush()`` returns ``acked``, every transition (message) appended to this recorder
before the call, i.e. every ``seq < acked`` not lost to earlier disk corruption, is inside a complete, CRC-checked,
fsynced chunk. After a ``kill -9`` (or power loss after the last fsync) the disk holds at least every acknowledged
transition and at most the ones appended before the kill: appends since the last flush live only in memory, and a
chunk cut short by the kill fails its length/CRC checks and is dropped on recovery. A chunk whose bytes all
reached the page cache before the kill survives it even if ``flush`` did not return, so up to ``flush_every``
unacknowledged transitions may be on disk too.

Recovery
--------
:func:`recover_mcap` scans a file record by record without trusting its summary; a chunk whose CRC, size or inner
records do not check out is skipped with a warning (its byte offset, message count from its message index, and
the sequence range its damaged content suggests); a file ending mid-record ends the scan with a warning, keeping
everything before. Opening a recorder on an existing session directory rewrites every segment that was not closed
properly: the original is kept as ``<name>.damaged`` (a hard link, or a copy where links are unsupported) and
the recovered, properly closed file replaces ``<name>`` atomically (temp file + fsync + ``os.replace`` + fsync of
the directory). Recording then continues at ``seq = highest recovered seq + 1`` in a new segment.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import io
import logging
import os
import re
import shutil
import struct
import sys
import time
import warnings
import zlib
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from mcap.data_stream import ReadDataStream, RecordBuilder
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, ChunkIndex, DataEnd, Footer, Header, Message, MessageIndex, Schema
from mcap.records import Statistics, SummaryOffset
from mcap.well_known import MessageEncoding, Profile, SchemaEncoding
from mcap.writer import LIBRARY_IDENTIFIER as _MCAP_LIBRARY

from sim2real.configs.durable import fsync_dir

__all__ = [
    "DEFAULT_TOPIC", "FLOAT32_MULTI_ARRAY", "FLOAT32_MULTI_ARRAY_MSGDEF", "RecordingWarning", "RecoveryReport",
    "TopicRecorder", "TransitionLayout", "TransitionRecorder", "read_transitions", "recover_mcap",
    "ros2_msgdef_text", "ros2_type_name",
]

logger = logging.getLogger(__name__)

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


# ---------------------------------------------------------------------------------------------------------------
# Recovery: a summary-free, chunk-by-chunk scan


@dataclasses.dataclass
class RecoveryReport:
    """What a scan of one MCAP file found.

    ``messages_kept``: messages in CRC-valid chunks (or unchunked) that decode; ``chunks_kept`` / ``chunks_skipped``;
    ``bytes_truncated``: trailing bytes of an incomplete final record (or of a file without valid magic);
    ``closed``: the file ends with a Footer and the closing magic; ``warnings``: every problem that lost data.
    ``damaged_path``: where a recorder that rewrote the file kept the original (None: not rewritten).
    """

    path: str
    messages_kept: int = 0
    chunks_kept: int = 0
    chunks_skipped: int = 0
    bytes_truncated: int = 0
    closed: bool = False
    warnings: list[str] = dataclasses.field(default_factory=list)
    damaged_path: str | None = None

    @property
    def clean(self) -> bool:
        """Closed properly and nothing lost."""
        return self.closed and not self.warnings


class _ChunkError(Exception):
    def __init__(self, reason: str, sequences: list[int] | None = None):
        super().__init__(reason)
        self.reason = reason
        self.sequences = sequences or []


def _opcode_name(opcode: int) -> str:
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"opcode 0x{opcode:02x}"


def _decompress(compression: str, data: bytes, size: int) -> bytes:
    if compression == "":
        return bytes(data)
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    if compression == "lz4":
        import lz4.frame

        return lz4.frame.decompress(data)
    raise _ChunkError(f"unsupported compression {compression!r}")


def _parse_chunk_records(records: bytes) -> tuple[list[Schema], list[Channel], list[Message]]:
    """Schema, Channel and Message records of a chunk's uncompressed content; raises _ChunkError."""
    schemas, channels, messages = [], [], []
    pos, total = 0, len(records)
    while pos < total:
        if total - pos < 9:
            raise _ChunkError(f"content ends inside a record header at chunk byte {pos}")
        opcode, length = _RECORD_HEAD.unpack_from(records, pos)
        end = pos + 9 + length
        if end > total:
            raise _ChunkError(f"{_opcode_name(opcode)} record at chunk byte {pos} overruns the chunk")
        try:
            if opcode == Opcode.MESSAGE:
                if length < 22:
                    raise ValueError("message record too short")
                channel_id, sequence, log_time, publish_time = _MESSAGE_FIELDS.unpack_from(records, pos + 9)
                messages.append(Message(channel_id, log_time, records[pos + 31:end], publish_time, sequence))
            elif opcode in (Opcode.SCHEMA, Opcode.CHANNEL):
                stream = ReadDataStream(io.BytesIO(records[pos + 9:end]))
                record = (Schema if opcode == Opcode.SCHEMA else Channel).read(stream)
                if stream.count > length:
                    raise ValueError("record overruns its length")
                (schemas if opcode == Opcode.SCHEMA else channels).append(record)
        except Exception as exc:  # noqa: BLE001 - any parse failure makes the chunk unusable
            raise _ChunkError(f"{_opcode_name(opcode)} record at chunk byte {pos} does not parse ({exc})") from None
        pos = end
    return schemas, channels, messages


def _salvage_sequences(records: bytes) -> list[int]:
    """Best-effort sequence numbers of the message records of damaged chunk content (for the warning only)."""
    seqs, pos, total = [], 0, len(records)
    while total - pos >= 9:
        opcode, length = _RECORD_HEAD.unpack_from(records, pos)
        if pos + 9 + length > total:
            break
        if opcode == Opcode.MESSAGE and length >= 22:
            seqs.append(_MESSAGE_FIELDS.unpack_from(records, pos + 9)[1])
        pos += 9 + length
    return seqs


def _read_chunk(body: memoryview) -> tuple[list[Schema], list[Channel], list[Message]]:
    """Verify and parse one Chunk record's content; raises _ChunkError on any inconsistency."""
    if len(body) < 40:
        raise _ChunkError("chunk header is incomplete")
    _, _, uncompressed_size, crc = struct.unpack_from("<QQQI", body, 0)
    (clen,) = struct.unpack_from("<I", body, 28)
    if 32 + clen + 8 > len(body):
        raise _ChunkError("chunk header is malformed")
    try:
        compression = bytes(body[32:32 + clen]).decode()
    except UnicodeDecodeError:
        raise _ChunkError("chunk compression name is not UTF-8") from None
    (dlen,) = struct.unpack_from("<Q", body, 32 + clen)
    start = 40 + clen
    if start + dlen > len(body):
        raise _ChunkError("chunk data overruns the chunk record")
    try:
        records = _decompress(compression, body[start:start + dlen], uncompressed_size)
    except _ChunkError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise _ChunkError(f"chunk does not decompress ({exc})") from None
    if len(records) != uncompressed_size:
        raise _ChunkError(f"uncompressed size {len(records)} != recorded {uncompressed_size}",
                          _salvage_sequences(records))
    if crc != 0:
        actual = zlib.crc32(records)
        if actual != crc:
            raise _ChunkError(f"CRC mismatch (stored 0x{crc:08x}, computed 0x{actual:08x})",
                              _salvage_sequences(records))
    try:
        return _parse_chunk_records(records)
    except _ChunkError as exc:
        exc.sequences = _salvage_sequences(records)
        raise


def recover_mcap(path: str | os.PathLike, *, emit_warnings: bool = True
                 ) -> tuple[list[tuple[Schema | None, Channel, Message]], RecoveryReport]:
    """Every readable message of an MCAP file, in file order, without trusting its summary or footer.

    The record stream (magic, then ``opcode u8 | length u64 LE | content`` records) is scanned from the start.
    Schema/Channel records are collected wherever they appear (data section, chunks, summary); each Chunk is
    decompressed, checked against its uncompressed size and CRC (when nonzero) and parsed; a chunk failing any
    check is skipped, the warning naming its byte offset, the message count of its Message Index records and
    the sequence range its damaged content suggests. A file ending inside a record (e.g. after ``kill -9``) ends
    the scan with a warning; everything before is kept. Unchunked files work too. Nothing is modified.

    Returns:
        ``([(schema or None, channel, message), ...], report)`` like ``mcap``'s ``iter_messages``.

    Raises:
        OSError: the file cannot be read. Problems of its content never raise: they are warnings (issued with
        :class:`RecordingWarning` when ``emit_warnings``) in ``report.warnings``.
    """
    path = Path(path)
    buf = path.read_bytes()
    report = RecoveryReport(path=str(path))
    out: list[tuple[Schema | None, Channel, Message]] = []
    total = len(buf)
    if total < len(MCAP_MAGIC) or buf[:len(MCAP_MAGIC)] != MCAP_MAGIC:
        partial = MCAP_MAGIC.startswith(buf) if total < len(MCAP_MAGIC) else False
        report.bytes_truncated = total
        report.warnings.append(f"{path}: {'file ends inside the MCAP magic' if partial else 'no MCAP magic'} "
                               f"({total} bytes), nothing recovered")
        return _finish_report(out, report, emit_warnings)

    view = memoryview(buf)
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    messages: list[Message] = []
    pending_skip: dict[str, Any] | None = None  # a skipped chunk waiting for its message index counts

    def finish_skip():
        nonlocal pending_skip
        if pending_skip is None:
            return
        text = (f"{path}: skipped the chunk at byte offset {pending_skip['offset']}: {pending_skip['reason']}; "
                f"{pending_skip['indexed'] if pending_skip['indexed'] is not None else 'an unknown number of'} "
                "messages lost")
        seqs = pending_skip["sequences"]
        if seqs:
            text += f" (its damaged content suggests sequence {min(seqs)}..{max(seqs)})"
        report.warnings.append(text)
        pending_skip = None

    pos = len(MCAP_MAGIC)
    while pos < total:
        if total - pos < 9:
            finish_skip()
            report.bytes_truncated = total - pos
            report.warnings.append(f"{path}: file ends inside a record header at byte {pos} "
                                   f"({total - pos} trailing bytes dropped)")
            break
        opcode, length = _RECORD_HEAD.unpack_from(buf, pos)
        end = pos + 9 + length
        if end > total:
            finish_skip()
            report.bytes_truncated = total - pos
            report.warnings.append(f"{path}: file ends inside a {_opcode_name(opcode)} record at byte {pos} "
                                   f"(needs {9 + length} bytes, {total - pos} present; dropped)")
            break
        if opcode != Opcode.MESSAGE_INDEX:
            finish_skip()
        body = view[pos + 9:end]
        if opcode == Opcode.CHUNK:
            try:
                chunk_schemas, chunk_channels, chunk_messages = _read_chunk(body)
            except _ChunkError as exc:
                report.chunks_skipped += 1
                pending_skip = {"offset": pos, "reason": exc.reason, "sequences": exc.sequences, "indexed": None}
            else:
                report.chunks_kept += 1
                for s in chunk_schemas:
                    schemas.setdefault(s.id, s)
                for c in chunk_channels:
                    channels.setdefault(c.id, c)
                messages.extend(chunk_messages)
        elif opcode == Opcode.MESSAGE_INDEX:
            if pending_skip is not None and length >= 6:
                (records_length,) = struct.unpack_from("<I", body, 2)
                pending_skip["indexed"] = (pending_skip["indexed"] or 0) + records_length // 16
        elif opcode in (Opcode.SCHEMA, Opcode.CHANNEL, Opcode.MESSAGE):
            try:
                parsed_schemas, parsed_channels, parsed = _parse_chunk_records(bytes(view[pos:end]))
            except _ChunkError as exc:
                report.warnings.append(f"{path}: skipped the {_opcode_name(opcode)} record at byte offset {pos}: "
                                       f"{exc.reason}")
            else:
                for s in parsed_schemas:
                    schemas.setdefault(s.id, s)
                for c in parsed_channels:
                    channels.setdefault(c.id, c)
                messages.extend(parsed)
        elif opcode == Opcode.FOOTER:
            report.closed = buf[end:end + len(MCAP_MAGIC)] == MCAP_MAGIC
            if not report.closed:
                report.warnings.append(f"{path}: the footer at byte {pos} is not followed by the MCAP magic")
            break
        pos = end
    finish_skip()

    unknown: dict[int, int] = {}
    for message in messages:
        channel = channels.get(message.channel_id)
        schema = None if channel is None or channel.schema_id == 0 else schemas.get(channel.schema_id)
        if channel is None or (channel.schema_id != 0 and schema is None):
            unknown[message.channel_id] = unknown.get(message.channel_id, 0) + 1
            continue
        out.append((schema, channel, message))
    for channel_id, count in unknown.items():
        report.warnings.append(f"{path}: dropped {count} message(s) of channel {channel_id}, whose Channel or "
                               "Schema record was lost")
    return _finish_report(out, report, emit_warnings)


def _finish_report(out, report: RecoveryReport, emit_warnings: bool):
    report.messages_kept = len(out)
    if emit_warnings:
        for text in report.warnings:
            warnings.warn(text, RecordingWarning, stacklevel=3)
    if not report.closed and not report.warnings:
        logger.info("%s was not closed (no footer); all %d messages are intact", report.path, len(out))
    return out, report


def _summary_message_count(path: Path) -> int | None:
    """The message count in a closed MCAP file's summary Statistics record (None: no readable summary)."""
    from mcap.reader import make_reader

    try:
        with open(path, "rb") as f:
            summary = make_reader(f).get_summary()
        return None if summary is None or summary.statistics is None else int(summary.statistics.message_count)
    except Exception:  # noqa: BLE001 - a damaged summary: the caller warns
        return None


def _looks_closed(path: Path) -> bool:
    """The file starts with the magic and ends with a Footer + magic whose summary CRC (if any) checks out."""
    try:
        size = path.stat().st_size
        if size < 2 * len(MCAP_MAGIC) + _FOOTER_RECORD_SIZE:
            return False
        with open(path, "rb") as f:
            if f.read(len(MCAP_MAGIC)) != MCAP_MAGIC:
                return False
            footer_at = size - len(MCAP_MAGIC) - _FOOTER_RECORD_SIZE
            f.seek(footer_at)
            tail = f.read(_FOOTER_RECORD_SIZE + len(MCAP_MAGIC))
            opcode, length, summary_start, summary_offset_start, crc = struct.unpack_from("<BQQQI", tail)
            if opcode != Opcode.FOOTER or length != 20 or tail[_FOOTER_RECORD_SIZE:] != MCAP_MAGIC:
                return False
            if summary_start and crc:
                if not len(MCAP_MAGIC) <= summary_start <= footer_at:
                    return False
                f.seek(summary_start)
                summary = f.read(footer_at - summary_start)
                head = struct.pack("<BQQQ", Opcode.FOOTER, 20, summary_start, summary_offset_start)
                return zlib.crc32(head, zlib.crc32(summary)) == crc
            return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------------------------
# Writing: one segment file, then a directory of segments


def _check_compression(compression: str) -> str:
    if compression not in ("", "zstd", "lz4"):
        raise ValueError(f"compression must be '', 'zstd' or 'lz4', got {compression!r}")
    module = {"zstd": "zstandard", "lz4": "lz4"}.get(compression)
    if module and importlib.util.find_spec(module) is None:
        raise ValueError(f"compression {compression!r} needs the {module} package, which is not installed")
    return compression


class _SegmentWriter:
    """One MCAP file: header at creation (fsynced), one self-contained chunk per ``flush``, summary at ``close``."""

    def __init__(self, path: Path, compression: str = ""):
        self.path = path
        self.compression = compression
        self._file = open(path, "xb")  # never overwrite an existing segment
        self._pos = 0
        self._crc = 0
        self._schemas: dict[tuple, Schema] = {}
        self._channels: dict[tuple, Channel] = {}
        self._channel_by_id: dict[int, Channel] = {}
        self._chunk_indexes: list[ChunkIndex] = []
        self._pending: list[tuple[int, int, int, int, bytes]] = []
        self._counts: dict[int, int] = {}
        self._written = 0
        self._start_time: int | None = None
        self._end_time = 0
        self.closed = False
        b = RecordBuilder()
        Header(profile=Profile.ROS2, library=_library()).write(b)
        self._write(MCAP_MAGIC + b.end())
        self._sync()
        fsync_dir(path.parent)

    @property
    def n_messages(self) -> int:
        return self._written + len(self._pending)

    def schema_id(self, name: str, encoding: str, data: bytes) -> int:
        key = (name, encoding, data)
        if key not in self._schemas:
            self._schemas[key] = Schema(id=len(self._schemas) + 1, data=data, encoding=encoding, name=name)
        return self._schemas[key].id

    def channel_id(self, topic: str, message_encoding: str, schema_id: int, metadata: Mapping[str, str]) -> int:
        key = (topic, message_encoding, schema_id, tuple(sorted(metadata.items())))
        if key not in self._channels:
            channel = Channel(id=len(self._channels) + 1, topic=topic, message_encoding=message_encoding,
                              metadata=dict(metadata), schema_id=schema_id)
            self._channels[key] = channel
            self._channel_by_id[channel.id] = channel
        return self._channels[key].id

    def add(self, channel_id: int, sequence: int, log_time: int, publish_time: int, data: bytes) -> None:
        self._pending.append((channel_id, sequence, log_time, publish_time, data))

    def _write(self, data: bytes) -> None:
        self._file.write(data)
        self._pos += len(data)
        self._crc = zlib.crc32(data, self._crc)

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def flush(self) -> None:
        """Write the pending messages as one complete chunk + message indexes, then flush and fsync."""
        if not self._pending:
            return
        schemas_by_id = {s.id: s for s in self._schemas.values()}
        content = RecordBuilder()
        for channel_id in dict.fromkeys(p[0] for p in self._pending):  # the channels of this chunk, in order
            channel = self._channel_by_id[channel_id]
            if channel.schema_id:
                schemas_by_id[channel.schema_id].write(content)
            channel.write(content)
        records = bytearray(content.end())
        index: dict[int, list[tuple[int, int]]] = {}
        for channel_id, sequence, log_time, publish_time, data in self._pending:
            index.setdefault(channel_id, []).append((log_time, len(records)))
            records += _MESSAGE_HEAD.pack(Opcode.MESSAGE, 22 + len(data), channel_id, sequence, log_time,
                                          publish_time)
            records += data
        records = bytes(records)
        if self.compression == "zstd":
            import zstandard

            payload = zstandard.ZstdCompressor().compress(records)
        elif self.compression == "lz4":
            import lz4.frame

            payload = lz4.frame.compress(records)
        else:
            payload = records
        times = [p[2] for p in self._pending]
        chunk = Chunk(compression=self.compression, data=payload, message_start_time=min(times),
                      message_end_time=max(times), uncompressed_crc=zlib.crc32(records),
                      uncompressed_size=len(records))
        b = RecordBuilder()
        chunk.write(b)
        chunk_bytes = b.end()
        chunk_start = self._pos
        index_start = chunk_start + len(chunk_bytes)
        offsets = {}
        for channel_id, entries in index.items():
            offsets[channel_id] = index_start + b.count
            MessageIndex(channel_id=channel_id, records=sorted(entries)).write(b)
        index_bytes = b.end()
        self._write(chunk_bytes + index_bytes)
        self._sync()
        self._chunk_indexes.append(ChunkIndex(
            message_start_time=chunk.message_start_time, message_end_time=chunk.message_end_time,
            chunk_start_offset=chunk_start, chunk_length=len(chunk_bytes), message_index_offsets=offsets,
            message_index_length=len(index_bytes), compression=self.compression, compressed_size=len(payload),
            uncompressed_size=len(records)))
        for channel_id, *_ in self._pending:
            self._counts[channel_id] = self._counts.get(channel_id, 0) + 1
        self._start_time = min(times) if self._start_time is None else min(self._start_time, min(times))
        self._end_time = max(self._end_time, max(times))
        self._written += len(self._pending)
        self._pending.clear()

    def close(self) -> None:
        """Flush, then DataEnd + summary + Footer + magic, fsync and close the file."""
        if self.closed:
            return
        self.flush()
        b = RecordBuilder()
        DataEnd(data_section_crc=self._crc).write(b)
        self._write(b.end())
        summary_start = self._pos
        summary = RecordBuilder()
        offsets: list[SummaryOffset] = []

        def group(opcode: Opcode, records: Sequence[Any]) -> None:
            if records:
                start = summary.count
                for record in records:
                    record.write(summary)
                offsets.append(SummaryOffset(group_opcode=opcode, group_start=summary_start + start,
                                             group_length=summary.count - start))

        group(Opcode.SCHEMA, list(self._schemas.values()))
        group(Opcode.CHANNEL, list(self._channels.values()))
        group(Opcode.STATISTICS, [Statistics(
            attachment_count=0, channel_count=len(self._channels), channel_message_counts=dict(self._counts),
            chunk_count=len(self._chunk_indexes), message_count=self._written,
            message_end_time=self._end_time, message_start_time=self._start_time or 0, metadata_count=0,
            schema_count=len(self._schemas))])
        group(Opcode.CHUNK_INDEX, self._chunk_indexes)
        summary_offset_start = summary_start + summary.count
        for offset in offsets:
            offset.write(summary)
        summary_bytes = summary.end()
        crc = zlib.crc32(struct.pack("<BQQQ", Opcode.FOOTER, 20, summary_start, summary_offset_start),
                         zlib.crc32(summary_bytes))
        Footer(summary_start=summary_start, summary_offset_start=summary_offset_start, summary_crc=crc).write(b)
        self._write(summary_bytes + b.end() + MCAP_MAGIC)
        self._sync()
        self._file.close()
        self.closed = True

    def abandon(self) -> None:
        """Close the file handle without writing anything more (after a failed write)."""
        self.closed = True
        try:
            self._file.close()
        except OSError:  # pragma: no cover
            pass


def _segment_re(prefix: str, suffix: str = "") -> re.Pattern:
    return re.compile(rf"^{re.escape(prefix)}-(\d{{6,}})\.mcap{suffix}$")


def _list_segments(directory: Path, prefix: str) -> list[tuple[int, Path]]:
    """The segments ``<prefix>-NNNNNN.mcap`` of ``directory``, by index."""
    pattern = _segment_re(prefix)
    found = []
    for entry in directory.iterdir() if directory.is_dir() else ():
        m = pattern.match(entry.name)
        if m and entry.is_file():
            found.append((int(m.group(1)), entry))
    return sorted(found)


def _keep_damaged(path: Path) -> Path:
    """Keep ``path``'s current bytes as ``<path>.damaged`` (``.damaged.N`` if taken by other bytes)."""
    n = 0
    while True:
        damaged = path.with_name(path.name + ".damaged" + (f".{n}" if n else ""))
        if damaged.exists():
            if os.path.samefile(damaged, path):  # an earlier recovery stopped between link and replace
                return damaged
            n += 1
            continue
        try:
            os.link(path, damaged)
        except OSError:  # no hard links here: copy and fsync
            shutil.copyfile(path, damaged)
            with open(damaged, "rb+") as f:
                os.fsync(f.fileno())
        return damaged


def _rewrite_recovered(path: Path, messages: list[tuple[Schema | None, Channel, Message]],
                       report: RecoveryReport, compression: str) -> None:
    """Replace ``path`` by a properly closed file of ``messages``, keeping the original as ``.damaged``."""
    tmp = path.with_name(path.name + ".recovering.tmp")
    if tmp.exists():  # our own leftover of an interrupted recovery; the original is still in place
        tmp.unlink()
    writer = _SegmentWriter(tmp, compression)
    try:
        for schema, channel, message in messages:
            schema_id = 0 if schema is None else writer.schema_id(schema.name, schema.encoding, bytes(schema.data))
            channel_id = writer.channel_id(channel.topic, channel.message_encoding, schema_id, channel.metadata)
            writer.add(channel_id, message.sequence, message.log_time, message.publish_time, bytes(message.data))
            if len(writer._pending) >= _RECOVERY_CHUNK_MESSAGES:
                writer.flush()
        writer.close()
    except BaseException:
        writer.abandon()
        raise
    report.damaged_path = str(_keep_damaged(path))
    os.replace(tmp, path)
    fsync_dir(path.parent)


class _SessionWriter:
    """A session directory of segments: resume/recovery, sequence numbers, flushing, rollover (shared core)."""

    def __init__(self, directory: str | os.PathLike, prefix: str, *, flush_every: int | None,
                 segment_max_messages: int, compression: str):
        if flush_every is not None and (int(flush_every) != flush_every or flush_every < 1):
            raise ValueError(f"flush_every must be an integer >= 1 or None, got {flush_every!r}")
        if int(segment_max_messages) != segment_max_messages or segment_max_messages < 1:
            raise ValueError(f"segment_max_messages must be an integer >= 1, got {segment_max_messages!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.]+", prefix):
            raise ValueError(f"segment prefix must be [A-Za-z0-9_.]+, got {prefix!r}")
        self.directory = Path(directory)
        self.prefix = prefix
        self.flush_every = flush_every
        self.segment_max_messages = int(segment_max_messages)
        self.compression = _check_compression(compression)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.recovery_reports: list[RecoveryReport] = []
        self._segment: _SegmentWriter | None = None
        self._failed: BaseException | None = None
        self.closed = False
        self._resume()

    def _resume(self) -> None:
        segments = _list_segments(self.directory, self.prefix)
        damaged = _segment_re(self.prefix, r"\.damaged(?:\.\d+)?")
        indexes = [i for i, _ in segments] + [int(m.group(1)) for e in self.directory.iterdir()
                                              if (m := damaged.match(e.name))]
        self._next_index = max(indexes) + 1 if indexes else 0
        next_seq, found, lost = 0, False, 0
        for _, path in reversed(segments):  # sequences grow with the segment index: the newest non-empty has the max
            closed = _looks_closed(path)
            if closed and found:
                continue
            messages, report = recover_mcap(path)
            if closed and report.chunks_skipped:
                # A damaged chunk of a closed segment may have held its highest seqs. A segment's seqs are
                # consecutive, so the lost messages (its summary counts them) that are not gaps between the kept
                # ones may lie after them: skip that many seqs, so that no seq is ever reused (a gap in the
                # numbering is harmless, a reuse is not).
                total = _summary_message_count(path)
                if total is None:
                    logger.warning("%s: damaged chunks and no readable summary: seqs may be reused", path)
                else:
                    seqs = [m.sequence for _, _, m in messages]
                    gaps = (max(seqs) - min(seqs) + 1 - len(seqs)) if seqs else 0
                    lost += max(0, total - len(seqs) - gaps)
            if messages:
                next_seq = max(next_seq, 1 + max(m.sequence for _, _, m in messages))
                found = True
            if not closed:
                _rewrite_recovered(path, messages, report, self.compression)
                self.recovery_reports.append(report)
                logger.warning("recovered %s: kept %d messages in %d chunks, skipped %d chunks, dropped %d "
                               "trailing bytes; the original is kept as %s", path, report.messages_kept,
                               report.chunks_kept, report.chunks_skipped, report.bytes_truncated,
                               report.damaged_path)
        self.recovery_reports.reverse()
        next_seq += lost
        self.next_seq = next_seq
        self.acked = next_seq

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise RuntimeError(f"this recorder failed earlier ({self._failed!r}); open a new one on "
                               f"{self.directory} to recover what is on disk") from self._failed
        if self.closed:
            raise RuntimeError("the recorder is closed")

    def add(self, schema: tuple[str, str, bytes], topic: str, message_encoding: str, metadata: Mapping[str, str],
            data: bytes, time_ns: int) -> int:
        self._check_usable()
        if self.next_seq > _MAX_SEQUENCE:
            raise OverflowError(f"sequence numbers are exhausted (MCAP sequence is uint32): {self.next_seq}")
        try:
            if self._segment is not None and self._segment.n_messages >= self.segment_max_messages:
                self._segment.close()
                self.acked = self.next_seq
                self._segment = None
            if self._segment is None:
                path = self.directory / f"{self.prefix}-{self._next_index:06d}.mcap"
                self._segment = _SegmentWriter(path, self.compression)
                self._next_index += 1
        except BaseException as exc:
            self._fail(exc)
            raise
        segment = self._segment
        channel_id = segment.channel_id(topic, message_encoding, segment.schema_id(*schema), metadata)
        seq = self.next_seq
        segment.add(channel_id, seq, time_ns, time_ns, data)
        self.next_seq += 1
        if self.flush_every is not None and self.next_seq - self.acked >= self.flush_every:
            self.flush()
        return seq

    def _fail(self, exc: BaseException) -> None:
        self._failed = exc
        if self._segment is not None:
            self._segment.abandon()

    def flush(self) -> int:
        self._check_usable()
        if self._segment is not None:
            try:
                self._segment.flush()
            except BaseException as exc:
                self._fail(exc)
                raise
        self.acked = self.next_seq
        return self.acked

    def close(self) -> int:
        if self.closed:
            return self.acked
        if self._failed is None and self._segment is not None:
            try:
                self._segment.close()
            except BaseException as exc:
                self._fail(exc)
                raise
            self.acked = self.next_seq
        self.closed = True
        return self.acked


def _check_time_ns(time_ns: int | None) -> int:
    if time_ns is None:
        return time.time_ns()
    if isinstance(time_ns, (bool, float)) or int(time_ns) != time_ns or not 0 <= int(time_ns) < 2**64:
        raise ValueError(f"time_ns must be an integer number of ns since the epoch in [0, 2**64), got {time_ns!r}")
    return int(time_ns)


class _Recorder:
    """What both recorders share: a :class:`_SessionWriter` (``self._session``) and its durability interface."""

    _session: "_SessionWriter"

    @property
    def directory(self) -> Path:
        return self._session.directory

    @property
    def recovery_reports(self) -> list[RecoveryReport]:
        """Reports of the segments recovered when this recorder opened the directory (oldest first)."""
        return self._session.recovery_reports

    @property
    def acked(self) -> int:
        """1 + the highest seq durably on disk (= records written since the session started, unless disk
        corruption destroyed some); every seq below it is acknowledged."""
        return self._session.acked

    @property
    def next_seq(self) -> int:
        """The seq the next record will get."""
        return self._session.next_seq

    @property
    def closed(self) -> bool:
        return self._session.closed

    def flush(self) -> int:
        """Make every record written so far durable; returns ``acked``.

        When it returns, every record written before the call is in a complete chunk (with its CRC) that has
        been written, flushed and ``os.fsync``-ed (and the segment's directory entry was fsynced when it was
        created), so all ``seq < acked`` survive ``kill -9`` and power loss. Raises OSError if the write fails
        (the recorder is then unusable).
        """
        return self._session.flush()

    def close(self) -> int:
        """Flush, finish the current segment properly (summary, footer) and fsync; returns ``acked``. Idempotent."""
        return self._session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


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

    Durability: see :meth:`flush`. A recorder whose write failed (OSError, e.g. disk full) refuses further calls;
    open a new one on the directory to recover what reached the disk.
    """

    def __init__(self, directory: str | os.PathLike, layout: TransitionLayout | Iterable[tuple[str, int]]
                 | Mapping[str, int], *, topic: str = DEFAULT_TOPIC, flush_every: int | None = 100,
                 segment_max_transitions: int = 100_000, compression: str = ""):
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
        return self._session.add(self._schema, self.topic, MessageEncoding.CDR, _ROS2_CHANNEL_METADATA, data, stamp)


# ---------------------------------------------------------------------------------------------------------------
# Reading transitions


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


# ---------------------------------------------------------------------------------------------------------------
# Live ROS 2 topics

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
