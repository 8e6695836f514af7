"""The only place that imports SGLang (pinned: sglang==0.5.23), grouped by seam.

* ``launch/``     — launching SGLang: argument checks (``args``), the process
  environment and CPU ``sgl_kernel`` stand-in (``env``, ``stub``, ``_site``),
  the hook contract (``contract``), the plugin SGLang loads in every process
  (``plugin``) and the launcher (``main``);
* ``scheduling/`` — inside SGLang's scheduler: its events (``events``, ``state``), arrival checks and admission
  (``scheduler``, ``gate``), queue order (``ordering``, ``queue_columns``,
  ``matching``, ``views``), hidden-state capture and finished-request feedback;
* ``cache/``      — the prefix cache: the eviction-strategy seam (``eviction``),
  the gap cache backend and its gap recompute and host tier (``gap_cache``,
  ``gap_prefill``, ``host_kv``);
* ``middleware/`` — HTTP middleware on SGLang's app: ``Retry-After`` on
  overload answers (``retry_after``) and session ids (``sessions``).

Modules here that import ``sglang`` do so lazily or are imported only inside
SGLang processes; ``launch/env`` and ``launch/stub`` stay import-light because
they run before SGLang is importable (in the supervisor and in
``sitecustomize``).
"""

#: The SGLang release this adapter is written and contract-tested against.
SGLANG_VERSION = "0.5.23"

