"""Frozen views shared by several policy kinds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DllmView:
    """A diffusion-LM request's progress in block rounds, as its host sees it now.

    A diffusion LM works on one block of ``block_size`` positions per request
    per scheduler round: a prompt block (prefill) or one denoising step of a
    generation block (FDFO: a block takes rounds until its last mask is
    confirmed). NOTE: every count is host-provided and deterministic (rounds,
    never clocks), so tensor-parallel ranks agree."""

    block_size: int
    """Positions per block (SGLang's dLLM ``block_size``)."""
    prompt_blocks_left: int
    """Prompt blocks still to prefill, one round each (whole uncached blocks; a
    partial last prompt block is part of the first generation block)."""
    denoise_rounds: int = 0
    """Rounds the request has spent on generation blocks so far."""
    rounds_waited: int = 0
    """Rounds in a row, up to now, in which the request was present (waiting
    or admitted) and got no block: 0 right after a round it ran in."""
    admitted: bool = False
    """It holds one of the host's dLLM slots (and its KV); a waiting request
    needs a free slot before it can run."""
    masks_left: int = 0
    """Masked positions left in its current generation block (0 between blocks)."""
    prompt_words: int = 0
    """Whitespace-separated words of the prompt text (0 when the host has no text)."""
    prompt_lines: int = 0
    """Lines of the prompt text (0 when the host has no text)."""
    rounds_run: int = 0
    """Rounds it has run in so far, prompt and denoising."""
    shared_rounds: int = 0
    """Rounds it ran in that carried prompt and denoising blocks together (a
    host statistic: it shows the phases sharing rounds)."""
    longest_wait: int = 0
    """The most rounds in a row it was passed over so far (a host statistic:
    it shows the aging bound)."""


@dataclass(frozen=True, slots=True)
class RequestView:
    """One request waiting to be (re)prefilled, as its host sees it now.

    NOTE: every field is host-provided; policies never read clocks. Times are
    seconds on the host's clock (wall clock inside SGLang, simulated time in the
    simulator) and only differences between them are meaningful.
    """

    rid: str
    """Request id, unique among live requests."""
    arrival_seq: int
    """Host-assigned arrival order (0, 1, 2, ...). Deterministic: identical on
    every tensor-parallel rank, so it is the tie-breaker of choice."""
    arrival_time: float
    """When the request entered the waiting queue, in host seconds."""
    num_input_tokens: int
    """Tokens a prefill must cover if nothing were cached: the prompt plus any
    output already generated (a retracted request resumes from there)."""
    num_cached_tokens: int = 0
    """Leading input tokens already in the prefix cache (the host's latest
    match; 0 when the host has not matched yet)."""
    max_new_tokens: int = 0
    """The request's output-token limit."""
    num_output_tokens: int = 0
    """Output tokens generated so far (non-zero only for retracted requests)."""
    arrival_processed_tokens: int = 0
    """The host's prefill-token counter when the request arrived (a token clock
    that is identical on every rank; see ``QueueView.processed_tokens``)."""
    in_batch_duplicate: bool = False
    """SGLang's in-batch prefix rule flagged this request this pass: its cache
    hit is short (<= 32 tokens) and it shares >= 32 leading tokens with an
    earlier waiting request, which will fill the cache for both."""
    priority: int | None = None
    """User-given priority, if any."""
    session_id: str | None = None
    """Session the request belongs to, if the client named one."""
    features: tuple[float, ...] | None = None
    """Features the host computed for this request, for policies whose needs
    ask for them (LEAP): the prompt's mean input embedding from arrival on
    (``needs.prompt_embedding``), or a layer's hidden state once the request
    was prefilled (``needs.hidden_state_layer``); ``None`` until then or when
    not asked for."""
    prefix_path: tuple[int, ...] = ()
    """Where the request's cached prefix ends in the host's prefix tree: one
    key per tree node on the path from the root (excluded) down to the node
    the match ends in (included). A key identifies its node among its
    siblings, and keys order siblings the way the host's tree orders its
    children (SGLang: position in ``parent.children``, i.e. insertion order;
    the simulator: the order children were attached). Two requests whose
    matches end in the same node have equal paths; a path that is a prefix
    of another names an ancestor. Empty when nothing is cached or the host
    does not provide tree information; hosts fill it only for policies whose
    ``needs.prefix_path`` is set (walking the tree costs time).

    NOTE: matches end on node boundaries (SGLang splits a node where a match
    ends), so the tree the paths describe is the host's tree after this
    pass's matching."""

    @property
    def num_uncached_tokens(self) -> int:
        """Tokens the prefill must actually compute."""
        return max(0, self.num_input_tokens - self.num_cached_tokens)
