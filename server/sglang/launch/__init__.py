"""Launching SGLang: argument checks, process environment, hook contract, plugin."""
