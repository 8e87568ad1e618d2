"""Stream parsers: one SSE response body -> one ``RequestRecord``, fed a network read at a time.

No I/O here (tests feed bytes): the load generator (``client.py``) owns the sockets and the
clock and hands every read over with its arrival stamp. The token count is the cumulative
``"completion_tokens":`` (SGLang's ``meta_info``, OpenAI's continuous usage), searched for from
the end of each event by C-speed scans over the unsplit read. SGLang's default stream repeats
the whole text and ``output_ids`` in every event (several KB each at 1000 tokens), so the text
and ids are never decoded and no event is copied: the last one is kept as a reference into its
read, and at the end only its ``meta_info`` (the object that closes it) is parsed. Anything
unusual in a read (an error, a comment, a count that did not grow, a key spelled with a space
before its colon) falls back to splitting it into events, with the same result. A cumulative
count that went down fails the request (``count_went_down``): the server's counts are then not
a measurement; the counts between a read's first and last are checked for that too.
"""

from __future__ import annotations

import re
from typing import Any, Literal, cast

import orjson

from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.sse import DONE, SSEDecoder, payloads, scan_data_lines

MAX_ERROR_CHARS = 300
_CT_KEY = b'"completion_tokens":'
_CT_LEN = len(_CT_KEY)
_DONE_EVENT = b"data: " + DONE
_DONE_READ = _DONE_EVENT + b"\n\n"
_INT = re.compile(rb"\s*(\d+)")
_META_KEY = b'"meta_info":'
_FINISH = re.compile(rb'"finish_reason":\s*"(\w*)')
_FIN_KEY = b'"finish_reason":'  # the common chunk has one, null (not finished)

# An event kept for ``finish()`` without copying it: (read buffer, payload start, payload stop).
Span = tuple[bytes, int, int]


def _int_after(payload: bytes, pos: int) -> int:
    m = _INT.match(payload, pos)
    return int(m.group(1)) if m else -1


def _done_at_end(data: bytes, end: int) -> bool:
    """Whether the last event of ``data[:end]`` is exactly ``data: [DONE]``."""
    return data.endswith(_DONE_EVENT, 0, end) and (
        end == 12 or data[end - 14 : end - 12] == b"\n\n"
    )


def meta_info_of(span: Span) -> dict[str, Any]:
    """The ``meta_info`` of one SGLang event, parsing only that object when it closes the event.

    SGLang writes ``meta_info`` last (after the cumulative text and ids), so the object after the
    last ``"meta_info":`` up to the event's closing brace is it. A JSON string cannot hold an
    unescaped quote, so the key cannot come from the text; if anything follows ``meta_info``
    (``prompt_token_ids``, a batch ``index``) that slice is not one JSON value and the whole
    event is parsed instead.
    """
    data, start, stop = span
    k = data.rfind(_META_KEY, start, stop)
    if k >= 0 and data[stop - 1] == 0x7D:  # "}"
        try:
            meta = orjson.loads(memoryview(data)[k + len(_META_KEY) : stop - 1])
        except orjson.JSONDecodeError:
            meta = None
        if isinstance(meta, dict):
            return meta
    obj = orjson.loads(memoryview(data)[start:stop])
    meta = obj.get("meta_info") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def one_plain_event(decoder: SSEDecoder, chunk: bytes) -> bool:
    """Whether ``chunk`` is exactly one whole ``data: ...`` line event with nothing before it:
    what every read is when the client keeps up with a server that writes event by event.
    Such a read needs no framing work beyond this one search for a newline."""
    n = len(chunk)
    return (
        decoder.idle
        and chunk.endswith(b"\n\n")
        and chunk.startswith(b"data: ")
        and chunk.find(b"\n", 6) == n - 2
        and chunk[n - 3] != 0x0D  # "\r": a CR-framed event goes the general way
    )


def error_message(obj: object) -> str | None:
    """The error carried by an event (SGLang ``{"error": ...}`` or OpenAI ``object: error``)."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if err is not None:
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    if obj.get("object") == "error":
        return str(obj.get("message") or obj)
    return None


def short_error(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _counts_rise(data: bytes, first: int, last: int, c1: int, cl: int) -> bool:
    """Whether the counts of a read's events never go down: those between its first (``c1``
    at ``first``) and last (``cl`` at ``last``) are searched for at C speed and parsed only
    when a read holds more than two events."""
    top, pos = c1, first + _CT_LEN
    while True:  # bounded: each pass moves past one key, and the search stops at ``last``
        j = data.find(_CT_KEY, pos, last)
        if j < 0:
            return cl >= top
        ct = _int_after(data, j + _CT_LEN)
        if 0 <= ct < top:
            return False
        top, pos = max(top, ct), j + _CT_LEN


def count_went_down(last: int, ct: int) -> str:
    """The error of a stream whose cumulative ``completion_tokens`` went down: its counts, and
    so every token-based number of the request, cannot be trusted."""
    return (
        f"malformed stream: the cumulative completion_tokens went down from {last} to {ct}; "
        "the server's token counts cannot be trusted, so the request counts as failed"
    )


def _reached_done(rec: RequestRecord, t_done: float) -> bool:
    """Whether an ended stream is left to judge: not failed, and it sent [DONE] (at ``t_done``,
    which sets its end-to-end latency); one cut before [DONE] fails here."""
    if not rec.ok:
        return False
    if t_done < 0:
        rec.fail(f"stream ended before [DONE] after {rec.output_tokens} tokens")
        return False
    rec.e2e = t_done - rec.t_send
    return True


class GenerateStreamParser:
    """SGLang ``/generate`` stream -> ``RequestRecord``, fed one network read at a time.

    Tokens come from ``meta_info.completion_tokens``, which is cumulative. Per read: the
    events it completes are checked to be plain ``data:`` lines that each carry a count
    (C-speed searches over the unsplit bytes), and only the first and last counts are parsed;
    anything else (an error, a comment, a count that did not grow) takes the exact path, event
    by event, with the same result. No I/O: tests feed it bytes.
    """

    __slots__ = ("_decoder", "_last_ct", "_last_payload", "rec", "t_done")

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.t_done = -1.0  # when [DONE] arrived; nothing after it is parsed
        self._decoder = SSEDecoder()
        self._last_ct = 0
        self._last_payload: Span | bytes | None = None  # the last event with a count

    def feed(self, chunk: bytes, t: float) -> bool:
        """Parse one read that arrived at ``t``; fails the record on an error event.

        Returns False once the request failed (stop reading); after ``[DONE]`` the rest of the
        body is drained unparsed.
        """
        if self.t_done >= 0:
            return True
        # The read a client that keeps up gets once per event (inlined: it is most of the
        # client's work at a GPU server's pace): one whole plain event whose count grew.
        n = len(chunk)
        if (
            chunk.endswith(b"\n\n")
            and chunk.startswith(b"data: ")
            and self._decoder.idle
            and chunk.find(b"\n", 6) == n - 2
            and chunk[n - 3] != 0x0D  # "\r": a CR-framed event goes the general way
        ):
            j = chunk.rfind(_CT_KEY)
            if j >= 0:
                m = _INT.match(chunk, j + _CT_LEN)
                ct = int(m[1]) if m else -1
                last = self._last_ct
                if ct > last:
                    rec = self.rec
                    times = rec.token_times
                    if ct == last + 1 and times:  # RequestRecord.add_read's one-token case
                        times.append(t)
                        rec.output_tokens += 1
                        rec.events += 1
                    else:
                        rec.add_read(t, ct - last, ct - last, 1)
                    self._last_ct = ct
                    self._last_payload = chunk  # one plain event: its payload is [6:-2]
                    return True
            elif chunk == _DONE_READ:
                self.t_done = t
                return True
        self._feed_read(chunk, t)
        return self.rec.ok

    def _feed_read(self, chunk: bytes, t: float) -> None:
        """Any read: split at event ends, counted per read when every event is plain."""
        data, end = self._decoder.take(chunk)
        if end < 0:
            return
        done = _done_at_end(data, end)
        stop = end - 14 if done else end  # 14: b"\n\ndata: [DONE]"
        scan = scan_data_lines(data, stop, _CT_KEY) if stop > 0 else (0, 0, 0, 0, 0)
        if scan is not None:
            n, first, last, start, stop = scan
            if n:
                last_ct = self._last_ct
                c1 = _int_after(data, first + _CT_LEN)
                cl = c1 if n == 1 else _int_after(data, last + _CT_LEN)
                rising = cl >= c1 and (n < 3 or _counts_rise(data, first, last, c1, cl))
                if c1 > last_ct and rising:
                    self.rec.add_read(t, c1 - last_ct, cl - last_ct, n)
                    self._last_ct = cl
                    self._last_payload = (data, start, stop)
                else:
                    scan = None  # a count that did not grow: event by event
        if scan is None:
            done = self._feed_events(payloads(data, end), t)
        if done:
            self.t_done = t

    def _feed_events(self, events: list[bytes], t: float) -> bool:
        """The exact path: event by event. True when ``[DONE]`` came."""
        rec = self.rec
        for data in events:
            if data == DONE:
                return True
            j = data.rfind(_CT_KEY)
            if j >= 0:
                ct = _int_after(data, j + _CT_LEN)
            else:
                obj = orjson.loads(data)
                msg = error_message(obj)
                if msg is not None:
                    rec.fail(short_error(f"error in stream: {msg}"))
                    return False
                meta = obj.get("meta_info") if isinstance(obj, dict) else None
                ct = meta.get("completion_tokens", -1) if isinstance(meta, dict) else -1
                if not isinstance(ct, int) or ct < 0:  # no count ("key" : value spellings too)
                    rec.events += 1
                    continue
            if ct > self._last_ct:
                rec.add_tokens(t, ct - self._last_ct)  # counts the event
                self._last_ct = ct
            elif 0 <= ct < self._last_ct:
                rec.fail(count_went_down(self._last_ct, ct))
                return False
            else:
                rec.events += 1
            self._last_payload = (data, 0, len(data))
        return False

    def finish(self) -> None:
        """The stream ended: judge it from [DONE] and the last event's ``meta_info``."""
        rec = self.rec
        if not _reached_done(rec, self.t_done):
            return
        if self._last_payload is None:
            rec.fail("stream finished without any token")
            return
        last = self._last_payload
        meta = meta_info_of((last, 6, len(last) - 2) if isinstance(last, bytes) else last)
        finish = meta.get("finish_reason")
        if not finish:
            rec.fail(f"stream ended without a finish_reason after {rec.output_tokens} tokens")
        elif isinstance(finish, dict) and finish.get("type") == "abort":
            rec.fail(short_error(f"request aborted by server: {finish.get('message') or finish}"))
        if isinstance(meta.get("prompt_tokens"), int):
            rec.prompt_tokens = meta["prompt_tokens"]
        if isinstance(meta.get("cached_tokens"), int):
            rec.cached_tokens = meta["cached_tokens"]
        sal = meta.get("spec_accept_length")
        if isinstance(sal, int | float):
            rec.spec_accept_length = float(sal)


class OpenAIStreamParser:
    """OpenAI completions/chat stream -> ``RequestRecord``, fed one network read at a time.

    Tokens come from continuous usage stats when the server sends them (vLLM and SGLang with
    ``continuous_usage_stats``: cumulative ``completion_tokens`` in every chunk), counted per
    read like SGLang's native stream; else one per chunk with content (``delta.content``,
    ``delta.reasoning_content`` or vLLM's newer ``delta.reasoning``: reasoning tokens are
    output tokens too), reconciled with the final usage.
    """

    __slots__ = (
        "_chat",
        "_decoder",
        "_final_usage",
        "_finish",
        "_last_ct",
        "_mode",
        "_usage_payload",
        "rec",
        "t_done",
    )

    def __init__(self, rec: RequestRecord, *, chat: bool) -> None:
        self.rec = rec
        self.t_done = -1.0
        self._chat = chat
        self._decoder = SSEDecoder()
        self._mode: Literal["usage", "chunks"] | None = None
        self._last_ct = 0
        self._final_usage: int | None = None
        self._usage_payload: Span | bytes | None = None  # bytes: one plain event, payload [6:-2]
        self._finish = False

    def feed(self, chunk: bytes, t: float) -> bool:
        """Parse one read that arrived at ``t``; fails the record on an error or abort.

        Returns False once the request failed (stop reading); after ``[DONE]`` the rest of the
        body is drained unparsed.
        """
        if self.t_done >= 0:
            return True
        if self._mode != "chunks" and one_plain_event(self._decoder, chunk):
            j = chunk.rfind(_CT_KEY)
            if j >= 0:
                m = _INT.match(chunk, j + _CT_LEN)
                ct = int(m[1]) if m else -1
                last = self._last_ct
                k = chunk.find(_FIN_KEY)
                if (
                    ct == last + 1
                    and chunk.startswith(b"null", k + 16)
                    and k >= 0
                    and chunk.find(_FIN_KEY, k + 16) < 0
                ):
                    # the common chunk (inlined): one more token, not finished
                    rec = self.rec
                    if rec.token_times:  # RequestRecord.add_read's one-token case
                        rec.token_times.append(t)
                        rec.output_tokens += 1
                        rec.events += 1
                    else:
                        rec.add_read(t, 1, 1, 1)
                    self._mode = "usage"
                    self._last_ct = ct
                    self._usage_payload = chunk
                    return True
                fin = _FINISH.search(chunk)
                if ct > last and (fin is None or fin.group(1) != b"abort"):
                    self._mode = "usage"
                    self.rec.add_read(t, ct - last, ct - last, 1)
                    self._last_ct = ct
                    self._usage_payload = chunk
                    if fin is not None:
                        self._finish = True
                    return True
            elif chunk == _DONE_READ:
                self.t_done = t
                return True
        self._feed_read(chunk, t)
        return self.rec.ok

    def _feed_read(self, chunk: bytes, t: float) -> None:
        """Any read: split at event ends, counted per read when every event is plain."""
        data, end = self._decoder.take(chunk)
        if end < 0:
            return
        done = _done_at_end(data, end)
        stop = end - 14 if done else end
        if self._mode != "chunks" and stop > 0:
            scan = scan_data_lines(data, stop, _CT_KEY)
            if scan is not None:
                n, first, last, start, pstop = scan
                c1 = _int_after(data, first + _CT_LEN)
                cl = c1 if n == 1 else _int_after(data, last + _CT_LEN)
                fin = _FINISH.search(data, 0, stop)
                rising = cl >= c1 and (n < 3 or _counts_rise(data, first, last, c1, cl))
                if c1 > self._last_ct and rising and (fin is None or fin.group(1) != b"abort"):
                    self._mode = "usage"
                    self.rec.add_read(t, c1 - self._last_ct, cl - self._last_ct, n)
                    self._last_ct = cl
                    self._usage_payload = (data, start, pstop)
                    if fin is not None:
                        self._finish = True
                    if done:
                        self.t_done = t
                    return
        self._feed_events(payloads(data, end), t)

    def _feed_events(self, events: list[bytes], t: float) -> None:
        """The exact path: event by event."""
        rec = self.rec
        for data in events:
            if data == DONE:
                self.t_done = t
                return
            fin = _FINISH.search(data)
            if fin is not None:
                if fin.group(1) == b"abort":
                    rec.fail("request aborted by server (finish_reason abort)")
                    return
                self._finish = True
            j = data.rfind(_CT_KEY)
            if j >= 0:
                self._usage_payload = (data, 0, len(data))
                ct = _int_after(data, j + _CT_LEN)
                if self._mode != "chunks" and 0 <= ct < self._last_ct:
                    rec.fail(count_went_down(self._last_ct, ct))
                    return
                if self._mode != "chunks" and ct > self._last_ct:
                    self._mode = "usage"
                    rec.add_tokens(t, ct - self._last_ct)  # counts the event
                    self._last_ct = ct
                    continue
                if self._mode == "chunks":
                    self._final_usage = ct  # the closing usage chunk
                else:
                    self._mode = "usage"
                rec.events += 1
                continue
            obj = orjson.loads(data)
            msg = error_message(obj)
            if msg is not None:
                rec.fail(short_error(f"error in stream: {msg}"))
                return
            if _has_content(obj, self._chat):
                self._mode = "chunks"
                rec.add_tokens(t, 1)
            else:
                rec.events += 1

    def finish(self) -> None:
        """The stream ended: judge it from [DONE], finish_reason and the final usage."""
        rec = self.rec
        if not _reached_done(rec, self.t_done):
            return
        if not self._finish:
            rec.fail(f"stream ended without a finish_reason after {rec.output_tokens} tokens")
        if self._mode == "chunks" and self._final_usage is not None:
            # Chunks can carry several tokens; the server's count is the truth for throughput.
            rec.output_tokens = self._final_usage
        if self._usage_payload is not None:
            last = self._usage_payload
            data, start, stop = (last, 6, len(last) - 2) if isinstance(last, bytes) else last
            usage = orjson.loads(memoryview(data)[start:stop]).get("usage") or {}
            if isinstance(usage.get("prompt_tokens"), int):
                rec.prompt_tokens = usage["prompt_tokens"]
            details = usage.get("prompt_tokens_details") or {}
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                rec.cached_tokens = details["cached_tokens"]
        if rec.output_tokens == 0 and rec.ok:
            rec.fail("stream finished without any token")


def _has_content(obj: object, chat: bool) -> bool:
    if not isinstance(obj, dict):
        return False
    choices = cast(list[dict[str, Any]], obj.get("choices") or [])
    if not choices:
        return False
    c0 = choices[0]
    if chat:
        delta = c0.get("delta") or {}
        # vLLM sends reasoning in its own field: reasoning_content, renamed reasoning (vLLM #27755)
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        )
    return bool(c0.get("text"))
