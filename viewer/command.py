"""``sim2real view``: record a rollout (or read a recorded session), serve it in the browser until Ctrl-C, or write one
headless screenshot of it (``--screenshot``)."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Callable

from sim2real.configs import ConfigError

#: Viewport of ``--screenshot`` (width, height) px.
SCREENSHOT_SIZE = (1280, 800)


def _trace(args, policy_fn: Callable):
    if getattr(args, "recording", None):
        from sim2real.viewer.recording import record_session

        given = [flag for flag, value in (("--task", args.task), ("--envs", args.envs), ("--seconds", args.seconds),
                                          ("--set", args.overrides), ("--config", args.config)) if value]
        if given:
            raise ConfigError(f"view --recording: {', '.join(given)} apply to rollouts, not to a recorded session")
        return record_session(args.recording, robot=args.robot)
    if getattr(args, "robot", None):
        raise ConfigError("view --robot applies with --recording (a rollout draws the robot of its config)")
    from sim2real.viewer.rollout import record_rollout

    policy, cfg = policy_fn(args)
    source = f"policy {args.policy}" if args.policy else f"checkpoint {args.checkpoint or 'latest'}"
    return record_rollout(cfg, policy, num_envs=args.envs, seconds=args.seconds, title=f"{cfg['task']} ({source})")


def check_screenshot_path(path: str | Path) -> None:
    """Refuse a ``--screenshot`` path that is not a ``.png``, or whose folder cannot be made (a file is in the way);
    missing folders are made when the picture is written, as ``play --output``'s are.

    Raises:
        ConfigError: one line.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ConfigError(f"view --screenshot {path}: a screenshot is written as PNG: name it <file>.png")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"view --screenshot {path}: {folder} is a file, not a folder")


def screenshot_frame(trace, at: float | None) -> int:
    """The frame ``--at`` [s] shows (None: the middle of the trace); a moment outside the trace shows its first or
    last frame, with a one-line warning on stderr naming the moment shown."""
    last = trace.frames - 1
    if trace.dt <= 0 or last == 0:
        return 0
    if at is None:
        return int(round(last / 2))
    frame = int(round(at / trace.dt))
    if not 0 <= frame <= last:
        frame = min(max(frame, 0), last)
        print(f"warning: view --at {at:g}: the rollout spans 0-{last * trace.dt:.2f} s; showing t = "
              f"{frame * trace.dt:.2f} s", file=sys.stderr)
    return frame


def view_command(args, policy_fn: Callable) -> int:
    """Run ``sim2real view`` for parsed ``args``; ``policy_fn(args) -> (policy, cfg)`` loads ``--checkpoint`` /
    ``--policy`` the way ``play`` does. Returns the exit status (0; 2 after a one-line error about the browser).

    Raises:
        ConfigError: flags that do not go together, or see :func:`~sim2real.viewer.rollout.record_rollout` and
            :func:`~sim2real.viewer.recording.record_session`; the loaders' errors pass through.
    """
    from sim2real.extras import require_extra

    require_extra("view", "sim2real view")
    if getattr(args, "recording", None):
        require_extra("deploy", "sim2real view --recording", ("mcap", "mcap_ros2"))
    from sim2real.viewer.browser import NO_CHROMIUM, BrowserError, find_chromium, screenshot_page
    from sim2real.viewer.server import SceneViewer, check_bindable

    start = time.perf_counter()
    if args.at is not None and not args.screenshot:
        raise ConfigError("view --at applies with --screenshot")
    if args.at is not None and not math.isfinite(args.at):
        raise ConfigError(f"view --at {args.at}: a moment of the rollout in seconds")
    if args.screenshot:
        check_screenshot_path(args.screenshot)
        try:  # before the rollout
            if find_chromium() is None:
                raise BrowserError(NO_CHROMIUM)
        except BrowserError as exc:
            print(f"error: view --screenshot: {exc}", file=sys.stderr)
            return 2
    check_bindable(args.host, args.port)  # before the rollout (viser itself would wait forever)
    trace = _trace(args, policy_fn)
    recorded = time.perf_counter()
    viewer = SceneViewer(trace, host=args.host, port=args.port, playing=not args.screenshot)
    try:
        if args.screenshot:
            frame = screenshot_frame(trace, args.at)
            viewer.show(frame=frame, playing=False)
            viewer.aim_camera()
            try:
                out = screenshot_page(viewer.url, args.screenshot, size=SCREENSHOT_SIZE,
                                      ready=lambda: viewer.clients() > 0)
            except BrowserError as exc:
                print(f"error: view --screenshot: {exc}", file=sys.stderr)
                return 2
            print(f"wrote {out} ({trace.title}, t = {frame * trace.dt:.2f} s)")
            return 0
        frames = f"{trace.frames} frame{'' if trace.frames == 1 else 's'}"
        print(f"{trace.title}: {len(trace.envs)} env(s), {frames} of {trace.dt * 1000:.0f} ms; recorded in "
              f"{recorded - start:.1f} s, serving at {viewer.url} (started in {time.perf_counter() - start:.1f} s; "
              f"Ctrl-C stops)", flush=True)
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        if args.screenshot:
            raise  # no picture: interrupted (status 130)
        print("stopped")
        return 0
    finally:
        viewer.stop()
