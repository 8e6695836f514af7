"""API keys (``server.auth``): read from a file or the environment, refused as literals,
handed to each process in its environment, and printed nowhere."""

from __future__ import annotations

import asyncio
import json
import pickle
import sys

import pytest

from compose.config import ConfigError, compose
from server.auth import (
    API_KEY_ENV,
    REDACTED,
    TENANT_KEYS_ENV,
    Keys,
    Secret,
    load_keys,
    parse_tenant_keys,
    put_keys,
    redact,
    take_keys,
)
from server.cluster.plan import resolve_cluster
from server.resolve import resolve
from tests.config.test_config import run_cli

pytestmark = pytest.mark.config

KEY = "sk-test_0123456789abcdef"
ADMIN = "admin-Zz9/8+7="
CPU = "server.device=cpu"


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "api.key"
    path.write_text(KEY + "\n")
    return path


def test_a_key_comes_from_its_file_or_from_the_environment(key_file, tmp_path):
    admin = tmp_path / "admin.key"
    admin.write_text(ADMIN)
    keys = load_keys(str(key_file), str(admin), None, environ={})
    assert (keys.api_key, keys.admin_api_key) == (KEY, ADMIN)
    assert keys.sources == ("server.api_key_file", "server.admin_api_key_file")
    keys = load_keys(None, None, None, environ={API_KEY_ENV: KEY})
    assert keys.api_key == KEY and keys.sources == (f"${API_KEY_ENV}",)
    assert load_keys(None, None, None, environ={}) == Keys()


@pytest.mark.parametrize("content, needle", [
    ("", "the key is empty"),
    ("two words", "only ASCII letters"),
    ('quo"te', "only ASCII letters"),
])
def test_a_bad_key_is_named_by_its_field_and_never_echoed(tmp_path, content, needle):
    path = tmp_path / "k"
    path.write_text(content)
    with pytest.raises(ConfigError, match=needle) as err:
        load_keys(str(path), None, None, environ={})
    assert "server.api_key_file" in str(err.value)
    assert not content or content not in str(err.value)


def test_ambiguous_or_incomplete_keys_are_refused(key_file, tmp_path):
    with pytest.raises(ConfigError, match=r"server.api_key_file and \$SWITCHBOARD_API_KEY are both set"):
        load_keys(str(key_file), None, None, environ={API_KEY_ENV: KEY})
    with pytest.raises(ConfigError, match="server.api_key_file=.*cannot read the key file"):
        load_keys(str(tmp_path / "missing"), None, None, environ={})
    with pytest.raises(ConfigError, match="server.admin_api_key_file needs server.api_key_file"):
        load_keys(None, str(key_file), None, environ={})
    tenants = tmp_path / "tenants"
    tenants.write_text("# team keys\nteam-a: key-a\n\nteam-b:key-b\n")
    # the pinned SMG answers 401 to per-tenant keys (tests/live/test_server_router.py): refused by name
    with pytest.raises(ConfigError, match="router.tenant_keys_file is refused: .*SMG 1.1.0.*401"):
        load_keys(str(key_file), None, str(tenants), environ={})
    assert parse_tenant_keys(tenants.read_text(), "f") == (("team-a", "key-a"), ("team-b", "key-b"))
    with pytest.raises(ConfigError, match="line 1 is not `tenant:key`"):
        parse_tenant_keys("team-a key-a\n", "f")


@pytest.mark.parametrize("field", ["api_key", "admin_api_key"])
def test_a_key_as_a_literal_in_the_config_is_refused(field):
    with pytest.raises(ConfigError, match=rf"sglang.{field} would put a key on the command line.*_file") as err:
        resolve(compose([CPU, f"sglang.{field}={KEY}"]))
    assert KEY not in str(err.value)


def test_the_cli_refuses_the_literal_in_one_line_without_echoing_it():
    proc = run_cli(f"sglang.api_key={KEY}")
    assert proc.returncode == 2
    assert "set server.api_key_file (or $SWITCHBOARD_API_KEY)" in proc.stderr
    assert KEY not in proc.stderr + proc.stdout


def test_cfg_job_prints_the_key_files_path_never_the_key(key_file):
    proc = run_cli("--cfg", "job", f"server.api_key_file={key_file}")
    assert proc.returncode == 0, proc.stderr
    assert f"api_key_file: {key_file}" in proc.stdout and KEY not in proc.stdout + proc.stderr


def test_a_secret_prints_redacted_but_keeps_its_value(key_file):
    secret = Secret(KEY)
    assert repr(secret) == repr(REDACTED) and KEY not in f"{ {'api_key': secret} }"
    assert str(secret) == KEY and f"Bearer {secret}" == f"Bearer {KEY}" and secret == KEY
    back = pickle.loads(pickle.dumps({"api_key": secret}))["api_key"]  # SGLang's scheduler gets ServerArgs so
    assert type(back) is Secret and back == KEY
    keys = load_keys(str(key_file), None, None, environ={})
    assert KEY not in repr(keys) + keys.describe()
    assert redact(f'{{"api_key": "{KEY}", "x": 1}}', keys) == f'{{"api_key": "{REDACTED}", "x": 1}}'


def test_keys_travel_in_the_childs_environment_and_leave_it_when_taken(key_file):
    # NOTE: tenant keys as the gateway wrapper would carry them (load_keys refuses them for now)
    keys = Keys(Secret(KEY), None, (("team-a", Secret("key-a")),), ("server.api_key_file",))
    env = {"PATH": "/bin", "SWITCHBOARD_ADMIN_API_KEY": "stale"}
    put_keys(keys, env)
    assert env == {"PATH": "/bin", API_KEY_ENV: KEY, TENANT_KEYS_ENV: "team-a:key-a"}
    taken = take_keys(env)
    assert env == {"PATH": "/bin"}
    assert (taken.api_key, taken.admin_api_key, taken.tenant_keys) == (KEY, None, (("team-a", "key-a"),))


def test_the_plan_files_and_the_processes_hold_no_key(key_file, tmp_path, monkeypatch):
    from server import supervisor

    monkeypatch.delenv(API_KEY_ENV, raising=False)
    cfg = compose([CPU, "+router=round_robin", "cluster.replicas=2", f"server.api_key_file={key_file}"])
    plan = resolve(cfg)
    cluster = resolve_cluster(cfg, plan)
    assert cluster is not None
    keys = load_keys(str(key_file), None, None, environ={})
    worker = supervisor._sglang_child("w", cluster.workers[0], tmp_path, keys)
    gateway = supervisor._gateway_child(cluster, keys)
    assert worker.env is not None and gateway.env is not None
    assert worker.env[API_KEY_ENV] == KEY == gateway.env[API_KEY_ENV]
    written = "".join(p.read_text() for p in tmp_path.glob("plan-*.json"))
    assert written and KEY not in written
    for argv in (worker.argv, gateway.argv):
        assert KEY not in " ".join(argv)


def test_the_gateway_serves_https_with_both_paths_and_refuses_a_missing_file(tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("cert")
    key.write_text("key")
    cfg = compose([CPU, "+router=round_robin", f"router.tls_cert_path={cert}", f"router.tls_key_path={key}"])
    gateway = resolve_cluster(cfg, resolve(cfg)).gateway
    argv = list(gateway.argv)
    assert argv[argv.index("--tls-cert-path") + 1] == str(cert) and argv[argv.index("--tls-key-path") + 1] == str(key)
    assert gateway.url.startswith("https://")
    with pytest.raises(ConfigError, match="router.tls_key_path=.*not a readable file"):
        cfg = compose([CPU, "+router=round_robin", f"router.tls_cert_path={cert}",
                       f"router.tls_key_path={tmp_path / 'none'}"])
        resolve_cluster(cfg, resolve(cfg))
    with pytest.raises(ConfigError, match="router.tls_key_path.*both or neither"):
        specs = compose([CPU, "+router=round_robin", f"router.tls_cert_path={cert}"])
        resolve(specs)


def test_the_gateway_wrapper_gives_smg_the_keys_from_its_environment(monkeypatch):
    import smg.launch_router

    from server.cluster import smg_main

    got = []
    monkeypatch.setattr(smg.launch_router, "launch_router", got.append)
    monkeypatch.setenv(API_KEY_ENV, KEY)
    monkeypatch.setenv(TENANT_KEYS_ENV, "team-a:key-a")
    smg_main.main(["--worker-urls", "http://127.0.0.1:1", "--policy", "round_robin"])
    (args,) = got
    assert args.api_key == KEY and args.tenant_api_keys == [("team-a", "key-a")]
    assert args.worker_urls == ["http://127.0.0.1:1"]
    import os
    assert API_KEY_ENV not in os.environ and TENANT_KEYS_ENV not in os.environ


def _asgi_get(app, path: str) -> tuple[dict, bytes]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app({"type": "http", "path": path, "method": "GET"}, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_server_info_answers_carry_no_key(key_file):
    from server.sglang.middleware.redact import RedactKeysMiddleware

    info = json.dumps({"api_key": KEY, "admin_api_key": ADMIN, "internal_states": [{"api_key": KEY}]}).encode()

    async def sglang_app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(info)).encode())]})
        half = len(info) // 2  # in two chunks, as a streamed body would come
        await send({"type": "http.response.body", "body": info[:half], "more_body": True})
        await send({"type": "http.response.body", "body": info[half:], "more_body": False})

    keys = Keys(Secret(KEY), Secret(ADMIN), sources=("test",))
    for path in ("/server_info", "/get_server_info"):
        start, body = _asgi_get(RedactKeysMiddleware(sglang_app, keys), path)
        assert json.loads(body) == {"api_key": REDACTED, "admin_api_key": REDACTED,
                                    "internal_states": [{"api_key": REDACTED}]}
        assert dict(start["headers"])[b"content-length"] == str(len(body)).encode()
    _, body = _asgi_get(RedactKeysMiddleware(sglang_app, keys), "/v1/models")
    assert body == info  # every other answer passes untouched


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
