"""The composition layer: what the server and the simulator share.

``conf/`` is the registry users see; this package turns it into typed objects
for both hosts, and neither host imports the other:

* ``kinds``  — the kinds registry: config group, policy package, Protocol and
  Needs type of every policy kind;
* ``config`` — Hydra composition of ``conf/<root>.yaml`` with one-line errors;
* ``schema`` — the typed schema of the server's own nodes (``model``,
  ``server``, the host settings of a kind such as ``cache.host_tier_tokens``);
* ``specs``  — ``PolicySpec`` (a chosen policy as plain data) and
  ``build_policy``, the only way a spec becomes an object;
* ``model``  — the default model named by ``model.source``, fetched and
  converted once into the cache directory (the server, the tests' HF
  reference and bench scripts all read it).

NOTE: imports Hydra, OmegaConf and pydantic; never SGLang, ``server`` or
``bench``, and torch/transformers only lazily, inside the model conversion
(``tests/config/test_boundaries.py``).
"""
