"""Trace-replay simulator and live replay harness (``python -m bench``)."""
