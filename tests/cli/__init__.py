"""Tests of the `llmperf` command."""
