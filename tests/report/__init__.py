"""Tests of the report layer: tables, Markdown, JUnit properties and plots of results built by
hand (the factories of tests/verdicts)."""
