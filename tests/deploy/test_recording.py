"""Crash-safe MCAP recordings of fine-tuning sessions (sim2real.deploy.recording): round trips through mcap's own
readers, kill -9 of a recording process, damaged and truncated files, input validation, live ROS 2 topics."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap.stream_reader import CRCValidationError, StreamReader
from mcap_ros2.decoder import DecoderFactory

from sim2real.deploy.recording.layout import (
    FLOAT32_MULTI_ARRAY, FLOAT32_MULTI_ARRAY_MSGDEF, RecordingWarning, TransitionLayout,
)
from sim2real.deploy.recording.recovery import recover_mcap
from sim2real.deploy.recording.topics import TopicRecorder, ros2_msgdef_text
from sim2real.deploy.recording.transitions import TransitionRecorder, read_transitions

CHILD = Path(__file__).with_name("recording_child.py")
_spec = importlib.util.spec_from_file_location("recording_child", CHILD)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)

LAYOUT = TransitionLayout(child.LAYOUT)
SEPARATOR = "=" * 80


def expected(seqs) -> dict[str, np.ndarray]:
    """The deterministic fields of ``seqs`` as read_transitions returns them (float32; its ``seq`` is the exact
    int64 MCAP sequence, checked separately)."""
    rows = [child.transition_values(int(s)) for s in seqs]
    out = {}
    for name, size in LAYOUT.fields:
        if name != "seq":
            col = np.array([np.asarray(r[name], dtype=np.float64).reshape(-1) for r in rows]).astype(np.float32)
            out[name] = col[:, 0] if size == 1 else col
    return out


def record(directory, seqs, **kwargs) -> TransitionRecorder:
    rec = TransitionRecorder(directory, LAYOUT, **kwargs)
    for s in seqs:
        assert rec.append(child.transition_values(s), time_ns=child.time_of(s)) == s
    return rec


def assert_transitions(data: dict, seqs) -> None:
    seqs = np.asarray(seqs, dtype=np.int64)
    np.testing.assert_array_equal(data["seq"], seqs)
    assert data["seq"].dtype == np.int64
    np.testing.assert_array_equal(data["time_ns"], [child.time_of(int(s)) for s in seqs])
    for name, col in expected(seqs).items():
        assert data[name].dtype == np.float32 and data[name].shape == col.shape, name
        np.testing.assert_array_equal(data[name], col, err_msg=name)


def segments(directory) -> list[Path]:
    return sorted(Path(directory).glob("transitions-*.mcap"))


def chunk_indexes(path) -> list:
    with open(path, "rb") as f:
        return sorted(make_reader(f).get_summary().chunk_indexes, key=lambda c: c.chunk_start_offset)


# --------------------------------------------------------------------------------------------------------------


def test_layout():
    layout = TransitionLayout.from_sizes({"obs": 3, "reward": 1, "action": 2})
    assert layout.dim == 6 and layout.names == ("obs", "reward", "action")
    assert layout.slices == {"obs": slice(0, 3), "reward": slice(3, 4), "action": slice(4, 6)}
    assert LAYOUT.dim == 64
    for bad in ([], [("a", 1), ("a", 2)], [("a", 0)], [("", 1)], [("time_ns", 1)]):
        with pytest.raises(ValueError):
            TransitionLayout(bad)


def test_round_trip_read_by_mcap_standard_reader(tmp_path):
    rng = np.random.default_rng(7)
    layout = TransitionLayout([("seq", 1), ("obs", 5), ("action", 2), ("reward", 1), ("done", 1)])
    obs = rng.standard_normal((250, 5)).astype(np.float32)
    action = rng.uniform(-1, 1, (250, 2)).astype(np.float32)
    reward = rng.standard_normal(250).astype(np.float32)
    done = (np.arange(250) % 50 == 49)
    times = 1_700_000_000_123_456_789 + np.arange(250, dtype=np.int64) * 20_000_000
    rec = TransitionRecorder(tmp_path, layout, flush_every=100)
    acks = []
    for i in range(250):
        assert rec.append({"obs": obs[i], "action": action[i], "reward": reward[i], "done": done[i]},
                          time_ns=int(times[i])) == i
        acks.append(rec.acked)
    assert acks[98] == 0 and acks[99] == 100 and acks[199] == 200 and acks[249] == 200  # auto flush every 100
    assert rec.close() == 250 and rec.acked == 250

    data = read_transitions(tmp_path)  # layout from the dim labels
    np.testing.assert_array_equal(data["seq"], np.arange(250))
    np.testing.assert_array_equal(data["time_ns"], times)
    np.testing.assert_array_equal(data["obs"], obs)
    np.testing.assert_array_equal(data["action"], action)
    np.testing.assert_array_equal(data["reward"], reward)
    np.testing.assert_array_equal(data["done"], done.astype(np.float32))
    np.testing.assert_array_equal(data["seq"], read_transitions(tmp_path, layout)["seq"])

    (path,) = segments(tmp_path)
    assert path.name == "transitions-000000.mcap"
    with open(path, "rb") as f:
        reader = make_reader(f, validate_crcs=True, decoder_factories=[DecoderFactory()])
        assert reader.get_header().profile == "ros2"
        summary = reader.get_summary()
        assert summary.statistics.message_count == 250
        assert [c.uncompressed_size > 0 for c in summary.chunk_indexes] == [True] * 3  # one chunk per flush
        decoded = list(reader.iter_decoded_messages())
    assert len(decoded) == 250
    for i, (schema, channel, message, msg) in enumerate(decoded):
        assert schema.name == FLOAT32_MULTI_ARRAY and schema.encoding == "ros2msg"
        assert channel.topic == "/finetune/transitions" and channel.message_encoding == "cdr"
        assert message.sequence == i and message.log_time == message.publish_time == times[i]
        assert [(d.label, d.size, d.stride) for d in msg.layout.dim] == [
            ("seq", 1, 1), ("obs", 5, 5), ("action", 2, 2), ("reward", 1, 1), ("done", 1, 1)]
        assert msg.layout.data_offset == 0
        np.testing.assert_array_equal(np.asarray(msg.data, np.float32),
                                      np.concatenate([[i], obs[i], action[i], [reward[i]], [done[i]]]))
    # the linear (non-seeking) reader validates the data-section CRC of DataEnd as well
    with open(path, "rb") as f:
        records = list(StreamReader(f, validate_crcs=True).records)
    assert sum(type(r).__name__ == "Message" for r in records) == 250


def test_encoding_is_what_rclpy_serialises():
    """The CDR of a transition is rclpy's serialisation of the same Float32MultiArray (up to the value of padding
    bytes, which rclpy leaves uninitialised), and the embedded schema equals the installed .msg files'
    concatenation field for field."""
    from mcap_ros2._dynamic import serialize_dynamic
    from rclpy.serialization import deserialize_message, serialize_message
    from std_msgs.msg import Float32MultiArray, MultiArrayDimension

    from sim2real.deploy.recording.layout import _encode_transition

    layout = TransitionLayout([("obs", 3), ("reward", 1), ("label_of_odd_length", 2)])
    values = np.array([1.5, -2.25, 3e-3, 7.0, -0.0, 1e30], dtype=np.float32)
    msg = Float32MultiArray()
    msg.layout.dim = [MultiArrayDimension(label=n, size=s, stride=s) for n, s in layout.fields]
    msg.data = values.tolist()
    ours = _encode_transition(layout, values)
    theirs = serialize_message(msg)
    assert len(ours) == len(theirs)
    differing = [i for i in range(len(ours)) if ours[i] != theirs[i]]
    assert all(ours[i] == 0 for i in differing) and len(differing) <= 3  # padding after odd-length labels
    assert deserialize_message(ours, Float32MultiArray) == msg
    installed = ros2_msgdef_text(FLOAT32_MULTI_ARRAY)
    assert installed.count(SEPARATOR) == 2 and "MSG: std_msgs/MultiArrayLayout" in installed
    as_dict = {"layout": {"dim": [{"label": n, "size": s, "stride": s} for n, s in layout.fields],
                          "data_offset": 0}, "data": values.tolist()}
    for text in (installed, FLOAT32_MULTI_ARRAY_MSGDEF):
        assert serialize_dynamic(FLOAT32_MULTI_ARRAY, text)[FLOAT32_MULTI_ARRAY](as_dict) == ours


@pytest.mark.parametrize("delay_s", [0.0, 0.004, 0.009])
def test_kill_9_mid_recording_loses_no_acknowledged_transition(tmp_path, delay_s):
    """The child appends ~50 transitions per 5 ms: the delays land the kill at different phases of its
    append/flush cycle (the bounds below hold whichever)."""
    flush_every, segment_max = 50, 400
    proc = subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), str(flush_every), str(segment_max)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = 0
    try:
        while seen < 1000:
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"the recording child ended early: {proc.stderr.read()}")
            assert line.startswith("ACK ")
            seen = int(line.split()[1])
        time.sleep(delay_s)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        rest, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    # ACKs the child printed after the one that triggered the kill (still in the pipe when it died)
    printed = [seen] + [int(line.split()[1]) for line in rest.splitlines()]
    last_ack = printed[-1]
    assert printed == sorted(printed) and all(a % flush_every == 0 for a in printed)

    before = {p.name: p.read_bytes() for p in segments(tmp_path)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingWarning)  # a chunk cut by the kill, if any
        data = read_transitions(tmp_path)
    assert {p.name: p.read_bytes() for p in segments(tmp_path)} == before  # reading modifies nothing
    n = len(data["seq"])
    # The bound: every acknowledged transition is on disk, and at most one more flush (a chunk the child wrote
    # and fsynced, or that fully reached the page cache, before it could print its ACK); chunks are whole flushes.
    assert last_ack <= n <= last_ack + flush_every and n % flush_every == 0, (seen, last_ack, n)
    assert seen <= last_ack
    assert_transitions(data, np.arange(n))  # contiguous 0..n-1, exact values and times

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingWarning)
        rec = TransitionRecorder(tmp_path, LAYOUT, flush_every=flush_every, segment_max_transitions=segment_max)
    # Only the segment being written at the kill is recovered (none if the kill fell between closing a full
    # segment and creating the next); segment i holds seq [400 i, 400 (i + 1)), the closed ones are kept as they are.
    last = segments(tmp_path)[-1]
    if rec.recovery_reports:
        (report,) = rec.recovery_reports
        assert report.path == str(last) and not report.closed and report.chunks_skipped == 0
        assert report.messages_kept == n - segment_max * int(last.stem.split("-")[1])
        assert Path(report.damaged_path) == last.with_name(last.name + ".damaged")
        original = before[last.name]
        assert Path(report.damaged_path).read_bytes() == original  # the original is kept byte for byte
        if len(original) >= 8:
            assert len(original) - report.bytes_truncated == chunk_bytes_end(original)
    else:
        assert n % segment_max == 0 and len(before) == n // segment_max
    assert rec.next_seq == n and rec.acked == n

    for s in range(n, n + 10):
        assert rec.append(child.transition_values(s), time_ns=child.time_of(s)) == s
    assert rec.close() == n + 10
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordingWarning)  # everything is clean now
        data = read_transitions(tmp_path)
    assert_transitions(data, np.arange(n + 10))
    for path in segments(tmp_path):  # every segment now reads with mcap's own reader
        with open(path, "rb") as f:
            assert all(m.sequence < n + 10 for _, _, m in make_reader(f, validate_crcs=True).iter_messages())
    assert segments(tmp_path)[-1].name == f"transitions-{len(before):06d}.mcap"  # resumed into a new segment


def chunk_bytes_end(buf: bytes) -> int:
    """Offset after the last complete record of an MCAP byte string (independent re-implementation)."""
    pos = 8
    while len(buf) - pos >= 9:
        length = int.from_bytes(buf[pos + 1:pos + 9], "little")
        if pos + 9 + length > len(buf):
            break
        pos += 9 + length
    return pos


def test_corrupted_chunk_is_skipped_with_a_warning(tmp_path):
    record(tmp_path, range(500), flush_every=100).close()
    (path,) = segments(tmp_path)
    third = chunk_indexes(path)[2]
    buf = bytearray(path.read_bytes())
    middle = third.chunk_start_offset + third.chunk_length // 2
    buf[middle:middle + 4] = bytes(b ^ 0xFF for b in buf[middle:middle + 4])
    path.write_bytes(bytes(buf))
    with open(path, "rb") as f, pytest.raises(CRCValidationError):  # mcap's reader only raises
        list(make_reader(f, validate_crcs=True).iter_messages())

    with pytest.warns(RecordingWarning) as caught:
        data = read_transitions(tmp_path)
    texts = [str(w.message) for w in caught]
    assert any(f"skipped the chunk at byte offset {third.chunk_start_offset}" in t and "CRC mismatch" in t
               and "100 messages lost" in t for t in texts), texts
    assert any("seq 200-299 are missing" in t for t in texts), texts
    assert_transitions(data, np.r_[0:200, 300:500])

    messages, report = recover_mcap(path, emit_warnings=False)
    assert (report.chunks_kept, report.chunks_skipped, report.messages_kept, report.closed) == (4, 1, 400, True)
    # a properly closed file is not rewritten on resume; the next seq still follows the highest one
    with pytest.warns(RecordingWarning, match="CRC mismatch"):  # resuming scans the newest segment again
        rec = TransitionRecorder(tmp_path, LAYOUT)
    assert rec.recovery_reports == [] and rec.next_seq == 500
    rec.close()


def test_damaged_last_chunk_of_a_closed_segment_never_reuses_its_seqs(tmp_path):
    record(tmp_path, range(500), flush_every=100).close()
    (path,) = segments(tmp_path)
    last = chunk_indexes(path)[-1]
    buf = bytearray(path.read_bytes())
    middle = last.chunk_start_offset + last.chunk_length // 2
    buf[middle:middle + 4] = bytes(b ^ 0xFF for b in buf[middle:middle + 4])
    path.write_bytes(bytes(buf))
    with pytest.warns(RecordingWarning, match="CRC mismatch"):
        rec = TransitionRecorder(tmp_path, LAYOUT)
    # seqs 400-499 are unreadable but were used: the next one follows them, not the highest readable (399)
    assert rec.next_seq == 500
    rec.append(child.transition_values(500), time_ns=child.time_of(500))
    rec.close()
    with pytest.warns(RecordingWarning, match="CRC mismatch"):
        data = read_transitions(tmp_path)
    assert_transitions(data, np.r_[0:400, 500:501])


def test_truncated_file_keeps_the_complete_chunks(tmp_path):
    record(tmp_path, range(500), flush_every=100).close()
    (path,) = segments(tmp_path)
    fourth = chunk_indexes(path)[3]
    cut = path.read_bytes()[:fourth.chunk_start_offset + fourth.chunk_length // 2]
    path.write_bytes(cut)

    with pytest.warns(RecordingWarning, match=f"ends inside a CHUNK record at byte {fourth.chunk_start_offset}"):
        data = read_transitions(tmp_path)
    assert_transitions(data, np.arange(300))

    with pytest.warns(RecordingWarning, match="ends inside a CHUNK record"):
        rec = TransitionRecorder(tmp_path, LAYOUT)
    (report,) = rec.recovery_reports
    assert (report.messages_kept, report.chunks_kept, report.chunks_skipped) == (300, 3, 0)
    assert report.bytes_truncated == len(cut) - fourth.chunk_start_offset and not report.closed
    assert Path(report.damaged_path).read_bytes() == cut
    with open(path, "rb") as f:  # the recovered file is a proper MCAP file
        assert [m.sequence for _, _, m in make_reader(f, validate_crcs=True).iter_messages()] == list(range(300))
    assert rec.next_seq == 300
    rec.append(child.transition_values(300), time_ns=child.time_of(300))
    rec.close()
    assert_transitions(read_transitions(tmp_path), np.arange(301))


@pytest.mark.parametrize("field, value, match", [
    ("obs", np.r_[np.zeros(21), np.nan], "'obs' is not finite at index \\[21\\]"),
    ("reward", np.inf, "'reward' is not finite"),
    ("next_obs", np.full(22, 1e39), "'next_obs' is not finite"),  # overflows float32
    ("action", np.zeros(3), "'action' has 3 values, the layout says 4"),
    ("reward", None, "'reward' is missing"),
    ("next_obs", "abc", "'next_obs' is not numeric"),
    ("bogus", 1.0, "unknown transition field"),
    ("seq", 5, "'seq' is 5.0, but this transition gets seq 0"),
])
def test_invalid_transition_raises_naming_the_field_and_records_nothing(tmp_path, field, value, match):
    rec = TransitionRecorder(tmp_path, LAYOUT, flush_every=1)
    values = child.transition_values(0)
    if value is None:
        del values[field]
    else:
        values[field] = value
    with pytest.raises(ValueError, match=match):
        rec.append(values, time_ns=child.time_of(0))
    assert rec.next_seq == 0 and rec.acked == 0
    assert rec.append(child.transition_values(0), time_ns=child.time_of(0)) == 0
    rec.close()
    assert_transitions(read_transitions(tmp_path, LAYOUT), [0])


def test_segments_roll_over_and_resume_after_close(tmp_path):
    rec = record(tmp_path, range(250), flush_every=50, segment_max_transitions=120, compression="zstd")
    rec.close()
    counts = []
    for path in segments(tmp_path):
        with open(path, "rb") as f:
            counts.append(make_reader(f).get_summary().statistics.message_count)
    assert counts == [120, 120, 10]
    rec = TransitionRecorder(tmp_path, LAYOUT, segment_max_transitions=120)
    assert rec.recovery_reports == [] and rec.next_seq == 250 and rec.acked == 250
    for s in range(250, 255):
        rec.append(child.transition_values(s), time_ns=child.time_of(s))
    assert rec.flush() == 255
    rec.close()
    assert [p.name for p in segments(tmp_path)][-1] == "transitions-000003.mcap"
    assert_transitions(read_transitions(tmp_path), np.arange(255))
    with pytest.raises(RuntimeError, match="closed"):
        rec.append(child.transition_values(255))


def test_reads_transitions_written_by_other_mcap_writers(tmp_path):
    """A file from mcap's own Writer (zstd chunks, channel records only in the first chunk) holding rclpy-serialised
    Float32MultiArrays (garbage padding: the generic decoder path) reads back like ours."""
    from mcap.writer import Writer
    from rclpy.serialization import serialize_message
    from std_msgs.msg import Float32MultiArray, MultiArrayDimension

    layout = TransitionLayout([("obs", 3), ("reward", 1)])
    with open(tmp_path / "transitions-000000.mcap", "wb") as f:
        writer = Writer(f, chunk_size=200)
        writer.start(profile="ros2")
        msgdef = ros2_msgdef_text(FLOAT32_MULTI_ARRAY).encode()
        schema_id = writer.register_schema(FLOAT32_MULTI_ARRAY, "ros2msg", msgdef)
        channel_id = writer.register_channel("/finetune/transitions", "cdr", schema_id)
        for seq in (2**24 + 1, 2**24 + 3, 2**24 + 2):  # not representable in float32: the MCAP sequence is exact
            msg = Float32MultiArray(data=[seq % 10, 0.5, -1.0, 2.0])
            msg.layout.dim = [MultiArrayDimension(label=n, size=s, stride=s) for n, s in layout.fields]
            writer.add_message(channel_id, log_time=seq, data=serialize_message(msg), publish_time=seq, sequence=seq)
        writer.finish()
    with pytest.warns(RecordingWarning, match="seq 0-16777216 are missing"):
        data = read_transitions(tmp_path, layout)
    np.testing.assert_array_equal(data["seq"], [2**24 + 1, 2**24 + 2, 2**24 + 3])
    np.testing.assert_array_equal(data["obs"], [[7, 0.5, -1], [8, 0.5, -1], [9, 0.5, -1]])
    np.testing.assert_array_equal(data["reward"], [2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="has dims"):
        read_transitions(tmp_path, TransitionLayout([("obs", 4)]))


def test_duplicate_seq_is_refused(tmp_path):
    record(tmp_path / "a", range(10)).close()
    record(tmp_path / "b", range(5)).close()
    shutil.copy(segments(tmp_path / "b")[0], tmp_path / "a" / "transitions-000001.mcap")
    with pytest.raises(ValueError, match="seq 0 is recorded twice"):
        read_transitions(tmp_path / "a")


def _odometry():
    from nav_msgs.msg import Odometry

    odom = Odometry()
    odom.header.stamp.sec, odom.header.stamp.nanosec = 1_700_000_123, 456_789
    odom.header.frame_id = "odom"
    odom.child_frame_id = "base_link"
    odom.pose.pose.position.x, odom.pose.pose.position.y, odom.pose.pose.position.z = 1.25, -0.5, 0.75
    odom.pose.pose.orientation.w, odom.pose.pose.orientation.z = 0.9, 0.1
    odom.pose.covariance = [float(i) * 0.01 for i in range(36)]
    odom.twist.twist.linear.x, odom.twist.twist.angular.z = 0.3, -1.5
    odom.twist.covariance = [float(-i) for i in range(36)]
    return odom


def test_topic_recorder_round_trip(tmp_path):
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float32MultiArray

    odom = _odometry()
    joints = JointState(name=["hip", "knee"], position=[0.1, -0.2], velocity=[1.0, 2.0], effort=[])
    array = Float32MultiArray(data=[1.0, 2.5])
    t0 = 1_700_000_000_000_000_000
    with TopicRecorder(tmp_path, flush_every=2) as rec:
        assert rec.write("/odom", odom, t0) == 0
        assert rec.write("/joint_states", joints, t0 + 1) == 1
        assert rec.write("/action", array, t0 + 2) == 2
        assert rec.write("/odom", odom, t0 + 3) == 3
    (path,) = sorted(tmp_path.glob("topics-*.mcap"))
    assert path.name == "topics-000000.mcap"
    with open(path, "rb") as f:
        decoded = list(make_reader(f, validate_crcs=True, decoder_factories=[DecoderFactory()])
                       .iter_decoded_messages())
    assert [(c.topic, s.name, m.sequence, m.log_time) for s, c, m, _ in decoded] == [
        ("/odom", "nav_msgs/msg/Odometry", 0, t0), ("/joint_states", "sensor_msgs/msg/JointState", 1, t0 + 1),
        ("/action", "std_msgs/msg/Float32MultiArray", 2, t0 + 2), ("/odom", "nav_msgs/msg/Odometry", 3, t0 + 3)]
    schema, _, message, got = decoded[0]
    assert (got.header.stamp.sec, got.header.stamp.nanosec, got.header.frame_id) == (1_700_000_123, 456_789, "odom")
    assert got.child_frame_id == "base_link"
    p = got.pose.pose
    assert (p.position.x, p.position.y, p.position.z, p.orientation.w, p.orientation.z) == (1.25, -0.5, 0.75,
                                                                                              0.9, 0.1)
    assert list(got.pose.covariance) == list(odom.pose.covariance)
    assert (got.twist.twist.linear.x, got.twist.twist.angular.z) == (0.3, -1.5)
    assert list(got.twist.covariance) == list(odom.twist.covariance)
    assert deserialize_message(message.data, type(odom)) == odom
    j = decoded[1][3]
    assert list(j.name) == ["hip", "knee"] and list(j.position) == [0.1, -0.2] and list(j.velocity) == [1.0, 2.0]
    assert list(decoded[2][3].data) == [1.0, 2.5]
    assert schema.encoding == "ros2msg" and schema.data.decode() == ros2_msgdef_text("nav_msgs/msg/Odometry")


def test_msgdef_text_as_rosbag2_writes_it():
    text = ros2_msgdef_text("nav_msgs/msg/Odometry")
    share = Path(sys.prefix) / "share"
    assert text.startswith((share / "nav_msgs/msg/Odometry.msg").read_text() + "\n" + SEPARATOR + "\n")
    assert [line[5:] for line in text.splitlines() if line.startswith("MSG: ")] == [
        "geometry_msgs/PoseWithCovariance", "geometry_msgs/Pose", "geometry_msgs/Point", "geometry_msgs/Quaternion",
        "geometry_msgs/TwistWithCovariance", "geometry_msgs/Twist", "geometry_msgs/Vector3", "std_msgs/Header",
        "builtin_interfaces/Time"]
    time_part = text.split("MSG: builtin_interfaces/Time\n")[1]
    assert time_part == (share / "builtin_interfaces/msg/Time.msg").read_text()
    assert ros2_msgdef_text("nav_msgs/Odometry") == text
    with pytest.raises(FileNotFoundError):
        ros2_msgdef_text("nav_msgs/msg/NoSuchMessage")


def test_topic_recorder_resumes_after_a_crash(tmp_path):
    rec = TopicRecorder(tmp_path / "live", flush_every=10)
    for i in range(35):
        rec.write("/odom", _odometry(), 1_000 + i)
    assert rec.acked == 30
    shutil.copytree(tmp_path / "live", tmp_path / "crashed")  # the disk as a kill -9 now would leave it
    rec.close()
    resumed = TopicRecorder(tmp_path / "crashed")
    (report,) = resumed.recovery_reports
    assert (report.messages_kept, report.chunks_kept, report.warnings, report.closed) == (30, 3, [], False)
    assert resumed.next_seq == 30
    assert resumed.write("/odom", _odometry(), 2_000) == 30
    resumed.close()
    seqs = []
    for path in sorted((tmp_path / "crashed").glob("topics-*.mcap")):
        with open(path, "rb") as f:
            seqs += [m.sequence for _, _, m in make_reader(f, validate_crcs=True).iter_messages()]
    assert seqs == list(range(31))
