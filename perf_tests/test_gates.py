"""Cross-config gates: where speculative decoding must beat the plain server, and by how much.

The gates themselves are data in ``llmperf.toml``; each gate and concurrency is one test id,
e.g. ``test_gate[mtp-speedup-low-C-C4]``.
"""


def test_gate(llmperf_gate):
    llmperf_gate.check()


def test_crossover(llmperf_crossover):
    llmperf_crossover.check()
