"""Bytes-level Server-Sent Events framing.

SGLang serialises events with orjson, which leaves U+2028/U+2029 unescaped inside JSON
strings; ``str.splitlines()`` (and so httpx's ``aiter_lines()``) splits on them and breaks the
JSON. So events are split on bytes, on the blank line that ends an SSE event (``\\n\\n``),
tolerating CRLF and lone-CR line endings as the SSE spec allows.

The load generator works per network read, not per event: ``SSEDecoder.take`` hands back the
complete events of a read as one buffer without splitting it, and ``scan_data_lines`` walks them
with C-speed searches. Splitting into payloads (``payloads``) is the exact, slower path for
anything unusual.
"""

from __future__ import annotations

DONE = b"[DONE]"
DATA = b"data: "
# What one event may hold before its end. SGLang's cumulative events carry the whole text and
# output_ids so far: about 10 bytes per token, so 128k-token outputs stay far below it. A
# server that never ends an event would otherwise be buffered until memory runs out.
MAX_EVENT_BYTES = 16 << 20


class EventTooLarge(ValueError):
    """One SSE event grew past ``MAX_EVENT_BYTES`` without its end (a blank line)."""


class SSEDecoder:
    """Incremental decoder: feed raw body bytes, get back the events they complete.

    Comment lines (``: ping``) and ``event:``/``id:``/``retry:`` fields are dropped; an event with
    several ``data:`` lines yields them joined by ``\\n`` (per the spec). Kept deliberately small:
    it runs once per network read in the load generator's hot path.
    """

    __slots__ = ("_cr", "_held", "_parts", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._parts: list[bytes] = []  # reads of an event not complete yet
        self._held = 0  # bytes in _parts
        self.max_event_bytes = max_event_bytes
        self._cr = False  # a trailing CR held back: maybe the first half of a split CRLF

    def take(self, chunk: bytes) -> tuple[bytes, int]:
        """Add bytes; return ``(data, end)`` where ``data[:end]`` holds every event they
        complete (``end`` is where the last blank line starts; -1 when none is complete yet).

        Nothing is split or copied per event, so a read that completes a hundred events costs
        about as much as one that completes one. An event larger than a read (SGLang's
        cumulative events reach tens of KB) is collected as a list of reads and joined once,
        when its end arrives: only the new bytes are searched, never the held ones again.
        """
        if self._cr or b"\r" in chunk:
            chunk = self._normalise(chunk)
        parts = self._parts
        if parts:
            if chunk.find(b"\n\n") < 0 and not (
                chunk.startswith(b"\n") and parts[-1].endswith(b"\n")
            ):
                if chunk:
                    parts.append(chunk)
                    self._held += len(chunk)
                    if self._held > self.max_event_bytes:
                        self._too_large()
                return chunk, -1
            parts.append(chunk)
            buf = b"".join(parts)
        else:
            buf = chunk
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._parts = [buf] if buf else []
            self._held = len(buf)
            if self._held > self.max_event_bytes:
                self._too_large()
            return buf, -1
        self._parts = [buf[end + 2 :]] if len(buf) > end + 2 else []
        self._held = len(buf) - end - 2 if self._parts else 0
        return buf, end

    def _too_large(self) -> None:
        held = self._held
        self._parts = []  # let the held bytes go now, not when the request ends
        self._held = 0
        raise EventTooLarge(
            f"an SSE event grew past {self.max_event_bytes // (1 << 20)} MiB ({held} bytes) "
            "without its end (a blank line): the server's stream is malformed"
        )

    @property
    def idle(self) -> bool:
        """Nothing held back: the next read starts a new event."""
        return not self._parts and not self._cr

    def _normalise(self, chunk: bytes) -> bytes:
        # A trailing lone CR may be the first half of a CRLF split across reads: keep it for later.
        if self._cr:
            chunk = b"\r" + chunk
        self._cr = chunk.endswith(b"\r")
        if self._cr:
            chunk = chunk[:-1]
        return chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the data payloads of the events completed by them (maybe none)."""
        data, end = self.take(chunk)
        return payloads(data, end) if end >= 0 else []

    @property
    def pending(self) -> bytes:
        """Bytes of an incomplete event (non-empty when a stream is cut mid-event)."""
        return b"".join(self._parts) + (b"\r" if self._cr else b"")


def payloads(data: bytes, end: int) -> list[bytes]:
    """The data payloads of the complete events in ``data[:end]`` (as ``SSEDecoder.take`` gives)."""
    out: list[bytes] = []
    for ev in data[:end].split(b"\n\n"):
        if ev.startswith(DATA) and b"\n" not in ev:
            out.append(ev[6:])  # the common case: one data line
        elif ev:
            payload = _data_of(ev)
            if payload is not None:
                out.append(payload)
    return out


def scan_data_lines(data: bytes, end: int, key: bytes) -> tuple[int, int, int, int, int] | None:
    """Walk the events of ``data[:end]`` without splitting them, looking for ``key`` in each.

    Returns ``(count, first_key, last_key, last_start, last_stop)``: how many events, the offset
    of ``key`` in the first and in the last event (the last occurrence within each), and the
    bounds of the last event's payload. Returns None unless every event is exactly one
    ``data: `` line holding ``key``; the caller then takes the exact path (``payloads``). JSON
    never holds a raw newline, so one line per event is what SGLang and OpenAI servers send.
    """
    find = data.find
    rfind = data.rfind
    startswith = data.startswith
    pos = n = 0
    first = last = -1
    start = stop = 0
    while pos < end:
        if not startswith(DATA, pos):
            return None
        nl = find(b"\n", pos, end)
        if nl < 0:
            nl = end
        elif data[nl + 1] != 10:  # a second line in this event: not the simple shape
            return None
        j = rfind(key, pos, nl)
        if j < 0:
            return None
        if first < 0:
            first = j
        last, start, stop = j, pos + 6, nl
        n += 1
        pos = nl + 2
    return n, first, last, start, stop


def _data_of(event: bytes) -> bytes | None:
    """The joined ``data`` field of one event, or None when it has none (comments only)."""
    parts: list[bytes] = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts) if parts else None


def split_events(body: bytes) -> list[bytes]:
    """All complete data payloads of a whole body (tests and small non-streaming uses)."""
    return SSEDecoder().feed(body)
