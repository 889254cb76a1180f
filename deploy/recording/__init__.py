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

Modules
-------
* :mod:`~sim2real.deploy.recording.layout`: :class:`TransitionLayout`, its Float32MultiArray encoding, the shared
  constants and :class:`RecordingWarning`;
* :mod:`~sim2real.deploy.recording.recovery`: :func:`recover_mcap` and :class:`RecoveryReport`;
* :mod:`~sim2real.deploy.recording.writer`: segment files, session directories and the recorder base class;
* :mod:`~sim2real.deploy.recording.transitions`: :class:`TransitionRecorder`, :func:`read_transitions` and
  :func:`recorded_layout`;
* :mod:`~sim2real.deploy.recording.topics`: :class:`TopicRecorder` and the ROS 2 ``.msg`` schemas.
"""
