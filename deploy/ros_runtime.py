"""Running rclpy nodes from the command line: a private context, Ctrl-C / SIGTERM handling, timed spinning."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time

import rclpy
from rclpy.context import Context
from rclpy.duration import Duration
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile
from rclpy.signals import SignalHandlerOptions


@contextlib.contextmanager
def ros_context():
    """A fresh, initialised rclpy :class:`Context` (no rclpy signal handlers: Ctrl-C stays with Python, see
    :func:`stop_on_signals`, so nodes can still publish a last safe command); shut down on exit."""
    ctx = Context()
    rclpy.init(context=ctx, signal_handler_options=SignalHandlerOptions.NO)
    try:
        yield ctx
    finally:
        rclpy.try_shutdown(context=ctx)


def latched_qos(depth: int = 1) -> QoSProfile:
    """Reliable and transient-local: a subscriber that joins later still receives the last ``depth`` messages
    (maps and settings published once, like the swarm's obstacle map)."""
    return QoSProfile(depth=depth, durability=DurabilityPolicy.TRANSIENT_LOCAL)


#: Set by Ctrl-C / SIGTERM inside :func:`stop_on_signals`; :func:`spin_for` returns when it is set.
STOP_REQUESTED = threading.Event()


@contextlib.contextmanager
def stop_on_signals():
    """Inside the block, Ctrl-C (SIGINT) and SIGTERM request a stop (:data:`STOP_REQUESTED`) instead of raising
    ``KeyboardInterrupt`` wherever the main thread happens to be: an exception raised inside rclpy's executor or a
    node callback can leave a lock held, and the node's last safe command would then hang or be lost. Main thread
    only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        STOP_REQUESTED.set()

    STOP_REQUESTED.clear()
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def spin_for(executor: SingleThreadedExecutor, context: Context, duration_s: float | None,
             stop_when=None) -> str:
    """Spin ``executor`` until ``duration_s`` [s] have passed (None: forever), the context shuts down,
    ``stop_when()`` (optional) returns true, or Ctrl-C / SIGTERM (a ``KeyboardInterrupt``, or
    :data:`STOP_REQUESTED` under :func:`stop_on_signals`). Returns why it stopped: ``"duration"``, ``"shutdown"``,
    ``"stopped"`` (``stop_when``) or ``"interrupted"``."""
    deadline = None if duration_s is None else time.monotonic() + float(duration_s)
    try:
        while context.ok():
            if STOP_REQUESTED.is_set():
                return "interrupted"
            if stop_when is not None and stop_when():
                return "stopped"
            timeout = 0.05
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "duration"
                timeout = min(timeout, left)
            executor.spin_once(timeout_sec=timeout)
    except KeyboardInterrupt:
        return "interrupted"
    except ExternalShutdownException:
        return "shutdown"
    return "shutdown"


def stopping_note(what: str, context: Context):
    """An ``on_exit`` for :func:`spin_node` that prints, as the spin ends and before the (seconds-long) ROS
    teardown, why ``what`` stops: ``"<what>: interrupted (Ctrl-C / SIGTERM), stopping"``, ``--duration`` reached or
    the ROS context shut down."""

    def note() -> None:
        why = ("interrupted (Ctrl-C / SIGTERM)" if STOP_REQUESTED.is_set()
               else "--duration reached" if context.ok() else "the ROS context shut down")
        print(f"{what}: {why}, stopping", flush=True)

    return note


#: Bound [s] on waiting for subscribers to acknowledge a node's last safe command.
SAFE_COMMAND_ACK_TIMEOUT_S = 0.5


def wait_for_acks(publishers, timeout_s: float = SAFE_COMMAND_ACK_TIMEOUT_S) -> bool:
    """Wait until every matched (reliable) subscriber of each publisher has acknowledged what was published, for
    at most ``timeout_s`` [s] in all: a process exiting right after its last safe command must not drop it on the
    wire. Returns whether all acknowledged in time."""
    deadline = time.monotonic() + timeout_s
    return all(pub.wait_for_all_acked(Duration(seconds=max(0.0, deadline - time.monotonic())))
               for pub in publishers)


def spin_node(node, context: Context, duration_s: float | None, *, start=None, stop_when=None,
              on_exit=None, rt_priority: int = 0) -> str:
    """Spin one ``node`` in its own executor with :func:`spin_for`; shut the executor down and destroy the node
    afterwards. ``start()`` (optional) runs once the node is in the executor, before spinning (e.g. a bridge's
    connect and arm steps; what it raises propagates, after ``on_exit``); ``stop_when``: see :func:`spin_for`;
    ``on_exit()`` (optional) runs however the spin ended, before the node is destroyed (e.g. a last safe command).
    ``rt_priority`` > 0: the spinning (calling) thread asks for ``SCHED_FIFO`` at that priority
    (:func:`~sim2real.deploy.control_clock.request_realtime`; a simulated robot's physics timer then keeps its pace
    on a loaded machine, as a robot's own controller does). Returns :func:`spin_for`'s reason (``"interrupted"``
    for a Ctrl-C during ``start``)."""
    if rt_priority > 0:
        from sim2real.deploy.control_clock import request_realtime

        request_realtime(rt_priority)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        if start is not None:
            start()
        return spin_for(executor, context, duration_s, stop_when)
    except KeyboardInterrupt:
        return "interrupted"
    finally:
        if on_exit is not None:
            on_exit()
        executor.shutdown()
        node.destroy_node()


class BackgroundSpin:
    """Spin ``nodes`` with one executor in a daemon thread (a context manager; for in-process graphs in tests and
    benchmarks). Node callbacks then run in that thread, one at a time; with ``rt_priority`` > 0 the thread asks for
    ``SCHED_FIFO`` at that priority (:func:`~sim2real.deploy.control_clock.request_realtime`)."""

    def __init__(self, context: Context, *nodes, rt_priority: int = 0):
        self.rt_priority = int(rt_priority)
        self.executor = SingleThreadedExecutor(context=context)
        for node in nodes:
            self.executor.add_node(node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        if self.rt_priority > 0:
            from sim2real.deploy.control_clock import request_realtime

            request_realtime(self.rt_priority)
        try:
            while not self._stop.is_set() and self.executor.context.ok():
                self.executor.spin_once(timeout_sec=0.02)
        except ExternalShutdownException:
            pass
        except BaseException as exc:  # surfaced by __exit__
            self.error = exc

    def __enter__(self) -> "BackgroundSpin":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop spinning and shut the executor down (idempotent); re-raises an error of a callback."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=5.0)
            self.executor.shutdown()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.stop()
        else:
            with contextlib.suppress(BaseException):
                self.stop()


class ThrottledLog:
    """Mixin for ``rclpy`` nodes: :meth:`_log` logs on the node's logger and keeps every line in
    :attr:`log_lines` (a bounded deque of ``(level, text)``, newest last), which tests and error messages read.
    The node's ``__init__`` sets ``log_lines`` (``deque(maxlen=LOG_LINES_KEPT)``) and ``_last_logged`` (``{}``)
    before its first :meth:`_log`."""

    #: Lines kept in :attr:`log_lines`.
    LOG_LINES_KEPT = 500

    def _log(self, level: str, text: str, throttle_s: float | None = None, key: str | None = None) -> None:
        """Log ``text`` on the node's logger at ``level`` (info, warning, error) and keep it in :attr:`log_lines`;
        with ``throttle_s`` [s], log it at most once per that many seconds per ``key`` (default: the text)."""
        self.log_lines.append((level, text))
        if throttle_s is not None:
            key = text if key is None else key
            now = time.monotonic()
            if now - self._last_logged.get(key, -math.inf) < throttle_s:
                return
            self._last_logged[key] = now
        logger = self.get_logger()
        # One call site per severity: rclpy refuses a severity change at one call site.
        if level == "error":
            logger.error(text)
        elif level == "warning":
            logger.warning(text)
        else:
            logger.info(text)
