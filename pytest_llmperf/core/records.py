"""One request's measurements, kept compact.

A level at C=1024 with 1000-token outputs holds two million token timestamps; as Python objects
that makes full GC passes take tens of milliseconds in the middle of a measurement. So token
arrival times live in ``array('d')`` and a record is one slotted object per request.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    """Timings of one request; all times are ``time.perf_counter()`` seconds.

    ``token_times`` has one entry per output token. When one SSE event carries k tokens (a
    speculative step, or chunks coalesced by the server), the gap since the previous token is
    split evenly across them, as SGLang's ``bench_serving`` does for ITL. All tokens of the
    *first* event are stamped at the first event's arrival (``first_event_tokens`` of them).
    Events that arrive in one network read share the read's stamp (``add_read``).
    """

    index: int
    t_send: float = math.nan
    prompt_tokens: int = 0
    ttft: float = math.nan  # seconds from send to the first token-bearing event
    e2e: float = math.nan  # seconds from send to the end of the stream ([DONE])
    output_tokens: int = 0
    token_times: array[float] = field(default_factory=lambda: array("d"))
    first_event_tokens: int = 0
    events: int = 0  # SSE data events received before [DONE] (the client's unit of work)
    error: str | None = None
    spec_accept_length: float | None = None  # the server's per-request figure, if it sent one
    t_scheduled: float | None = None  # open-loop arrivals: when this request was due
    cached_tokens: int = 0  # prompt tokens the server served from its prefix cache
    retries: int = 0  # re-sent once on a new connection after a stale keep-alive one died
    # Inter-token gaps that came from one network read: tokens of a later event of the read,
    # stamped with the read's instant (a gap of 0 that the client, not the server, made).
    coalesced_gaps: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def schedule_lag(self) -> float:
        """How late the request was sent against its open-loop schedule (0 in closed loop)."""
        if self.t_scheduled is None:
            return 0.0
        return max(0.0, self.t_send - self.t_scheduled)

    def add_tokens(self, t: float, n_new: int) -> None:
        """Record ``n_new`` tokens carried by one event that arrived at ``t``."""
        self.add_read(t, n_new, n_new, 1)

    def add_read(self, t: float, n_first: int, n_total: int, n_events: int) -> None:
        """Record ``n_events`` events that arrived together in one read at ``t``.

        The same stamps as ``add_tokens`` once per event, without the per-event calls: the
        first event's ``n_first`` tokens split the gap since the previous token, and the other
        ``n_total - n_first`` tokens land at ``t`` (they arrived at the same instant).
        """
        times = self.token_times
        if n_total > n_first:
            self.coalesced_gaps += n_total - n_first
        if times and times[-1] == t:  # an earlier event of this read was added already
            self.coalesced_gaps += n_first
        if not times:
            self.ttft = t - self.t_send
            self.first_event_tokens = n_first
            times.extend([t] * n_total)
        else:
            if n_first == 1:
                times.append(t)
            else:
                prev = times[-1]
                step = (t - prev) / n_first
                times.extend([prev + step * k for k in range(1, n_first)])
                times.append(t)
            if n_total > n_first:
                times.extend([t] * (n_total - n_first))
        self.output_tokens += n_total
        self.events += n_events

    def itls(self) -> list[float]:
        """Inter-token gaps after the first event, with multi-token gaps already split."""
        times = self.token_times
        start = max(self.first_event_tokens - 1, 0)
        return [times[i + 1] - times[i] for i in range(start, len(times) - 1)]

    def tpot(self) -> float | None:
        """(e2e - ttft) / (output_tokens - 1), bench_serving's per-request TPOT."""
        if not self.ok or self.output_tokens <= 1:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def fail(self, message: str) -> RequestRecord:
        """Mark the request failed; a failed request contributes no tokens to any metric."""
        if self.error is None:
            self.error = message
        return self
