"""Tests of the run layer's checks with a stand-in ``PerfRun`` (no server, no pytest plugin)."""
