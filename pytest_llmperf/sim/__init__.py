"""A simulated SGLang server: SGLang's HTTP API over a performance model of a GPU server.

It is the embedded default when no GPU or SGLang is available, and the double for the plugin's
own tests. ``python -m pytest_llmperf.sim`` takes ``sglang.launch_server``'s flags.
"""
