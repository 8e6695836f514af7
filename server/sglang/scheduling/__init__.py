"""Seams inside SGLang's scheduler: arrival checks, admission, queue order, capture, feedback."""
