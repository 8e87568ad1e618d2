"""Stream event encoding: SGLang's native cumulative ``/generate`` events and OpenAI chunks.

One process must serve hundreds of streams at tens of thousands of tokens per second on one
core, so the hot path builds events from prebuilt byte pieces and keeps the cumulative text and
ids of ``/generate`` as growing byte buffers instead of re-serialising them per event. A
``Stream`` is one HTTP request; each of its ``Gen``s is one generated sequence.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any, Protocol

import orjson

from pytest_llmperf.sim.engine_api import TokenEvent
from pytest_llmperf.sim.knobs import ServerKnobs

# Deterministic "tokens": a small cyclic vocabulary. Each entry's JSON-escaped text and id
# bytes are prebuilt so an SSE event is a concatenation of ready-made pieces.
_WORDS = (
    " the quick brown fox jumps over a lazy dog and then runs far into the green"
    " forest where many small birds sing songs about sun rain wind snow river stone"
    " light dark night day time space star moon earth fire water air tree leaf root"
).split(" ")[1:]
VOCAB_TEXT: tuple[str, ...] = tuple(" " + w for w in _WORDS)
VOCAB_IDS: tuple[int, ...] = tuple(1000 + 37 * k for k in range(len(VOCAB_TEXT)))
_V = len(VOCAB_TEXT)
_TEXT_JSON: tuple[bytes, ...] = tuple(orjson.dumps(t)[1:-1] for t in VOCAB_TEXT)
_ID_BYTES: tuple[bytes, ...] = tuple(str(i).encode() for i in VOCAB_IDS)
_ID_BYTES_COMMA: tuple[bytes, ...] = tuple(b"," + b for b in _ID_BYTES)

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream"}
NATIVE, COMPLETIONS, CHAT = 0, 1, 2


def token_text(start: int, stop: int) -> str:
    """The generated text for output tokens [start, stop) of any request."""
    return "".join(VOCAB_TEXT[i % _V] for i in range(start, stop))


def vocab_text_json(start: int, stop: int) -> bytes:
    return b"".join([_TEXT_JSON[i % _V] for i in range(start, stop)])


@dataclasses.dataclass
class Usage:
    prompt: int
    completion: int
    cached: int = 0  # reported only where the server's cache report is on and it is > 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt,
            "total_tokens": self.prompt + self.completion,
            "completion_tokens": self.completion,
            "prompt_tokens_details": {"cached_tokens": self.cached} if self.cached else None,
            "reasoning_tokens": 0,
        }


class Gen:
    """One generated sequence: its engine request and its growing output."""

    __slots__ = (
        "stream",
        "index",
        "rid",
        "prompt_len",
        "max_new",
        "n",
        "text_json",
        "ids_json",
        "finished",
        "finish_reason",
        "spec_verify_ct",
        "t_start",
        "t_first",
        "t_last",
        "meta_head",
        "meta_tail",
        "cached",
        "internal",
        "prompt_tokens",
    )

    def __init__(
        self, stream: Stream, index: int, rid: str, prompt_len: int, max_new: int, cached: int = 0
    ) -> None:
        self.cached = cached
        self.stream = stream
        self.index = index
        self.rid = rid
        self.prompt_len = prompt_len
        self.max_new = max_new
        self.n = 0
        self.text_json = bytearray()
        self.ids_json = bytearray()
        self.finished = False
        self.finish_reason: dict[str, Any] | None = None
        self.spec_verify_ct = 0
        self.t_start = time.perf_counter()
        self.t_first = 0.0
        self.t_last = 0.0
        self.meta_head = (
            b'{"id":'
            + orjson.dumps(rid)
            + b',"finish_reason":null,"prompt_tokens":'
            + str(prompt_len).encode()
            + b',"weight_version":"default","total_retractions":0,"completion_tokens":'
        )
        self.meta_tail = b',"cached_tokens":' + str(cached).encode() + b"}"
        self.internal = stream.internal
        self.prompt_tokens: tuple[int | str, ...] = ()  # what a whole answer is drawn from

    def reported_cached(self) -> int:
        """Cached tokens for OpenAI usage: SGLang needs --enable-cache-report for them."""
        return self.cached if self.stream.server.knobs.enable_cache_report else 0

    def on_event(self, ev: TokenEvent) -> None:
        self.stream.server.on_token_event(self, ev)

    def final_meta(self) -> dict[str, Any]:
        """meta_info of the last chunk: adds e2e_latency and, with spec decoding, accept stats."""
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_len,
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": self.n,
            "cached_tokens": self.cached,
            "e2e_latency": self.t_last - self.t_start,
        }
        server = self.stream.server
        if server.spec_on and self.spec_verify_ct > 0:
            draft = server.spec_draft_tokens
            meta["spec_verify_ct"] = self.spec_verify_ct
            meta["spec_accept_length"] = self.n / self.spec_verify_ct
            accepted = max(0, self.n - self.spec_verify_ct)
            proposed = self.spec_verify_ct * max(1, draft - 1)
            meta["spec_accept_rate"] = accepted / proposed
            meta["spec_accept_token_num"] = accepted
            meta["spec_draft_token_num"] = proposed
        return meta


class StreamOwner(Protocol):
    """What a stream and its encoders read from the server that owns it (``SimServer``)."""

    knobs: ServerKnobs
    spec_on: bool
    spec_draft_tokens: int

    def on_token_event(self, gen: Gen, ev: TokenEvent) -> None:
        """Queue the bytes of one engine event on ``gen``'s stream."""


class Stream:
    """One HTTP request: one or more ``Gen``s and the bytes waiting to be written."""

    def __init__(
        self,
        server: StreamOwner,
        kind: int,
        streaming: bool,
        *,
        model: str = "default",
        include_usage: bool = False,
        continuous_usage: bool = False,
        batch: bool = False,
        internal: bool = False,
        vllm: bool = False,
    ) -> None:
        self.vllm = vllm  # vLLM's OpenAI chunk shapes (vllm_wire.py)
        self.server = server
        self.kind = kind
        self.streaming = streaming
        self.model = model
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.batch = batch
        self.internal = internal
        self.gens: list[Gen] = []
        self.pending: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None
        self.n_done = 0
        self.closed = False  # everything, [DONE] included, is queued
        self.cut = False  # fault: close the connection after writing what is queued
        self.counted_down = False  # fault: an event with a lower count was sent
        self.created = int(time.time())
        self.oai_id = ""
        self.oai_head = b""
        self.oai_tail_open = b""
        self.role_sent = False
        self.error: str | None = None  # fault: the message sent inside the stream
        self.reject: str | None = None  # the engine refused a request before any token
        self.to_stamp: list[Gen] = []  # first/last token events queued, not yet written

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def prepare_openai(self) -> None:
        """Prebuild the constant head/tail bytes of this stream's OpenAI chunks."""
        prefix = "chatcmpl-" if self.kind == CHAT else "cmpl-"
        self.oai_id = prefix + uuid.uuid4().hex
        if self.kind == COMPLETIONS:
            obj, text_open = b"text_completion", b'"text":"'
        else:
            obj, text_open = b"chat.completion.chunk", b'"delta":{"role":null,"content":"'
        self.oai_head = (
            b'data: {"id":"'
            + self.oai_id.encode()
            + b'","object":"'
            + obj
            + b'","created":'
            + str(self.created).encode()
            + b',"model":'
            + orjson.dumps(self.model)
            + b',"choices":[{"index":0,'
            + text_open
        )

    def oai_chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> bytes:
        obj = "chat.completion.chunk" if self.kind == CHAT else "text_completion"
        chunk = {
            "id": self.oai_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage,
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"


def native_event(st: Stream, gen: Gen, start: int, stop: int, fin: bool) -> None:
    if stop > start:
        tj = gen.text_json
        ij = gen.ids_json
        for i in range(start, stop):
            k = i % _V
            tj += _TEXT_JSON[k]
            ij += _ID_BYTES_COMMA[k] if i else _ID_BYTES[k]
    if fin:
        meta = orjson.dumps(gen.final_meta())
    else:
        meta = gen.meta_head + str(stop).encode() + gen.meta_tail
    parts: list[bytes | bytearray] = [
        b'data: {"text":"',
        gen.text_json,
        b'","output_ids":[',
        gen.ids_json,
        b'],"meta_info":',
        meta,
    ]
    if st.batch:
        parts.append(b',"index":' + str(gen.index).encode())
    parts.append(b"}\n\n")
    st.pending.append(b"".join(parts))


def openai_event(st: Stream, gen: Gen, start: int, stop: int, fin: bool) -> None:
    usage = orjson.dumps(Usage(gen.prompt_len, stop).as_dict()) if st.continuous_usage else b"null"
    if st.kind == CHAT:
        if not st.role_sent:
            st.role_sent = True
            st.pending.append(
                st.oai_chunk(
                    [
                        {
                            "index": 0,
                            "delta": {
                                "role": "assistant",
                                "content": "",
                                "reasoning_content": None,
                                "tool_calls": None,
                            },
                            "logprobs": None,
                            "finish_reason": None,
                            "matched_stop": None,
                        }
                    ],
                    Usage(gen.prompt_len, 0).as_dict() if st.continuous_usage else None,
                )
            )
        if stop > start:
            st.pending.append(
                b"".join(
                    [
                        st.oai_head,
                        vocab_text_json(start, stop),
                        b'","reasoning_content":null,"tool_calls":null},"logprobs":null,'
                        b'"finish_reason":null,"matched_stop":null}],"usage":',
                        usage,
                        b"}\n\n",
                    ]
                )
            )
        if fin:
            reason = (gen.finish_reason or {}).get("type", "length")
            st.pending.append(
                st.oai_chunk(
                    [
                        {
                            "index": 0,
                            "delta": {
                                "role": None,
                                "content": None,
                                "reasoning_content": None,
                                "tool_calls": None,
                            },
                            "logprobs": None,
                            "finish_reason": reason,
                            "matched_stop": (gen.finish_reason or {}).get("matched"),
                        }
                    ],
                    Usage(gen.prompt_len, stop).as_dict() if st.continuous_usage else None,
                )
            )
    else:
        if fin:
            fr = gen.finish_reason or {}
            tail = (
                b'","logprobs":null,"finish_reason":'
                + orjson.dumps(fr.get("type", "length"))
                + b',"matched_stop":'
                + orjson.dumps(fr.get("matched"))
                + b'}],"usage":'
            )
        else:
            tail = b'","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":'
        st.pending.append(
            b"".join([st.oai_head, vocab_text_json(start, stop), tail, usage, b"}\n\n"])
        )


def stream_tail(st: Stream) -> None:
    """After the last token: the usage chunk (OpenAI, if asked for) and [DONE]."""
    if st.kind != NATIVE and st.include_usage:
        gen = st.gens[0]
        usage = Usage(gen.prompt_len, gen.n, gen.reported_cached()).as_dict()
        if st.kind == COMPLETIONS:
            # SGLang dumps this chunk with exclude_none=True
            usage.pop("prompt_tokens_details")
            chunk = {
                "id": st.oai_id,
                "object": "text_completion",
                "created": st.created,
                "model": st.model,
                "choices": [],
                "usage": usage,
            }
            st.pending.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
        else:
            st.pending.append(st.oai_chunk([], usage))
    st.pending.append(DONE)
    st.closed = True
