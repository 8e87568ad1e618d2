"""``llmperf compare``'s ``--undecided``: what an inconclusive verdict does to its exit status,
as the pytest run's ``undecided`` setting does (warn 0, fail 1, exit 6).

``--fail-inconclusive`` was the older flag for "fail"; it still works and says the new name.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pytest_llmperf.verdicts.compare import EXIT_UNDECIDED

__all__ = ["add_undecided_argument", "undecided_from_args"]


def add_undecided_argument(p: Any) -> None:
    p.add_argument(
        "--undecided",
        choices=("warn", "fail", "exit"),
        default="warn",
        help="what a verdict still inconclusive does to the exit status: warn (0, default), "
        f"fail (1) or exit ({EXIT_UNDECIDED}, when nothing failed), as pytest's "
        "--llmperf-undecided",
    )
    p.add_argument("--fail-inconclusive", action="store_true", help=argparse.SUPPRESS)


def undecided_from_args(args: argparse.Namespace) -> str:
    """The ``--undecided`` value; the older ``--fail-inconclusive`` means "fail" (and says so)."""
    if getattr(args, "fail_inconclusive", False):
        print(
            "llmperf compare: --fail-inconclusive is deprecated; use --undecided fail",
            file=sys.stderr,
        )
        return "fail"
    return str(args.undecided)
