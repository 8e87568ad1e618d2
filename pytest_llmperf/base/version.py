"""The package version, kept at the bottom layer so every layer may stamp files with it."""

__version__ = "0.1.0"
