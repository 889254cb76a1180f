"""``sim2real bench inference``: the task's shipped policy (``PRETRAINED_DIR / task``) through onnxruntime at
batch 1 (latency p50/p99) and in its policy node against the stand-in robot (control-period error p50/p99 at
50 Hz and 100 Hz, optionally with busy-loop processes beside it), see :mod:`sim2real.deploy.nodes.latency`."""

from __future__ import annotations

from sim2real.policies.artefact import PRETRAINED_DIR


def bench_inference(task: str, quick: bool = False, load: int = 0, seconds: float | None = None) -> dict:
    """``load``: busy-loop processes during the control-period measurement; ``seconds``: its length per rate
    (default 60, ``quick`` 3).

    Returns ``{"onnx_latency": {...}, "control_period_50hz": {...}, "control_period_100hz": {...}}`` (latency in
    microseconds, period errors in milliseconds).

    Raises:
        PolicyMismatchError: the task's shipped policy is missing or damaged.
    """
    from sim2real.deploy.nodes.latency import measure_control_period, measure_inference_latency

    policy_dir = PRETRAINED_DIR / task
    lat = measure_inference_latency(policy_dir, n=500 if quick else 5000)
    print(f"ONNX inference (batch 1): p50 {lat['p50_us']:.1f} us, p99 {lat['p99_us']:.1f} us "
          f"(p99 = {lat['p99_us'] / 1e4 * 100:.2f}% of a 100 Hz control period)")
    out = {"onnx_latency": lat}
    seconds = seconds or (3.0 if quick else 60.0)
    for hz in (50, 100):
        r = measure_control_period(policy_dir, hz, seconds, load=load)
        print(f"policy node at {hz} Hz, {seconds:g} s, busy loops beside it: {load}, control thread "
              f"{r['scheduling']}: control-period error p50 {r['p50_ms_error']:.3f} ms, p99 {r['p99_ms_error']:.3f} "
              f"ms (p99 = {r['p99_ms_error'] * hz / 10:.1f}% of the period), max {r['max_ms_error']:.3f} ms, "
              f"overruns {r['overruns']}")
        out[f"control_period_{hz}hz"] = r
    return out


def run(args, task: str) -> dict:
    return bench_inference(task, quick=args.quick, load=getattr(args, "load", 0),
                           seconds=getattr(args, "seconds", None))
