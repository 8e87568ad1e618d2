"""Secrets scrubbed from anything shown or stored: server args and error messages are user
input and may carry ``--api-key``, an ``Authorization`` value or a password.

Pure functions at the bottom layer, so every layer that renders or stores text (reports, the
history store) scrubs it the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MASK", "redact", "redact_args"]

MASK = "***"
# A secret is named by its key's last word (``api_key``, ``hf_token``, ``--admin-api-key``), never
# by a word inside it: ``max_total_num_tokens`` and ``--speculative-num-draft-tokens`` are counts.
# A value of digits alone is a count ("#token: 12" in a server log) and None/null is no key.
_SECRET_WORD = r"(?:api[-_]?key|token|secret|password)"
_SECRET_PATTERNS = [
    (re.compile(r"(?i)\b(bearer)\s+[^\s'\",]+"), rf"\1 {MASK}"),
    (re.compile(r"(?i)(--(?:[a-z0-9]+[-_])*api[-_]key)(\s*=\s*|\s+)[^\s'\",]+"), rf"\1\2{MASK}"),
    (
        re.compile(
            rf"(?i)((?<![\w-])[\"']?(?:[a-z0-9]+[-_])*{_SECRET_WORD}[\"']?\s*[:=]\s*)"
            r"(?![\"']?(?:\d+|None|null)[\"']?(?:[\s,)}]|$))[\"']?[^\s'\",})]+[\"']?"
        ),
        rf"\1{MASK}",
    ),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), MASK),
    # a URL's password: ``postgresql://user:secret@host/db`` (a database URL in an error)
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@'\"]*:)[^\s@/'\"]+@"), rf"\1{MASK}@"),
]
_SECRET_KEY = re.compile(rf"(?i)^-*(?:[a-z0-9]+[-_])*(?:{_SECRET_WORD}|authorization)$")


def redact(text: str) -> str:
    """Scrub ``Bearer X``, ``--api-key X``, ``api_key=X`` and ``sk-…`` from any string."""
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def redact_args(args: Any) -> Any:
    """Server args (dict, argv list or string) with secret values masked; input unchanged."""
    if isinstance(args, Mapping):
        return {
            k: (MASK if _SECRET_KEY.search(str(k)) and v not in (None, "") else redact_args(v))
            for k, v in args.items()
        }
    if isinstance(args, list | tuple):
        out: list[Any] = []
        mask_next = False
        for a in args:
            if mask_next:
                out.append(MASK)
                mask_next = False
                continue
            s = str(a) if not isinstance(a, str) else a
            if isinstance(a, str) and a.startswith("--") and "=" not in a and _SECRET_KEY.search(a):
                mask_next = True
                out.append(a)
            else:
                out.append(redact(s) if isinstance(a, str) else redact_args(a))
        return type(args)(out) if isinstance(args, tuple) else out
    if isinstance(args, str):
        return redact(args)
    return args
