"""Video files of rendered frames: MP4 (H.264 through PyAV's bundled FFmpeg and libx264, ``yuv420p`` so browsers
and players open it, ``+faststart``) or animated GIF (Pillow), chosen by the path's suffix.

Frames are ``uint8`` arrays ``[H, W, 3]`` (RGB, row 0 at the top), streamed to the encoder one at a time (a 720p
frame is 2.7 MB: a whole clip is never held in memory for MP4). Files are written atomically
(:func:`~sim2real.configs.durable.atomic_write_bytes`; the encoder's scratch file is a hidden temporary file in the
same folder), so a reader never sees half a video.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np

from sim2real.configs.durable import atomic_write_bytes

#: The video formats, by file suffix.
VIDEO_SUFFIXES = (".mp4", ".gif")
#: Default frame size (width, height) [px] of an MP4 (720p) and of a GIF (GIFs grow ~10x faster with size).
DEFAULT_SIZE = {".mp4": (1280, 720), ".gif": (640, 360)}
#: Frame rate [frames/s] each format aims at: a frame every k-th control period, k = round(control rate / this), at
#: least 1 (30: 50 Hz control -> 25 fps, 40 Hz -> 40 fps, 100 Hz -> 33 fps; 20: 50 Hz -> 25 fps, 100 Hz -> 20 fps).
#: Played in real time. Software GL renders a 720p frame in ~50-100 ms: 50 fps would double play's time.
TARGET_FPS = {".mp4": 30.0, ".gif": 20.0}
#: Largest frame side [px] accepted (H.264 level 5.1 covers 4096 x 2304).
MAX_SIDE = 4096


def video_suffix(path: Path) -> str:
    """``.mp4`` or ``.gif`` (the format of ``path``, by its suffix, case-insensitive).

    Raises:
        ValueError: another suffix (one line naming the formats).
    """
    suffix = Path(path).suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        what = suffix or "a name without a suffix"
        raise ValueError(f"{path}: a video is written as .mp4 (H.264) or .gif, not {what}")
    return suffix


def parse_size(text: str) -> tuple[int, int]:
    """``"WxH"`` (e.g. ``1280x720``) -> ``(W, H)`` [px]: both even (the encoder's 4:2:0 chroma needs it), 16 to
    :data:`MAX_SIDE`.

    Raises:
        ValueError: anything else (one line).
    """
    parts = str(text).lower().replace(" ", "").split("x")
    try:
        w, h = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"size {text!r}: expected WIDTHxHEIGHT in pixels, e.g. 1280x720") from None
    for side in (w, h):
        if not 16 <= side <= MAX_SIDE or side % 2:
            raise ValueError(f"size {text!r}: width and height must be even numbers of pixels in 16-{MAX_SIDE}")
    return w, h


def frame_stride(control_dt: float, target_fps: float) -> int:
    """Control periods per video frame: ``round(1 / (target_fps * control_dt))``, at least 1."""
    return max(1, int(round(1.0 / (float(target_fps) * float(control_dt)))))


class VideoWriter:
    """Write frames to ``path`` (``.mp4`` or ``.gif``) at ``fps`` frames per second of ``size`` (width, height) px.

    Use as a context manager, or call :meth:`close`; an exception inside the ``with`` block (or :meth:`abort`)
    leaves no file behind (and ``path`` as it was). The folder of ``path`` is created.

    Raises:
        ValueError: another suffix, or an ``fps`` that is not positive and finite.
        RuntimeError: MP4 without PyAV (``pip install av``) or without its libx264 encoder.
    """

    def __init__(self, path: Path, fps: float, size: tuple[int, int]):
        self.path = Path(path)
        self.suffix = video_suffix(self.path)
        if not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"video frame rate must be positive, got {fps}")
        self.fps, self.size = float(fps), (int(size[0]), int(size[1]))
        self.frames = 0
        self._gif: list = []
        self._container, self._tmp = None, None
        if self.suffix == ".mp4":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            os.close(fd)
            self._tmp = Path(tmp)
            self._open_mp4()

    def _open_mp4(self) -> None:
        try:
            import av
        except ImportError:
            self._tmp.unlink(missing_ok=True)
            raise RuntimeError("MP4 needs PyAV (pip install av); or write a .gif") from None
        try:
            container = av.open(str(self._tmp), mode="w", format="mp4", options={"movflags": "+faststart"})
            stream = container.add_stream("libx264", rate=Fraction(self.fps).limit_denominator(1001))
        except Exception as exc:  # an FFmpeg build without libx264
            self._tmp.unlink(missing_ok=True)
            raise RuntimeError(f"MP4: PyAV cannot encode H.264 here ({exc}); write a .gif instead") from None
        stream.width, stream.height = self.size
        stream.pix_fmt = "yuv420p"  # what browsers and players decode (libx264 would keep 4:4:4 for RGB input)
        stream.options = {"crf": "23", "preset": "fast"}
        self._container, self._stream, self._av = container, stream, av

    def write(self, frame: np.ndarray) -> None:
        """Append one frame, ``uint8`` ``[H, W, 3]`` RGB of this writer's size.

        Raises:
            ValueError: a frame of another shape or type.
        """
        frame = np.asarray(frame)
        w, h = self.size
        if frame.shape != (h, w, 3) or frame.dtype != np.uint8:
            raise ValueError(f"video frame must be uint8 [{h}, {w}, 3], got {frame.dtype} {list(frame.shape)}")
        if self._container is not None:
            vf = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            for packet in self._stream.encode(vf):
                self._container.mux(packet)
        else:
            from PIL import Image

            # (each frame its own adaptive palette; Pillow's octree quantiser is fast)
            self._gif.append(Image.fromarray(frame).quantize(colors=255, method=Image.Quantize.FASTOCTREE))
        self.frames += 1

    def close(self) -> Path:
        """Finish the file and move it into place; returns its path.

        Raises:
            ValueError: no frame was written (nothing is left behind).
        """
        try:
            if self.frames == 0:
                raise ValueError(f"{self.path}: no frames to write")
            if self._container is not None:
                for packet in self._stream.encode():  # flush the encoder's delayed frames
                    self._container.mux(packet)
                self._container.close()  # (+faststart: the muxer reads the file back to move its index first)
                self._container = None
                atomic_write_bytes(self.path, self._tmp.read_bytes())
                self._tmp.unlink()
            else:
                atomic_write_bytes(self.path, gif_bytes(self._gif, self.fps))
                self._gif = []
            return self.path
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Discard the partial file."""
        if self._container is not None:
            try:
                self._container.close()
            except Exception:
                pass
            self._container = None
        self._gif = []
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def gif_bytes(frames: list, fps: float) -> bytes:
    """An animated, looping GIF of PIL ``frames`` at ``fps`` frames per second (delays rounded to 10 ms)."""
    buf = io.BytesIO()
    duration = max(20, int(round(100.0 / fps)) * 10)
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=duration, loop=0)
    return buf.getvalue()
