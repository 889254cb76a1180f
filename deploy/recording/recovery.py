"""Recovery: a summary-free, chunk-by-chunk scan of an MCAP file that keeps every CRC-valid chunk (see
:mod:`sim2real.deploy.recording`, "Recovery")."""

from __future__ import annotations

import dataclasses
import io
import os
import struct
import warnings
import zlib
from pathlib import Path
from typing import Any

from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import Channel, Message, Schema

from sim2real.deploy.recording.layout import (
    _FOOTER_RECORD_SIZE, _MESSAGE_FIELDS, _RECORD_HEAD, MCAP_MAGIC, RecordingWarning, logger,
)


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


def _collect(schemas: dict, channels: dict, messages: list, new_schemas, new_channels, new_messages) -> None:
    """Add decoded records to a scan's: the first schema and channel of each id are kept, messages appended."""
    for s in new_schemas:
        schemas.setdefault(s.id, s)
    for c in new_channels:
        channels.setdefault(c.id, c)
    messages.extend(new_messages)


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
                _collect(schemas, channels, messages, chunk_schemas, chunk_channels, chunk_messages)
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
                _collect(schemas, channels, messages, parsed_schemas, parsed_channels, parsed)
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
