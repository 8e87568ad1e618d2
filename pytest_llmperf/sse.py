"""Bytes-level Server-Sent Events framing.

SGLang serialises events with orjson, which leaves U+2028/U+2029 unescaped inside JSON
strings; ``str.splitlines()`` (and so httpx's ``aiter_lines()``) splits on them and breaks the
JSON. So events are split on bytes, on the blank line that ends an SSE event (``\\n\\n``),
tolerating CRLF and lone-CR line endings as the SSE spec allows.
"""

from __future__ import annotations

DONE = b"[DONE]"


class SSEDecoder:
    """Incremental decoder: feed raw body bytes, get back the ``data`` payload of each event.

    Comment lines (``: ping``) and ``event:``/``id:``/``retry:`` fields are dropped; an event with
    several ``data:`` lines yields them joined by ``\\n`` (per the spec). Kept deliberately small:
    it runs once per network read in the load generator's hot path.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes; return the data payloads of the events completed by them (maybe none)."""
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            buf = _normalise_newlines(buf)
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        *events, self._buf = buf.split(b"\n\n")
        out: list[bytes] = []
        for ev in events:
            if ev.startswith(b"data: ") and b"\n" not in ev:
                out.append(ev[6:])  # the common case: one data line
            elif ev:
                payload = _data_of(ev)
                if payload is not None:
                    out.append(payload)
        return out

    @property
    def pending(self) -> bytes:
        """Bytes of an incomplete event (non-empty when a stream is cut mid-event)."""
        return self._buf


def _normalise_newlines(buf: bytes) -> bytes:
    # A trailing lone CR may be the first half of a CRLF split across reads: keep it for later.
    tail = b""
    if buf.endswith(b"\r"):
        buf, tail = buf[:-1], b"\r"
    return buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail


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
