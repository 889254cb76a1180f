"""``render_segments`` plays several rendered clips one after the other in one GIF (the renderer itself needs a GL
backend, which CI machines lack: its frames are stood in for here)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from sim2real.sim import render


def test_segments_are_played_one_after_the_other(tmp_path, monkeypatch):
    def frames(model, qpos, control_dt, fps, size, distance, lookat_z):
        stride = max(1, int(round(1.0 / (fps * control_dt))))
        # (distinct frames: a GIF writer merges identical neighbours)
        return [Image.new("RGB", size, (model, 10 * i, 0)) for i in range(0, len(qpos), stride)]

    monkeypatch.setattr(render, "_qpos_frames", frames)
    # 50 Hz rows at 25 fps: every second row; 10 rows -> 5 frames, 7 rows -> 4 frames
    path = render.render_segments([(10, np.zeros((10, 3))), (200, np.zeros((7, 3)))], tmp_path / "a.gif", 0.02)
    gif = Image.open(path)
    reds = []
    for i in range(gif.n_frames):
        gif.seek(i)
        reds.append(gif.convert("RGB").getpixel((0, 0))[:2])
    assert gif.n_frames == 9
    assert reds == [(10, g) for g in range(0, 100, 20)] + [(200, g) for g in range(0, 70, 20)]
