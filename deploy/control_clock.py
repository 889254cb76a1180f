"""The deploy nodes' control clock: a dedicated thread that runs a node's control tick on absolute deadlines of the
monotonic clock, at real-time priority where the OS allows it, and keeps the timing figures the node publishes as
``diagnostic_msgs/DiagnosticArray``.

Why not an rclpy timer: a timer callback runs when the executor gets to it, after whatever subscription callbacks
are queued, and its thread competes at normal priority with every other process. Measured on 2 cores with two
busy-loop processes (``sim2real bench inference --load 2``, docs/benchmarks.md), that gave period errors of several
milliseconds at the 99th percentile. The method here:

* **absolute deadlines**: the thread sleeps with ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, deadline)``
  (through ctypes, which releases the GIL while it sleeps), and the next deadline is the previous one plus the
  period, so lateness never accumulates; a tick that starts more than a period late skips the missed deadlines and
  counts them;
* **priority**: the thread asks for ``SCHED_FIFO`` (:data:`DEFAULT_RT_PRIORITY`), falls back to ``nice -10`` and
  then to the default policy; :attr:`ControlClock.scheduling` says which it got (it needs ``CAP_SYS_NICE`` or
  root, or an ``rtprio`` limit in ``/etc/security/limits.conf``);
* **the GIL**: a thread that wakes must take the GIL from whichever thread holds it, which CPython asks for only
  after the switch interval (5 ms by default); :class:`ControlClock` lowers the process's interval to
  :data:`SWITCH_INTERVAL_S`;
* **the garbage collector** (``collect_garbage=True``, what the deploy nodes use): CPython collects in whichever
  thread allocates past a threshold, holding the GIL throughout (no switch interval applies); in the executor's
  thread at 1 kHz of messages, generation-1 collections took 1.5 ms on average and up to 9 ms, long enough to make
  a 100 Hz tick overrun. While such a clock runs, automatic collection is off and the clock's thread runs the
  collection that is due (CPython's own thresholds and generations) right after a tick, in the slack before the
  next deadline.

The tick runs outside the executor, so a node serialises it with its subscription callbacks through a lock
(:class:`~sim2real.deploy.nodes.base.PolicyLifecycleNode` does).

:class:`SimTimeClock` is the lockstep alternative for a simulated robot stepped in lockstep with the node (``sim2real
standin --lockstep HZ`` + ``sim2real deploy --sim-time``): it ticks once per control period of SIMULATED time, as
soon as every input of that instant has arrived (their header stamps), so what the node computes no longer depends
on the wall clock or on the machine's load (the end-to-end tests of a behaviour use it; timing claims stay with the
real-time clock and the benchmarks).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import os
import sys
import threading
import time
from collections import deque

#: ``SCHED_FIFO`` priority the control thread asks for (1-99; the kernel's own threads use 50 for interrupts).
DEFAULT_RT_PRIORITY = 40
#: ``SCHED_FIFO`` priority of a stand-in's physics (``sim2real standin --rt-priority``): below the deploy nodes' control
#: threads and executors, above every normal process.
STANDIN_RT_PRIORITY = 30
#: CPython's GIL switch interval [s] while a control clock runs (default 0.005).
SWITCH_INTERVAL_S = 0.0002
#: A period longer than this many nominal periods is an overrun.
OVERRUN_FACTOR = 1.5
#: Ticks kept for the rolling timing figures (:meth:`ControlClock.stats`).
WINDOW_TICKS = 1000
#: Overruns kept in :attr:`ControlClock.overrun_log`.
OVERRUN_LOG = 100

_CLOCK_MONOTONIC = 1
_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _load_clock_nanosleep():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.clock_nanosleep
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Timespec), ctypes.POINTER(_Timespec)]
    fn.restype = ctypes.c_int
    return fn


_clock_nanosleep = _load_clock_nanosleep() if sys.platform.startswith("linux") else None


def sleep_until(deadline: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``deadline`` [s]: ``clock_nanosleep`` on the absolute deadline
    (Linux; ``CLOCK_MONOTONIC`` is what ``time.monotonic`` reads there), else ``time.sleep`` of what is left."""
    if _clock_nanosleep is None:
        left = deadline - time.monotonic()
        if left > 0:
            time.sleep(left)
        return
    frac, sec = math.modf(deadline)
    ts = _Timespec(int(sec), int(frac * 1e9))
    while _clock_nanosleep(_CLOCK_MONOTONIC, _TIMER_ABSTIME, ctypes.byref(ts), None) == 4:  # EINTR: sleep on
        pass


def request_realtime(priority: int) -> str:
    """Raise the calling thread's scheduling priority: ``SCHED_FIFO`` at ``priority`` (0: skip), else ``nice -10``.
    Returns what was granted, for the diagnostics (``"SCHED_FIFO 40"``, ``"nice -10"``, ``"default"``)."""
    if priority > 0 and hasattr(os, "sched_setscheduler"):
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(priority)))  # 0: the calling thread
            return f"SCHED_FIFO {int(priority)}"
        except (OSError, ValueError):
            pass
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)  # Linux: per thread
            return "nice -10"
        except (OSError, AttributeError):
            pass
    return "default"


_gc_lock = threading.Lock()
_gc_holders = 0  # running clocks that took automatic collection over
_gc_was_enabled = True


def _take_over_gc() -> None:
    """Turn automatic garbage collection off for a clock that collects itself (counted: the last to let go turns
    it back on, if it was on)."""
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1


def _hand_back_gc() -> None:
    global _gc_holders
    with _gc_lock:
        _gc_holders -= 1
        if _gc_holders == 0 and _gc_was_enabled:
            gc.enable()


def collect_due_garbage() -> int | None:
    """Run the collection CPython would have run by now with automatic collection on: the oldest generation whose
    count reached its threshold (``gc.get_threshold()``), none if generation 0's has not. Returns the generation
    collected, or None."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if thresholds[0] <= 0 or counts[0] < thresholds[0]:
        return None
    generation = 0
    while generation + 1 < len(counts) and counts[generation + 1] >= thresholds[generation + 1] > 0:
        generation += 1
    gc.collect(generation)
    return generation


def _open_schedstat() -> int | None:
    """A descriptor of the calling thread's ``/proc/thread-self/schedstat`` (Linux), or None."""
    try:
        return os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except (OSError, AttributeError):
        return None


def _read_schedstat(fd: int | None) -> tuple[int, int, int] | None:
    """The thread's scheduler counters (``schedstat``: time on a CPU [ns], time runnable but waiting on a run queue
    [ns], times switched in), or None (~3 us a read)."""
    if fd is None:
        return None
    try:
        on_cpu, waiting, switched = os.pread(fd, 128, 0).split()[:3]
        return int(on_cpu), int(waiting), int(switched)
    except (OSError, ValueError):
        return None


def _sched_delta(before: tuple | None, now: tuple | None) -> dict:
    """The overrun record's scheduler figures between two :func:`_read_schedstat` readings (None without them)."""
    if before is None or now is None:
        return {"runqueue_wait_ms": None, "on_cpu_ms": None, "switched_in": None}
    return {"runqueue_wait_ms": (now[1] - before[1]) * 1e-6, "on_cpu_ms": (now[0] - before[0]) * 1e-6,
            "switched_in": now[2] - before[2]}


def _run_tick(clock, start: float) -> float | None:
    """Run ``clock``'s tick (started at ``start``, monotonic [s]) and record its compute time; an exception it raises
    is kept in ``clock.error``, stops the clock and goes to its ``on_error`` (the control loop must not die
    silently). Returns the tick's end (monotonic [s]), or None when the clock stops."""
    try:
        clock._tick()
    except Exception as exc:  # noqa: BLE001 - kept and handed on
        clock.error = exc
        clock._stop.set()
        if clock._on_error is not None:
            clock._on_error(exc)
        return None
    done = time.monotonic()
    clock._compute.append(done - start)
    return done


class ControlClock:
    """Call ``tick()`` every ``period_s`` [s] on absolute deadlines from a dedicated thread (see the module
    docstring).

    Args:
        period_s: the control period [s] (> 0).
        tick: the control step; an exception it raises stops the clock, is kept in :attr:`error` and is handed to
            ``on_error`` (the node publishes its safe command there).
        rt_priority: ``SCHED_FIFO`` priority to ask for (0: stay at the default policy).
        name: the thread's name.
        collect_garbage: while the clock runs, turn the process's automatic garbage collection off and run the
            collections that fall due in the clock's thread right after each tick (see the module docstring).

    Attributes:
        ticks: ticks started since :meth:`start`.
        overruns: periods longer than :data:`OVERRUN_FACTOR` nominal periods since :meth:`start`.
        skipped: deadlines skipped because a tick started more than a period late.
        collections: garbage collections the clock's thread ran (``collect_garbage``).
        overrun_log: the last :data:`OVERRUN_LOG` overruns, each ``{"tick", "t" (``time.monotonic()`` [s] when the
            late tick started: CLOCK_MONOTONIC, comparable across the machine's processes), "period_ms",
            "wake_late_ms" (how long after its deadline the thread got to run), "compute_ms", "gc_ms",
            "gc_generation" (the tick before it and the collection after that tick), "runqueue_wait_ms",
            "on_cpu_ms", "switched_in" (Linux, from the thread's ``schedstat``, between the end of that collection
            and this tick's start: time runnable but waiting for a CPU, time running, times switched in; a sleep
            that ends on time is switched in once, a wait for the GIL after it again; None elsewhere)}``: where the
            time went.
        scheduling: what :func:`request_realtime` granted (None before the thread starts).
        error: the exception that stopped the clock, or None.
    """

    def __init__(self, period_s: float, tick, *, rt_priority: int = DEFAULT_RT_PRIORITY, name: str = "control",
                 on_error=None, collect_garbage: bool = False):
        if not period_s > 0:
            raise ValueError(f"period_s must be positive, got {period_s}")
        self.period_s = float(period_s)
        self._tick = tick
        self._on_error = on_error
        self.rt_priority = int(rt_priority)
        self.collect_garbage = bool(collect_garbage)
        self.collections = 0
        self.overrun_log: deque[dict] = deque(maxlen=OVERRUN_LOG)
        self.ticks = 0
        self._periods: deque[float] = deque(maxlen=WINDOW_TICKS)
        self._compute: deque[float] = deque(maxlen=WINDOW_TICKS)
        self.overruns = 0
        self.skipped = 0
        self.scheduling: str | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._scheduled = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._previous_switch_interval: float | None = None

    def start(self) -> "ControlClock":
        """Start the thread; returns once it has its scheduling (:attr:`scheduling` is then set)."""
        self._previous_switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(SWITCH_INTERVAL_S, self._previous_switch_interval))
        self._thread.start()
        self._scheduled.wait(timeout=5.0)
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop after the tick in progress (idempotent; never from inside ``tick``)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=timeout_s)
        if self._previous_switch_interval is not None:
            sys.setswitchinterval(self._previous_switch_interval)
            self._previous_switch_interval = None

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def _run(self) -> None:
        self.scheduling = request_realtime(self.rt_priority)
        if self.collect_garbage:
            _take_over_gc()
        self._scheduled.set()
        try:
            self._loop()
        finally:
            if self.collect_garbage:
                _hand_back_gc()

    def _loop(self) -> None:
        period = self.period_s
        deadline = time.monotonic() + period
        last = None
        previous = {"compute_ms": 0.0, "gc_ms": 0.0, "gc_generation": None}  # the tick before, for an overrun's record
        sched_fd = _open_schedstat()
        sched_before = _read_schedstat(sched_fd)
        try:
            while not self._stop.is_set():
                sleep_until(deadline)
                if self._stop.is_set():
                    break
                start = time.monotonic()
                late = start - deadline
                if late > period:  # more than a period late: skip the missed deadlines, keep the phase
                    missed = math.floor(late / period)
                    self.skipped += missed
                    deadline += missed * period
                deadline += period
                if last is not None:
                    self._periods.append(start - last)
                    if start - last > OVERRUN_FACTOR * period:
                        self.overruns += 1
                        self.overrun_log.append({"tick": self.ticks, "t": start, "period_ms": (start - last) * 1e3,
                                                 "wake_late_ms": late * 1e3, **previous,
                                                 **_sched_delta(sched_before, _read_schedstat(sched_fd))})
                last = start
                self.ticks += 1
                done = _run_tick(self, start)
                if done is None:
                    break
                generation = collect_due_garbage() if self.collect_garbage else None
                if generation is not None:
                    self.collections += 1
                previous = {"compute_ms": (done - start) * 1e3, "gc_ms": (time.monotonic() - done) * 1e3,
                            "gc_generation": generation}
                sched_before = _read_schedstat(sched_fd)
        finally:
            if sched_fd is not None:
                os.close(sched_fd)

    def stats(self) -> dict:
        """Timing of the last :data:`WINDOW_TICKS` ticks: ``{"period_error_p50_ms", "period_error_p99_ms",
        "compute_p50_us", "compute_p99_us", "overruns", "skipped", "ticks", "scheduling"}`` (period error =
        ``|actual - nominal|``; compute = the tick's own time; NaN before two ticks)."""
        import numpy as np

        periods = np.asarray(self._periods, dtype=float)
        compute = np.asarray(self._compute, dtype=float)
        err = np.abs(periods - self.period_s) * 1e3

        def pct(x, q, scale=1.0):
            return float(np.percentile(x, q) * scale) if len(x) else float("nan")

        return {"period_error_p50_ms": pct(err, 50), "period_error_p99_ms": pct(err, 99),
                "compute_p50_us": pct(compute, 50, 1e6), "compute_p99_us": pct(compute, 99, 1e6),
                "overruns": self.overruns, "skipped": self.skipped, "ticks": self.ticks,
                "scheduling": self.scheduling or "not started"}


#: Two simulated times closer than this [s] are the same instant (stamps carry nanoseconds).
SIM_TIME_EPS_S = 1e-6


class SimTimeClock:
    """Call ``tick()`` once per ``period_s`` of simulated time, in lockstep with a simulator (see the module
    docstring): the clock's thread waits until ``input_time()`` (the simulated time [s] up to which the node has
    every input, e.g. the oldest of its inputs' latest header stamps; None before all have arrived) reaches the next
    tick's time, then ticks at that input time. The node calls :meth:`notify` whenever an input arrives. The same
    interface as :class:`ControlClock` (start, stop, running, stats, ticks, overruns, skipped, scheduling, error).

    Args:
        period_s: the control period [s] of simulated time (> 0).
        tick: the control step; it reads the tick's simulated time in :attr:`time`. An exception stops the clock,
            is kept in :attr:`error` and handed to ``on_error``.
        input_time: ``() -> float | None`` (see above); called with the clock's condition held, it must not block.
        on_stall: ``(message: str) -> None``, called once per ``stall_warning_s`` of wall time that simulated time
            does not reach the next tick (a simulator stepping at another rate than ``period_s``, or stopped), and
            at most once per ``stall_warning_s`` when simulated time jumps past ticks (a simulator stepping at a
            lower rate, or in real time: its stamps jitter by more than a period).
        stall_warning_s: see ``on_stall`` [s].

    Attributes:
        time: simulated time [s] of the current (or last) tick; None before the first.
        skipped: ticks skipped because simulated time jumped past them (the simulator steps at a lower rate).
        overruns: always 0 (kept for the diagnostics; a lockstep tick cannot be late).

    Raises:
        ValueError: ``period_s`` not positive.
    """

    def __init__(self, period_s: float, tick, input_time, *, name: str = "control", on_error=None, on_stall=None,
                 stall_warning_s: float = 5.0):
        if not period_s > 0:
            raise ValueError(f"period_s must be positive, got {period_s}")
        self.period_s = float(period_s)
        self._tick, self._input_time = tick, input_time
        self._on_error, self._on_stall = on_error, on_stall
        self.stall_warning_s = float(stall_warning_s)
        self.time: float | None = None
        self.ticks = self.overruns = self.skipped = 0
        self.scheduling: str | None = None
        self.error: BaseException | None = None
        self._periods: deque[float] = deque(maxlen=WINDOW_TICKS)
        self._compute: deque[float] = deque(maxlen=WINDOW_TICKS)
        self._skip_warned = -float("inf")  # monotonic time [s] of the last skip warning
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "SimTimeClock":
        self._thread.start()
        return self

    def notify(self) -> None:
        """An input arrived: the clock looks at ``input_time()`` again."""
        with self._cond:
            self._cond.notify_all()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop after the tick in progress (idempotent; never from inside ``tick``)."""
        self._stop.set()
        self.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def _next_input_time(self, due: float | None) -> float | None:
        """Wait (releasing the condition) until inputs reach ``due``; their time, or None when stopped."""
        with self._cond:
            waited = 0.0
            while not self._stop.is_set():
                t = self._input_time()
                if t is not None and (due is None or t >= due - SIM_TIME_EPS_S):
                    return t
                t0 = time.monotonic()
                self._cond.wait(timeout=self.stall_warning_s - waited)
                waited += time.monotonic() - t0
                if waited >= self.stall_warning_s:
                    waited = 0.0
                    if self._on_stall is not None:
                        what = "the first input" if t is None and due is None else \
                            f"simulated time to reach {due:.6g} s (" + \
                            ("no input yet" if t is None else f"the inputs are at {t:.6g} s") + ")"
                        self._on_stall(f"lockstep: waiting for {what}; the simulator must step in lockstep at "
                                       f"the policy's control rate, {1.0 / self.period_s:.6g} Hz")
        return None

    def _run(self) -> None:
        self.scheduling = "simulated time (lockstep)"
        due = None
        while not self._stop.is_set():
            t = self._next_input_time(due)
            if t is None:
                break
            if due is not None and t > due + SIM_TIME_EPS_S:
                self._skip(t, due)
            if self.time is not None:
                self._periods.append(t - self.time)
            self.time, due = t, t + self.period_s
            self.ticks += 1
            if _run_tick(self, time.monotonic()) is None:
                break

    def _skip(self, t: float, due: float) -> None:
        """Simulated time jumped from ``due`` to ``t`` [s]: count the ticks skipped, and say so (throttled)."""
        n = max(1, int(round((t - due) / self.period_s)))
        self.skipped += n
        now = time.monotonic()
        if self._on_stall is not None and now - self._skip_warned >= self.stall_warning_s:
            self._skip_warned = now
            hz, jump = 1.0 / self.period_s, t - due + self.period_s
            self._on_stall(f"lockstep: simulated time jumped {jump:.6g} s between two ticks "
                           f"({n} control period(s) of {self.period_s:.6g} s skipped, {self.skipped} so far): the "
                           f"simulator steps at about {1.0 / jump:.6g} Hz, the policy at {hz:.6g} Hz (a stand-in: "
                           f"sim2real standin --lockstep {hz:.6g}; a simulator running in real time: no --sim-time)")

    def stats(self) -> dict:
        """As :meth:`ControlClock.stats`; the periods are of simulated time (lockstep: the period, unless the
        simulator skipped ticks), the compute times of the wall clock."""
        return ControlClock.stats(self)
