"""Speculative decoding on the CPU engine: pure-torch versions of the sgl_kernel ops it calls."""
