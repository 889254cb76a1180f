"""Video files (sim/video.py) and the clip plumbing of sim/render.py that needs no GL: MP4 (H.264, yuv420p) and GIF
written atomically from frames and decoded back, sizes and frame strides, and clips played one after the other
(the renderer is stood in for; tests/sim/test_render_scene.py renders for real where a GL backend works)."""

from __future__ import annotations

import numpy as np
import pytest

from sim2real.sim import render
from sim2real.sim.render import Clip, limit_clips, render_clips
from sim2real.sim.video import VideoWriter, frame_stride, parse_size, video_suffix

av = pytest.importorskip("av")


def _frames(n: int, w: int = 64, h: int = 48) -> list[np.ndarray]:
    """Distinct frames: a red level per frame, a green ramp across."""
    out = []
    for i in range(n):
        f = np.zeros((h, w, 3), dtype=np.uint8)
        f[..., 0] = 20 * i
        f[..., 1] = np.linspace(0, 255, w, dtype=np.uint8)[None, :]
        out.append(f)
    return out


def _decode(path) -> tuple[list[np.ndarray], object]:
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(stream)]
        return frames, (stream.codec_context.name, stream.codec_context.pix_fmt, float(stream.average_rate))


def test_mp4_is_h264_yuv420p_and_decodes_to_the_frames(tmp_path):
    path = tmp_path / "sub" / "clip.mp4"
    with VideoWriter(path, 25, (64, 48)) as w:
        for f in _frames(10):
            w.write(f)
    frames, (codec, pix_fmt, fps) = _decode(path)
    assert (codec, pix_fmt, fps) == ("h264", "yuv420p", 25.0)
    assert len(frames) == 10 and frames[0].shape == (48, 64, 3)
    for i, f in enumerate(frames):  # lossy, but close (centre pixel: red level and the ramp's middle)
        assert abs(int(f[24, 32, 0]) - 20 * i) < 12 and abs(int(f[24, 32, 1]) - 130) < 12
    assert sorted(p.name for p in path.parent.iterdir()) == ["clip.mp4"]  # no scratch file left


def test_gif_on_request(tmp_path):
    from PIL import Image

    path = tmp_path / "clip.gif"
    with VideoWriter(path, 20, (64, 48)) as w:
        for f in _frames(6):
            w.write(f)
    with Image.open(path) as gif:
        assert gif.n_frames == 6 and gif.size == (64, 48) and gif.info["duration"] == 50


def test_a_failed_write_leaves_nothing_and_bad_input_is_refused(tmp_path):
    path = tmp_path / "clip.mp4"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"):
        with VideoWriter(path, 25, (64, 48)) as w:
            w.write(_frames(1)[0])
            raise RuntimeError("boom")
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]
    with VideoWriter(tmp_path / "b.mp4", 25, (64, 48)) as w:
        with pytest.raises(ValueError, match=r"uint8 \[48, 64, 3\]"):
            w.write(np.zeros((48, 64, 3), dtype=np.float32))
        w.write(_frames(1)[0])
    with pytest.raises(ValueError, match=r"\.mp4 \(H\.264\) or \.gif, not \.avi"):
        VideoWriter(tmp_path / "c.avi", 25, (64, 48))
    with pytest.raises(ValueError, match="no frames"):
        VideoWriter(tmp_path / "d.mp4", 25, (64, 48)).close()
    assert not (tmp_path / "d.mp4").exists()


def test_sizes_suffixes_and_frame_strides():
    assert parse_size("1280x720") == (1280, 720) and parse_size("640X360") == (640, 360)
    for bad in ("1280", "12x720", "1281x720", "axb", "8192x720"):
        with pytest.raises(ValueError, match="size"):
            parse_size(bad)
    assert video_suffix("a/b.MP4") == ".mp4"
    # 30 fps aimed at: 50 Hz control -> every 2nd period (25 fps), 40 Hz -> every one, 100 Hz -> every 3rd
    assert [frame_stride(dt, 30) for dt in (0.02, 0.025, 0.01)] == [2, 1, 3]
    assert frame_stride(0.02, 20) == 2 and frame_stride(0.5, 30) == 1


def _clip(tag: int, rows: int, dt: float = 0.02, hold_s: float = 0.0) -> Clip:
    return Clip(model=tag, control_dt=dt, follow=np.zeros((rows, 3)), qpos=np.full((rows, 1), tag), hold_s=hold_s)


def _fake_clip_frames(clips, size, stride):
    """render.clip_frames without rendering: a frame's red channel is its clip's tag."""
    for clip in clips:
        for t in range(0, len(clip), stride):
            f = np.zeros((size[1], size[0], 3), dtype=np.uint8)
            f[..., 0], f[..., 1] = clip.model, (10 * t) % 256
            yield f
        for _ in range(int(round(clip.hold_s / (stride * clip.control_dt)))):
            yield f


def test_a_video_lasts_what_was_asked_for_to_the_nearest_frame(tmp_path, monkeypatch):
    """play --duration 2 of the jump (a first clip longer than 2 s, then a 0.5 s pause) made 2.48 s; 0.4 s of hover
    at 100 Hz made 14 frames of 30 ms (0.42 s)."""
    monkeypatch.setattr(render, "clip_frames", _fake_clip_frames)
    jumps = [_clip(10, 120, hold_s=0.5), _clip(200, 60, hold_s=0.5)]
    decoded, (_, _, fps) = _decode(render_clips(limit_clips(jumps, 2.0), tmp_path / "a.mp4", size=(64, 48),
                                                duration_s=2.0))
    assert fps == 25.0 and len(decoded) == 50 and all(abs(int(f[24, 32, 0]) - 10) < 8 for f in decoded)
    decoded, _ = _decode(render_clips(limit_clips(jumps, 3.0), tmp_path / "b.mp4", size=(64, 48), duration_s=3.0))
    reds = [int(f[24, 32, 0]) for f in decoded]  # 2.4 s of the first, its 0.5 s pause, 0.1 s of the second
    assert len(decoded) == 75 and abs(reds[0] - 10) < 8 and abs(reds[-1] - 200) < 8
    decoded, _ = _decode(render_clips(limit_clips(jumps, 3.22), tmp_path / "c.mp4", size=(64, 48), duration_s=3.22))
    assert len(decoded) == 81  # 3.24 s, the nearest whole frame (0.04 s) to 3.22 s
    hover = [_clip(10, 40, dt=0.01)]  # 0.4 s at 100 Hz, a frame every 3rd period
    decoded, (_, _, fps) = _decode(render_clips(hover, tmp_path / "d.mp4", size=(64, 48)))
    assert fps == pytest.approx(100 / 3, rel=1e-3) and len(decoded) == 13  # 0.39 s
    assert len(_decode(render_clips(hover, tmp_path / "e.mp4", size=(64, 48), duration_s=0.2))[0]) == 7


def test_clips_are_played_one_after_the_other(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "clip_frames", _fake_clip_frames)
    # 50 Hz rows at 30 fps aimed: every second row (25 fps); 10 rows -> 5 frames, 7 rows -> 4 frames
    path = render_clips([_clip(10, 10), _clip(200, 7)], tmp_path / "a.mp4", size=(64, 48))
    decoded, (_, _, fps) = _decode(path)
    assert fps == 25.0 and len(decoded) == 9
    reds = [int(f[24, 32, 0]) for f in decoded]
    assert all(abs(r - 10) < 8 for r in reds[:5]) and all(abs(r - 200) < 8 for r in reds[5:])
    assert render.video_size(tmp_path / "x.mp4", None) == (1280, 720)
    assert render.video_size(tmp_path / "x.gif", None) == (640, 360)


def test_limit_clips_keeps_the_first_seconds():
    clips = [_clip(1, 50), _clip(2, 50), _clip(3, 50)]  # 1 s each
    assert [len(c) for c in limit_clips(clips, None)] == [50, 50, 50]
    assert [len(c) for c in limit_clips(clips, 1.5)] == [50, 25]
    assert [len(c) for c in limit_clips(clips, 0.001)] == [1]
    held = [_clip(1, 50, hold_s=0.5), _clip(2, 50, hold_s=0.5)]  # the pauses count
    assert [(len(c), c.hold_s) for c in limit_clips(held, 1.2)] == [(50, pytest.approx(0.2))]
    assert [(len(c), c.hold_s) for c in limit_clips(held, 2.0)] == [(50, 0.5), (25, 0.0)]
    assert [(len(c), c.hold_s) for c in limit_clips(held, 1.501)] == [(50, 0.5)]
    head = limit_clips(clips, 0.5)[0]
    assert head.qpos.shape == (25, 1) and head.mocap_pos is None and head.model == 1
