"""Experiment tracking for ``sim2real train --logger``: rsl-rl-lib's own writers (TensorBoard's ``SummaryWriter``,
``WandbLogWriter``, ``NeptuneLogWriter``; the latter two also write the TensorBoard event file), and the images
and videos the runner logs beside rsl-rl's scalars (curriculum task-space plots, ``--video`` clips), sent to
whichever tracker is in use.

W&B runs offline without a network with ``WANDB_MODE=offline`` (``wandb sync`` uploads later); its files go to the
run folder unless ``WANDB_DIR`` says otherwise; the project is ``$WANDB_PROJECT`` (default ``sim2real``). Neptune
needs ``NEPTUNE_API_TOKEN`` and ``NEPTUNE_USERNAME`` (rsl-rl-lib's writer reads them); its project is
``$NEPTUNE_PROJECT`` (default ``sim2real``).
"""

from __future__ import annotations

import os
from pathlib import Path

from sim2real.configs import ConfigError

#: ``--logger`` choices.
LOGGERS = ("tensorboard", "wandb", "neptune")
#: The package each tracker needs, and the extra that installs it (None: no extra, pip install the package).
_PACKAGES = {"wandb": ("wandb", "tracking"), "neptune": ("neptune", None)}
#: A TensorBoard clip: at most this many frames/s and this width [px] (an animated GIF in an image summary).
TB_VIDEO_FPS, TB_VIDEO_WIDTH = 10.0, 320


def check_logger(name: str, environ=os.environ) -> None:
    """Refuse a logger that cannot start, before anything is written.

    Raises:
        ConfigError: an unknown name, a tracker whose package is not installed (the line says what to install: W&B
            the tracking extra, a MissingExtraError), or Neptune without ``NEPTUNE_API_TOKEN`` /
            ``NEPTUNE_USERNAME``.
    """
    if name not in LOGGERS:
        raise ConfigError(f"--logger {name}: choose one of {', '.join(LOGGERS)}")
    if name in _PACKAGES:
        module, extra = _PACKAGES[name]
        try:
            __import__(module)
        except ImportError as exc:
            if extra is not None:
                from sim2real.extras import missing_extra

                raise missing_extra(extra, f"sim2real train --logger {name}", module, exc) from None
            raise ConfigError(f"--logger {name}: the {module} package is not installed (pip install {module})"
                              ) from None
    if name == "neptune":
        missing = [k for k in ("NEPTUNE_API_TOKEN", "NEPTUNE_USERNAME") if not environ.get(k)]
        if missing:
            raise ConfigError(f"--logger neptune: set {' and '.join(missing)} (the Neptune account the run logs to)")


def _plain(value):
    """``value`` as JSON-like data (dicts, lists, numbers, strings, None): anything else as its ``str``."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _writer_classes():
    """rsl-rl-lib's W&B and Neptune writers, storing our configs (dicts: their ``store_config`` expects an object
    with ``to_dict()`` or a dataclass, and would fail)."""
    from rsl_rl.utils import NeptuneLogWriter, WandbLogWriter

    class WandbWriter(WandbLogWriter):
        def store_config(self, env_cfg, train_cfg) -> None:
            import wandb

            wandb.config.update({"train_cfg": _plain(train_cfg), "env_cfg": _plain(env_cfg)})

        def save_video(self, video: Path, it: int) -> None:
            """rsl-rl-lib offers every ``*.mp4`` under the run folder: upload the ``train --video`` clips
            (``videos/``, as ``Video/rollout``) once each, not W&B's own copies (``wandb/``) or ``play`` videos."""
            import wandb

            try:
                parts = Path(video).relative_to(self.get_logdir()).parts
            except ValueError:
                return
            if parts[0] == "videos" and video.name not in self.logged_videos:
                wandb.log({"Video/rollout": wandb.Video(str(video), format="mp4")}, step=it)
                self.logged_videos.add(video.name)

    class NeptuneWriter(NeptuneLogWriter):
        def store_config(self, env_cfg, train_cfg) -> None:
            self.run["train_cfg"] = _plain(train_cfg)
            self.run["env_cfg"] = _plain(env_cfg)

    return WandbWriter, NeptuneWriter


def logger_cfg(name: str, run_dir: Path | None, environ=os.environ) -> str | dict:
    """rsl-rl-lib's ``cfg["logger"]`` for ``name`` (a writer class and its project); for W&B, sets ``WANDB_DIR`` to
    ``run_dir`` unless the environment chose a folder."""
    if name == "tensorboard":
        return "tensorboard"
    if name == "wandb":
        if run_dir is not None:
            environ.setdefault("WANDB_DIR", str(run_dir))
        return {"class_name": _writer_classes()[0], "project_name": environ.get("WANDB_PROJECT") or "sim2real"}
    return {"class_name": _writer_classes()[1], "project_name": environ.get("NEPTUNE_PROJECT") or "sim2real"}


def log_image(writer, tag: str, path: Path, step: int) -> None:
    """Log the PNG ``path`` as image ``tag`` at ``step``: the TensorBoard event file, and W&B or Neptune when
    ``writer`` is theirs. ``writer`` None: nothing."""
    if writer is None:
        return
    import matplotlib.image

    image = matplotlib.image.imread(str(path))[..., :3]  # [H, W, 3] in [0, 1]
    writer.add_image(tag, image, step, dataformats="HWC")
    kind = _kind(writer)
    if kind == "wandb":
        import wandb

        wandb.log({tag: wandb.Image(str(path))}, step=step)
    elif kind == "neptune":
        from neptune.types import File

        writer.run[tag].append(File(str(path)), step=step)


def log_video(writer, tag: str, path: Path, step: int) -> None:
    """Log the MP4 ``path`` as clip ``tag`` at ``step``: in TensorBoard an animated GIF image summary (what
    ``SummaryWriter.add_video`` writes, without its moviepy dependency; at most :data:`TB_VIDEO_FPS` frames/s,
    :data:`TB_VIDEO_WIDTH` px wide: the MP4 in the run folder is the full clip); Neptune gets the file. W&B gets it
    from rsl-rl-lib's logger, which offers each ``*.mp4`` under the run folder to its writer after the iteration
    (``WandbWriter.save_video``). ``writer`` None: nothing."""
    if writer is None:
        return
    if _kind(writer) == "neptune":
        from neptune.types import File

        writer.run[f"{tag}/{Path(path).stem}"].upload(File(str(path)))
    get_file_writer = getattr(writer, "_get_file_writer", None)  # (a SummaryWriter, or rsl-rl's subclasses of it)
    if get_file_writer is None:
        return
    file_writer = get_file_writer()
    from tensorboard.compat.proto.summary_pb2 import Summary

    gif, (w, h) = _tensorboard_gif(Path(path))
    image = Summary.Image(height=h, width=w, colorspace=3, encoded_image_string=gif)
    file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)


def _kind(writer) -> str:
    """``wandb``, ``neptune`` or ``tensorboard``: which tracker ``writer`` (rsl-rl-lib's logger's) logs to."""
    from rsl_rl.utils import NeptuneLogWriter, WandbLogWriter

    if isinstance(writer, WandbLogWriter):
        return "wandb"
    return "neptune" if isinstance(writer, NeptuneLogWriter) else "tensorboard"


def _tensorboard_gif(path: Path) -> tuple[bytes, tuple[int, int]]:
    """The MP4 ``path`` as a small animated GIF (bytes, (width, height))."""
    import av
    import numpy as np
    from PIL import Image

    from sim2real.sim.video import gif_bytes

    frames = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate or 25)
        every = max(1, int(round(fps / TB_VIDEO_FPS)))
        scale = min(1.0, TB_VIDEO_WIDTH / stream.width)
        size = (2 * int(stream.width * scale / 2), 2 * int(stream.height * scale / 2))
        for i, frame in enumerate(container.decode(stream)):
            if i % every == 0:
                image = Image.fromarray(np.asarray(frame.to_ndarray(format="rgb24"))).resize(size, Image.BILINEAR)
                frames.append(image.quantize(colors=255, method=Image.Quantize.FASTOCTREE))
    if not frames:
        raise ValueError(f"{path}: no frames")
    return gif_bytes(frames, fps / every), size
