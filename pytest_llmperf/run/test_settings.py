"""The settings of a test's measurement: when a level counts (validity limits), what the
probes ask, and the workload's shape. Given in the suite's ``[sweep]`` or a marker, never on
the command line: two runs of one suite measure and judge the same way. ``run/settings.py``
appends them to ``SETTINGS`` and resolves them like every other setting.
"""

from __future__ import annotations

from pytest_llmperf.base.accuracy_items import parse_item_count
from pytest_llmperf.base.results import parse_range_convention, parse_workload_kind
from pytest_llmperf.base.values import (
    COALESCED_ITL_SHARE_LIMIT,
    CPU_PERCENT_LIMIT,
    LOOP_LAG_P99_LIMIT_MS,
    parse_bool,
    parse_fraction,
    parse_nonneg_int,
    parse_positive_float,
    parse_positive_int,
    parse_slack,
    parse_str,
    parse_think_time,
    parse_token_count,
    parse_turns,
    parse_unit_float,
)
from pytest_llmperf.run.setting import SUITE, TEST, Setting

__all__ = ["TEST_SETTINGS"]

TEST_SETTINGS: tuple[Setting, ...] = (
    # Validity thresholds (verdicts/validity.py ValidityPolicy); defaults are its constants.
    Setting(
        "max_failed",
        parse_nonneg_int,
        0,
        "failed requests a level may have and still be judged",
        **TEST,
    ),
    Setting(
        "length_slack",
        parse_slack,
        0.0,
        "relative slack on delivered vs requested token totals, e.g. 1% (default 0: exact)",
        **TEST,
    ),
    Setting(
        "max_cached_tokens",
        parse_nonneg_int,
        0,
        "prompt tokens per request the server may serve from its prefix cache (chat templates "
        "are allowed on top)",
        **TEST,
    ),
    Setting(
        "loop_lag_limit",
        parse_positive_float,
        LOOP_LAG_P99_LIMIT_MS,
        "client event-loop lag p99 in ms above which a level is invalid (client saturated)",
        **SUITE,
    ),
    Setting(
        "cpu_limit",
        parse_positive_float,
        CPU_PERCENT_LIMIT,
        "client CPU in % of one core above which a level is invalid (client saturated)",
        **SUITE,
    ),
    Setting(
        "coalesced_limit",
        parse_unit_float,
        COALESCED_ITL_SHARE_LIMIT,
        "share of ITL gaps from one network read (events the client read together) above "
        "which a level is invalid",
        **SUITE,
    ),
    Setting(
        "openai_extensions",
        parse_bool,
        True,
        "send the non-standard OpenAI-API fields ignore_eos and continuous_usage_stats "
        "(true/false; false for strict servers that answer 400/422 to them)",
        **TEST,
    ),
    Setting(
        "accuracy_items",
        parse_item_count,
        0,
        "accuracy probe (docs/accuracy.md): generated items each server answers, untimed, "
        "judged against the baseline and in A/B; 0: off (it costs requests)",
        **SUITE,
    ),
    Setting(
        "accuracy_drop",
        parse_fraction,
        0.05,
        "accuracy probe: the smallest score drop that fails (with p < 0.01), e.g. 5%",
        **SUITE,
    ),
    # workloads: what the prompts are (core/workload.py); recorded in the baseline key.
    Setting(
        "workload",
        parse_workload_kind,
        "random",
        "prompts: random (fresh, no cache can serve them), shared-prefix (prefix_groups "
        "prefixes of prefix_len tokens, primed in the prefix cache; its hit rate is measured) "
        "or multi-turn (conversations of `turns` turns re-sending their history)",
        sweep_flag="--workload",
        **TEST,
    ),
    Setting(
        "range_ratio",
        parse_unit_float,
        None,
        "length mix: draw each request's input/output length around input_len/output_len "
        "(see range_convention), a number in [0, 1]",
        sweep_flag="--range-ratio",
        **TEST,
    ),
    Setting(
        "range_convention",
        parse_range_convention,
        "sglang",
        "length mix: sglang draws from [r*L, L] (bench_serving --random-range-ratio), vllm "
        "from [(1-r)*L, (1+r)*L] (vLLM's RandomDataset)",
        sweep_flag="--range-convention",
        **TEST,
    ),
    Setting(
        "dataset",
        parse_str,
        None,
        "a ShareGPT .json/.jsonl file (in [sweep]: relative to llmperf.toml): prompts are each "
        "entry's first human turn",
        sweep_flag="--dataset",
        **TEST,
    ),
    Setting(
        "dataset_output_len",
        parse_token_count,
        None,
        "dataset: output tokens of every request (default: the reply's words x 1.3)",
        sweep_flag="--dataset-output-len",
        **TEST,
    ),
    Setting(
        "turns",
        parse_turns,
        None,
        "multi-turn: turns per conversation (2 to 64); a level runs `requests` conversations",
        sweep_flag="--turns",
        **TEST,
    ),
    Setting(
        "think_time",
        parse_think_time,
        0.0,
        "multi-turn: the most seconds a conversation waits between turns (seeded, uniform; "
        "at most 60)",
        sweep_flag="--think-time",
        **TEST,
    ),
    Setting(
        "prefix_len",
        parse_token_count,
        None,
        "shared-prefix: tokens of each group's common prefix (below input_len)",
        sweep_flag="--prefix-len",
        **TEST,
    ),
    Setting(
        "prefix_groups",
        parse_positive_int,
        None,
        "shared-prefix: number of distinct prefixes (prompt n uses prefix n mod G)",
        sweep_flag="--prefix-groups",
        **TEST,
    ),
    Setting(
        "hit_rate_slack",
        parse_slack,
        0.1,
        "shared-prefix workloads: how far (absolute) the measured cache hit rate may be from the "
        "expected one before a level is invalid, e.g. 10%",
        **TEST,
    ),
)
