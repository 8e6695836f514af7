"""Many replicas behind SGLang's own gateway (``+router=``, ``cluster.*``).

* ``plan``    — what one command starts: worker launch plans (ports, CPU
  shares), the gateway, the restart budget (``resolve_cluster``);
* ``gateway`` — the router kind's server binding: the SMG command built from a
  routing policy's ``needs`` and ``router.*`` host settings.

No SGLang import here: workers are SGLang servers started by
``server.supervisor`` like the single server; the gateway is the ``smg``
binary. Switchboard never routes a request itself.
"""
