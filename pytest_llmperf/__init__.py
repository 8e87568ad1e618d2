"""pytest-llmperf: LLM-serving performance as pytest assertions.

Importing this package is cheap: no server, no network, no heavy imports. The public
API is re-exported lazily from the core modules.
"""

from __future__ import annotations

__version__ = "0.1.0"
