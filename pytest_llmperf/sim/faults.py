"""Injected failures for the simulator (``--sim-fault``), so the plugin's reliability paths
(launch timeouts, crashed servers, broken streams) can be tested without a GPU.

Each fault is a flag value; thresholds count output tokens served to clients, summed over all
requests and excluding the server's own warmup request.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pytest_llmperf.base.values import parse_nonneg_int

# name -> whether it takes "=N"
FAULT_KINDS: dict[str, bool] = {
    "crash-on-start": False,
    "hang-on-start": False,
    "crash-after-tokens": True,
    "hang-stream-after-tokens": True,
    "http-500": False,
    "server-info-html": False,
    "cut-stream-after-tokens": True,
    "stream-error-after-tokens": True,
    "count-down-after-tokens": True,
}

FAULT_HELP = """\
inject a failure (repeatable):
  crash-on-start               log an OOM-like error before ready, exit code 1
  hang-on-start                listen, but never finish warmup (/health* stays 503)
  crash-after-tokens=N         exit abruptly (code 1) once N output tokens were served
  hang-stream-after-tokens=N   after N tokens all streams stall forever; the process stays up
  http-500                     every /generate and /v1/* request answers HTTP 500
  server-info-html             /server_info answers 200 with an HTML page (a proxy's error page)
  cut-stream-after-tokens=N    after N tokens, streams are cut (connection closed, no [DONE])
  stream-error-after-tokens=N  after N tokens, streams get 'data: {"error": ...}' then [DONE]
  count-down-after-tokens=N    after N tokens, each native /generate stream repeats one event
                               with meta_info.completion_tokens one lower (a malformed count)"""


@dataclass(frozen=True)
class Faults:
    """The parsed ``--sim-fault`` values; None means the fault is off."""

    crash_on_start: bool = False
    hang_on_start: bool = False
    http_500: bool = False
    server_info_html: bool = False
    crash_after_tokens: int | None = None
    hang_stream_after_tokens: int | None = None
    cut_stream_after_tokens: int | None = None
    stream_error_after_tokens: int | None = None
    count_down_after_tokens: int | None = None

    @property
    def any_token_threshold(self) -> bool:
        return any(
            v is not None
            for v in (
                self.crash_after_tokens,
                self.hang_stream_after_tokens,
                self.cut_stream_after_tokens,
                self.stream_error_after_tokens,
                self.count_down_after_tokens,
            )
        )

    def describe(self) -> list[str]:
        """The faults as flag values, for logs and ``/server_info``."""
        out = []
        for name, takes_n in FAULT_KINDS.items():
            value = getattr(self, name.replace("-", "_"))
            if takes_n and value is not None:
                out.append(f"{name}={value}")
            elif not takes_n and value:
                out.append(name)
        return out


def parse_fault(value: str) -> tuple[str, int | None]:
    """argparse ``type=`` for one ``--sim-fault`` value; a bad value exits 2 like any bad flag."""
    name, sep, arg = value.partition("=")
    name = name.strip()
    if name not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(
            f"unknown fault {value!r}; choose from {', '.join(FAULT_KINDS)}"
        )
    if not FAULT_KINDS[name]:
        if sep:
            raise argparse.ArgumentTypeError(f"fault {name!r} takes no value")
        return name, None
    try:
        return name, parse_nonneg_int(arg)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"fault {name!r} needs a token count, e.g. {name}=100 ({exc})"
        ) from None


def build_faults(values: list[tuple[str, int | None]] | None) -> Faults:
    """Fold repeated ``--sim-fault`` values into one ``Faults``."""
    kwargs: dict[str, bool | int | None] = {}
    for name, n in values or []:
        kwargs[name.replace("-", "_")] = True if n is None else n
    return Faults(**kwargs)  # type: ignore[arg-type]
