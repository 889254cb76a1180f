"""Writing: one MCAP segment file (a self-contained, fsynced chunk per flush), a session directory of segments
(resume and recovery of unclosed ones), and the recorder base class (see :mod:`sim2real.deploy.recording`, "File
structure and durability")."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from mcap.data_stream import RecordBuilder
from mcap.opcode import Opcode
from mcap.records import Channel, Chunk, ChunkIndex, DataEnd, Footer, Header, Message, MessageIndex, Schema
from mcap.records import Statistics, SummaryOffset
from mcap.well_known import Profile

from sim2real.configs.durable import fsync_dir
from sim2real.deploy.recording.layout import (
    _MAX_SEQUENCE, _MESSAGE_HEAD, _RECOVERY_CHUNK_MESSAGES, MCAP_MAGIC, _library, logger,
)
from sim2real.deploy.recording.recovery import RecoveryReport, _looks_closed, _summary_message_count, recover_mcap


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

    def _segment_call(self, method: str) -> None:
        """``flush`` or ``close`` the open segment; a failure marks this writer failed and is raised."""
        try:
            getattr(self._segment, method)()
        except BaseException as exc:
            self._fail(exc)
            raise

    def flush(self) -> int:
        self._check_usable()
        if self._segment is not None:
            self._segment_call("flush")
        self.acked = self.next_seq
        return self.acked

    def close(self) -> int:
        if self.closed:
            return self.acked
        if self._failed is None and self._segment is not None:
            self._segment_call("close")
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
