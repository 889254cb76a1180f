"""Test helpers for ROS 2 graphs: a node that records what arrives on topics (with the monotonic arrival time) and
publishes on demand, a polling wait, an injected clock for a stand-in's physics timer, starting / stopping
``sim2real`` CLI processes, and the command topic a quadrotor policy publishes on.

Imported as ``ros_helpers`` (``tests/conftest.py`` puts ``tests/`` on ``sys.path``, as ``--import-mode=importlib``
does not)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types
from typing import Callable

from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import QoSProfile


def policy_command_topic(policy_dir) -> str:
    """The topic (relative to the robot's namespace) the quadrotor deploy node publishes the exported policy in
    ``policy_dir`` on: ``cmd/ctbr`` or ``cmd/motors``, by its metadata's action interface."""
    import json
    from pathlib import Path

    from sim2real.deploy.nodes.quadrotor import COMMAND_TOPICS

    return COMMAND_TOPICS[json.loads((Path(policy_dir) / "metadata.json").read_text())["action"]["interface"]]


def wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.005) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` [s] pass; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


def wait_for(fn: Callable[[], object], timeout_s: float, poll_s: float = 0.01):
    """Poll ``fn`` until it returns a truthy value or ``timeout_s`` [s] pass; returns that value (the last one on a
    timeout), e.g. a count to compare, where :func:`wait_until` gives a bool."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(poll_s)
    return fn()


class TopicRecorder(Node):
    """Subscribes to ``topics`` (``{name: msg_type}``) and keeps ``(arrival_time_s, msg)`` per topic; creates
    publishers on demand with :meth:`publisher`. Thread-safe reads through :meth:`messages` / :meth:`last`."""

    def __init__(self, name: str, topics: dict, *, context=None, namespace: str = "/"):
        super().__init__(name, namespace=namespace, context=context)
        self._lock = threading.Lock()
        self._log: dict[str, list] = {t: [] for t in topics}
        self._pubs: dict[str, object] = {}
        self._matched: dict[str, int] = {t: 0 for t in topics}
        qos = QoSProfile(depth=50)
        for topic, msg_type in topics.items():
            events = SubscriptionEventCallbacks(matched=lambda info, t=topic: self._on_matched(t, info))
            self.create_subscription(msg_type, topic, lambda m, t=topic: self._record(t, m), qos,
                                     event_callbacks=events)

    def _on_matched(self, topic: str, info) -> None:
        with self._lock:
            self._matched[topic] = int(info.current_count)

    def matched(self, topic: str) -> int:
        """Publishers this recorder's subscription to ``topic`` is connected to now (the middleware's matched
        events): messages are delivered from then on, which a publisher in the graph (``count_publishers``) does
        not yet mean."""
        with self._lock:
            return self._matched[topic]

    def _record(self, topic: str, msg) -> None:
        with self._lock:
            self._log[topic].append((time.monotonic(), msg))

    def messages(self, topic: str, since: float = -float("inf")) -> list:
        """``[(arrival_time_s, msg), ...]`` received on ``topic`` at or after ``since``."""
        with self._lock:
            return [(t, m) for t, m in self._log[topic] if t >= since]

    def last(self, topic: str):
        """The latest ``(arrival_time_s, msg)`` on ``topic``, or None."""
        with self._lock:
            return self._log[topic][-1] if self._log[topic] else None

    def count(self, topic: str) -> int:
        with self._lock:
            return len(self._log[topic])

    def publisher(self, topic: str, msg_type):
        """A publisher on ``topic`` (created once, reliable, depth 10)."""
        if topic not in self._pubs:
            self._pubs[topic] = self.create_publisher(msg_type, topic, QoSProfile(depth=10))
        return self._pubs[topic]


class InjectedClock:
    """Runs a stand-in's physics timer callback (``node._on_timer``) by hand on an injected clock, so that a test can
    count what the stand-in publishes per simulated step whatever the machine's load.

    Cancels the node's own timer and makes the stand-in module's ``time.monotonic`` read this clock (through
    ``monkeypatch``, until the test ends); simulated time restarts at 0 with a fresh
    :class:`~sim2real.hardware.realtime.RealTimeStepper`. Stop spinning the node (or never spin it) before: a timer
    callback in flight in an executor would race with :meth:`run`."""

    def __init__(self, node, monkeypatch):
        import sys

        from sim2real.hardware.realtime import RealTimeStepper

        self.node = node
        node.timer.cancel()
        self.now = 0.0
        monkeypatch.setattr(sys.modules[type(node).__module__], "time",
                            types.SimpleNamespace(monotonic=lambda: self.now))
        node.stepper = RealTimeStepper(node.dt, 0.0, node.stepper.max_catch_up_steps)
        self._due = 0

    def run(self, steps_per_callback) -> None:
        """One timer callback per entry, the clock first advanced so that exactly that many physics steps are due
        (1: a callback on time; more: a late one, which catches up)."""
        for n in steps_per_callback:
            self._due += int(n)
            self.now = self._due * self.node.dt
            self.node._on_timer()


def count_calls(obj, name: str) -> list:
    """Wrap method ``name`` of ``obj`` (an instance attribute shadows the class's) to count its calls; returns a
    one-element list holding the count."""
    count = [0]
    method = getattr(obj, name)

    def counted(*args, **kwargs):
        count[0] += 1
        return method(*args, **kwargs)

    setattr(obj, name, counted)
    return count


def spawn_cli(args: list[str], log_path) -> subprocess.Popen:
    """Start ``python -m sim2real <args>`` as a separate process (unbuffered), stdout and stderr to ``log_path``."""
    return subprocess.Popen([sys.executable, "-m", "sim2real", *args], stdout=open(log_path, "w"),
                            stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))


#: What a deploy node logs at activation when ``--sim-time`` took (deploy/nodes/base.py): the e2e tests that run in
#: lockstep check their node's log for it.
LOCKSTEP_LOG = "control clock: simulated time (lockstep)"


def stop_process(proc, sig=None, timeout_s: float = 10.0) -> int:
    """Send ``sig`` (default SIGTERM) unless ``proc`` has exited, wait up to ``timeout_s`` [s], then kill; returns
    the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM if sig is None else sig)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
