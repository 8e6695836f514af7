"""Switchboard's server: Hydra entry point, typed config, and the SGLang adapter.

``python -m server [overrides]`` composes ``conf/``, resolves it into a
``LaunchPlan`` and supervises SGLang's own HTTP server (``server/sglang/``).
"""
