"""The process main: SGLang's startup log, startup faults, serve until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys

from pytest_llmperf.sim.args import SimArgs
from pytest_llmperf.sim.logfmt import get_logger
from pytest_llmperf.sim.server import SimServer

SPEC_CAP_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. You can override this "
    "by explicitly setting --max-running-requests."
)
LOAD_BEGIN = "Load weight begin."  # the startup line model loading follows (perf_model)
OOM_LINE = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


# ---------------------------------------------------------------- process main
def _server_args_line(args: SimArgs) -> str:
    """``server_args=ServerArgs(...)`` as SGLang logs at launch, with the api key redacted."""
    fields = dataclasses.asdict(args.knobs)
    if fields.get("api_key"):
        fields["api_key"] = "<redacted>"
    inner = ", ".join(f"{k}={v!r}" for k, v in fields.items())
    return f"server_args=ServerArgs({inner})"


async def run_main(args: SimArgs) -> int:
    """The whole process: startup log, serve until SIGTERM/SIGINT, exit code."""
    log = get_logger()
    knobs = args.knobs
    log.info(_server_args_line(args))
    if args.unknown_args:
        log.warning("Ignoring flags the simulator does not model: " + " ".join(args.unknown_args))
    faults = args.faults
    if faults.describe():
        log.warning("Simulated faults enabled: " + ", ".join(faults.describe()))
    try:
        from pytest_llmperf.sim.engine import create_engine

        engine, lines = create_engine(knobs, on_log=log.info)
    except Exception as e:
        log.error(f"Scheduler hit an exception: {type(e).__name__}: {e}")
        return 1
    spec_warned = any("reset to 48" in line for line in lines)
    if knobs.speculative_algorithm and knobs.max_running_requests is None and not spec_warned:
        log.warning(SPEC_CAP_WARNING)
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        n_visible = len([d for d in cvd.split(",") if d.strip()])
        need = knobs.tp_size * knobs.dp_size
        if n_visible < need:
            log.warning(
                f"CUDA_VISIBLE_DEVICES={cvd} exposes {n_visible} GPU(s) but tp_size*dp_size="
                f"{need}; a real server would fail here (simulated: continuing)."
            )
    if faults.crash_on_start:
        for line in lines[: max(1, len(lines) // 2)]:
            log.info(line)
        log.error("Scheduler hit an exception: Traceback (most recent call last):")
        log.error(OOM_LINE + " (simulated: --sim-fault crash-on-start)")
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    for line in lines:
        log.info(line)
        if line.startswith(LOAD_BEGIN) and knobs.sim_load_time > 0:
            # Model load: SGLang binds its port only after the weights are in, so until then
            # /health_generate is refused and no ready line can print.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), knobs.sim_load_time)
            if stop.is_set():
                log.info("Shutting down during model load")
                return 0
    server = SimServer(
        knobs,
        faults=faults,
        engine=engine,
        startup_lines=lines,
        trust_remote_code=args.trust_remote_code,
        unknown_args=args.unknown_args,
    )
    try:
        await server.start()
    except OSError as e:
        log.error(
            f"[Errno {e.errno}] error while attempting to bind on address "
            f"('{knobs.host}', {knobs.port}): {e.strerror or e}"
        )
        return 1
    await stop.wait()
    log.info("Shutting down")
    log.info("Waiting for application shutdown.")
    await server.stop()
    log.info("Application shutdown complete.")
    log.info(f"Finished server process [{os.getpid()}]")
    sys.stderr.flush()
    return 0
