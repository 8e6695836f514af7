"""The composition layer: what the server and the simulator share.

``conf/`` is the registry users see; this package turns it into typed objects
for both hosts, and neither host imports the other:

* ``kinds``  — the kinds registry: config group, policy package, Protocol and
  Needs type of every policy kind;
* ``config`` — Hydra composition of ``conf/<root>.yaml`` with one-line errors;
* ``schema`` — the typed schema of the server's own nodes (``model``,
  ``server``, the host settings of a kind such as ``cache.host_tier_tokens``);
* ``specs``  — ``PolicySpec`` (a chosen policy as plain data) and
  ``build_policy``, the only way a spec becomes an object.

NOTE: imports Hydra, OmegaConf and pydantic, never torch, SGLang, ``server``
or ``bench``.
"""
