"""Gaps that come from one network read are the client's, not the server's."""

from __future__ import annotations

import orjson

from pytest_llmperf.core.metrics import compute_level
from pytest_llmperf.core.records import RequestRecord
from pytest_llmperf.core.stream_parsers import GenerateStreamParser
from pytest_llmperf.verdicts.validity import ValidityPolicy, check_level

from ..verdicts import WORKLOAD, make_level


def _event(ct: int) -> bytes:
    meta = {"completion_tokens": ct, "finish_reason": {"type": "length"} if ct == 8 else None}
    return b"data: " + orjson.dumps({"text": "x" * ct, "meta_info": meta}) + b"\n\n"


def _stream(reads: list[list[int]]) -> RequestRecord:
    """One request whose events (by cumulative count) arrive in the given reads, 10 ms apart."""
    rec = RequestRecord(index=0, t_send=0.0)
    parser = GenerateStreamParser(rec)
    t = 0.0
    for read in reads:
        t += 0.010
        parser.feed(b"".join(_event(ct) for ct in read), t)
    parser.feed(b"data: [DONE]\n\n", t + 0.001)
    parser.finish()
    assert rec.ok, rec.error
    return rec


def test_one_event_per_read_has_no_coalesced_gap() -> None:
    rec = _stream([[ct] for ct in range(1, 9)])
    assert rec.coalesced_gaps == 0 and len(rec.itls()) == 7


def test_events_sharing_a_read_are_counted_on_both_parser_paths() -> None:
    # reads of 1, 4 and 3 events: 3 + 2 gaps share a read's stamp
    rec = _stream([[1], [2, 3, 4, 5], [6, 7, 8]])
    assert rec.output_tokens == 8 and rec.coalesced_gaps == 5
    assert sorted(rec.itls())[:5] == [0.0] * 5
    # the exact (event by event) path: a comment in the read sends it there
    rec2 = RequestRecord(index=0, t_send=0.0)
    parser = GenerateStreamParser(rec2)
    parser.feed(_event(1), 0.01)
    parser.feed(b": ping\n\n" + _event(2) + _event(3) + _event(4), 0.02)
    assert rec2.output_tokens == 4 and rec2.coalesced_gaps == 2


def test_a_multi_token_event_is_not_coalesced() -> None:
    rec = _stream([[1], [4], [8]])  # speculative steps: several tokens in one event
    assert rec.coalesced_gaps == 0


def test_a_level_whose_itl_rests_on_coalesced_reads_is_invalid() -> None:
    late = [_stream([[1], [2, 3, 4, 5, 6, 7, 8]]) for _ in range(4)]
    lv = compute_level(late, max_concurrency=1)
    assert lv.median_itl_ms == 0.0
    assert lv.coalesced_itl_share == 6 / 7
    level = make_level(1, 100.0).model_copy(
        update={"coalesced_itl_share": lv.coalesced_itl_share, "median_itl_ms": 0.0}
    )
    (reason,) = check_level(level, WORKLOAD)
    assert reason.startswith("ITL is not measured: 86 % of the inter-token gaps came from")
    assert "ITL p50 0.00 ms" in reason
    # the limit is the policy's: a level at half coalesced is still judged
    fine = level.model_copy(update={"coalesced_itl_share": 0.5})
    assert check_level(fine, WORKLOAD) == []
    assert check_level(level, WORKLOAD, ValidityPolicy(max_coalesced_itl_share=0.9)) == []
