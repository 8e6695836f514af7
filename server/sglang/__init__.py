"""The only place that touches SGLang (pinned: sglang==0.5.23).

Modules here that import ``sglang`` do so lazily or are imported only inside
SGLang processes; ``env`` and ``stub`` stay import-light because they run
before SGLang is importable (in the supervisor and in ``sitecustomize``).
"""

#: The SGLang release this adapter is written and contract-tested against.
SGLANG_VERSION = "0.5.23"
