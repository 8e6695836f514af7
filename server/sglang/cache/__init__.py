"""Seams of SGLang's prefix cache: eviction strategy, gap cache, gap recompute, host tier."""
