"""API keys, end to end: read once by the supervisor, handed to each process in its environment.

A key comes from a file (``server.api_key_file``, ``server.admin_api_key_file``,
``router.tenant_keys_file``) or from an environment variable
(``$SWITCHBOARD_API_KEY``, ``$SWITCHBOARD_ADMIN_API_KEY``; Kubernetes sets them
from a Secret), never from a literal in the config: a command line is visible to
every local user (``ps``), and ``sglang.api_key=...`` is refused at startup.

NOTE: the supervisor reads the keys and passes them to the SGLang launcher and
to the gateway wrapper in *their* environment (``put_keys``); each of them
takes its keys out of its environment before anything else starts
(``take_keys``), so SGLang's scheduler processes never see them. Nothing here
writes a key to a plan file, a log line or a command line: ``Keys`` and
``Secret`` print as ``<redacted>``.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from compose.config import ConfigError

API_KEY_ENV = "SWITCHBOARD_API_KEY"
ADMIN_KEY_ENV = "SWITCHBOARD_ADMIN_API_KEY"
#: ``tenant:key`` pairs, one per line (set by the supervisor only).
TENANT_KEYS_ENV = "SWITCHBOARD_TENANT_KEYS"
REDACTED = "<redacted>"
#: Paths SGLang (0.5.23) and SMG answer without a key: health, readiness and
#: metrics, so Kubernetes probes and Prometheus need no secret.
OPEN_PATHS = ("/health", "/health_generate", "/ready", "/metrics", "/liveness", "/readiness")
#: A key's characters. NOTE: no whitespace, quotes or backslashes, so a key reads
#: the same in an HTTP header, a JSON document and ``tenant:key`` lines.
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "-._~+/=!#$%&*?@^|")


class Secret(str):
    """A key that prints as ``<redacted>`` (``repr``, hence any logged container).

    NOTE: ``str()``/f-strings keep the value: SGLang sends ``f"Bearer {key}"``
    in its own warm-up request and compares the header with it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(REDACTED)


@dataclass(frozen=True, repr=False)
class Keys:
    """The deployment's keys (``None``/empty: not set) and where each came from."""

    api_key: Secret | None = None
    """Clients send it as ``Authorization: Bearer <key>``; the gateway sends it to the workers."""
    admin_api_key: Secret | None = None
    """SGLang's admin key: its control endpoints (cache flush, weight updates) need it."""
    tenant_keys: tuple[tuple[str, Secret], ...] = ()
    """The gateway's per-tenant keys, ``(tenant, key)``."""
    sources: tuple[str, ...] = ()
    """Where each key came from (a field or an environment variable), for the log."""

    def __repr__(self) -> str:
        return f"Keys(from {', '.join(self.sources) or 'nothing'})"

    def values(self) -> list[str]:
        """Every key's value (for redaction)."""
        return [str(k) for k in (self.api_key, self.admin_api_key, *(k for _, k in self.tenant_keys)) if k]

    def describe(self) -> str:
        """One log line: which keys are set and from where, and what stays open."""
        if not self.sources:
            return "auth: no API key (set server.api_key_file or $SWITCHBOARD_API_KEY); every endpoint is open"
        return (f"auth: keys from {', '.join(self.sources)}; open without a key: "
                f"{', '.join(OPEN_PATHS)} (probes and Prometheus)")


def _check_key(key: str, where: str) -> Secret:
    if not key:
        raise ConfigError(f"{where}: the key is empty")
    bad = sorted({c for c in key if c not in _KEY_CHARS})
    if bad:
        # NOTE: never echo the key, nor its characters beyond their classes
        raise ConfigError(f"{where}: a key may hold only ASCII letters, digits and -._~+/=!#$%&*?@^| "
                          f"({len(bad)} other character(s) found)")
    return Secret(key)


def _read(path: str, field_name: str) -> str:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{field_name}={path}: cannot read the key file ({type(exc).__name__})") from None
    return text.strip()


def _one(file: str | None, field_name: str, env_name: str, environ: Mapping[str, str],
         sources: list[str]) -> Secret | None:
    in_env = environ.get(env_name)
    if file and in_env is not None:
        raise ConfigError(f"{field_name} and ${env_name} are both set: keep one")
    if file:
        sources.append(field_name)
        return _check_key(_read(file, field_name), field_name)
    if in_env is not None:
        sources.append(f"${env_name}")
        return _check_key(in_env.strip(), f"${env_name}")
    return None


def parse_tenant_keys(text: str, where: str) -> tuple[tuple[str, Secret], ...]:
    """``tenant:key`` lines (blank lines and ``#`` comments skipped)."""
    pairs: list[tuple[str, Secret]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        tenant, colon, key = line.partition(":")
        if not colon or not tenant.strip():
            raise ConfigError(f"{where}: line {n} is not `tenant:key`")
        pairs.append((tenant.strip(), _check_key(key.strip(), f"{where} line {n}")))
    if len({t for t, _ in pairs}) != len(pairs):
        raise ConfigError(f"{where}: a tenant is listed twice")
    return tuple(pairs)


def load_keys(api_key_file: str | None, admin_api_key_file: str | None, tenant_keys_file: str | None,
              environ: Mapping[str, str] | None = None) -> Keys:
    """Read the keys the config and the environment name (raises ``ConfigError`` naming the field)."""
    env = os.environ if environ is None else environ
    sources: list[str] = []
    api_key = _one(api_key_file, "server.api_key_file", API_KEY_ENV, env, sources)
    admin = _one(admin_api_key_file, "server.admin_api_key_file", ADMIN_KEY_ENV, env, sources)
    tenants: tuple[tuple[str, Secret], ...] = ()
    if tenant_keys_file:
        # NOTE: refused, not passed on: SMG 1.1.0 (pinned) takes per-tenant keys (RouterArgs.tenant_api_keys,
        # --tenant-api-key) and then answers 401 to each of them on the serving routes, through its Python
        # launcher and its `smg launch` CLI alike (checked live; tests/live/test_server_router.py keeps the
        # check: when SMG honours them, that test fails and this refusal can go).
        raise ConfigError("router.tenant_keys_file is refused: the pinned gateway (SMG 1.1.0) accepts per-tenant "
                          "keys but answers 401 to every one of them; use server.api_key_file (one key for the "
                          "unit) until SMG honours them")
    if admin is not None and api_key is None:
        raise ConfigError("server.admin_api_key_file needs server.api_key_file (or $SWITCHBOARD_API_KEY) too: "
                          "with an admin key alone SGLang serves inference to anyone")
    return Keys(api_key, admin, tenants, tuple(sources))


def put_keys(keys: Keys, env: MutableMapping[str, str]) -> None:
    """Put ``keys`` into a child's environment ``env`` (and no other key variable)."""
    for name in (API_KEY_ENV, ADMIN_KEY_ENV, TENANT_KEYS_ENV):
        env.pop(name, None)
    if keys.api_key:
        env[API_KEY_ENV] = str(keys.api_key)
    if keys.admin_api_key:
        env[ADMIN_KEY_ENV] = str(keys.admin_api_key)
    if keys.tenant_keys:
        env[TENANT_KEYS_ENV] = "\n".join(f"{t}:{k}" for t, k in keys.tenant_keys)


def take_keys(environ: MutableMapping[str, str] | None = None) -> Keys:
    """The keys a launched process was given, removed from its environment.

    NOTE: removed first, so the processes it spawns in turn (SGLang's scheduler
    and detokenizer) never inherit them."""
    env = os.environ if environ is None else environ
    api_key = env.pop(API_KEY_ENV, None)
    admin = env.pop(ADMIN_KEY_ENV, None)
    tenants = env.pop(TENANT_KEYS_ENV, None)
    return Keys(Secret(api_key) if api_key else None, Secret(admin) if admin else None,
                parse_tenant_keys(tenants, f"${TENANT_KEYS_ENV}") if tenants else (),
                tuple(n for n, v in ((API_KEY_ENV, api_key), (ADMIN_KEY_ENV, admin), (TENANT_KEYS_ENV, tenants))
                      if v))


def redact(text: str, keys: Keys) -> str:
    """``text`` with every key's value replaced by ``<redacted>``."""
    for value in sorted(keys.values(), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text
