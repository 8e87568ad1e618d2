"""``python -m pytest_llmperf.sim``: a simulated ``sglang.launch_server``.

Takes SGLang's launch flags (see ``--help``), prints SGLang's startup log and serves its HTTP
API until SIGTERM/SIGINT. Runs on uvloop when available, as SGLang's uvicorn does.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from pytest_llmperf.sim.args import parse_args
    from pytest_llmperf.sim.logfmt import configure_logging
    from pytest_llmperf.sim.main import run_main

    args = parse_args(argv)
    configure_logging(args.knobs.log_level)
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(run_main(args))


if __name__ == "__main__":
    sys.exit(main())
