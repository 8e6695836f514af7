"""Per-request features for learning policies (LEAP), from the serving model itself.

``PromptEmbedding`` (``needs.prompt_embedding``): when a request arrives, the mean
of the model's input token embeddings over its prompt, read from the embedding
table the model runner holds (no forward pass). It exists before the request is
first ranked, so it can decide which request is prefilled first.

``HiddenStateCapture`` (``needs.hidden_state_layer``): a decoder layer's input
hidden state at each sequence's last prefill token, known only after the prefill.
A forward pre-hook on
that layer of the model the scheduler's model runner holds passes SGLang's own
``capture_output`` callback (the one its EAGLE3/DFlash aux capture uses) on
extend (prefill) forwards: the layer hands it the residual stream entering the
layer, for every token in the batch. The hook keeps the rows of each
sequence's last token; the scheduler attaches them to the batch's requests
after ``run_batch``. Same code on CPU and GPU.

``DenoiseHiddenCapture`` (``needs.rounds.denoise_hidden_state``, diffusion LMs): the
mean of the final-layer hidden states over a request's block in its first
denoising round. A forward pre-hook on the model's ``logits_processor`` (SGLang
calls it with the final hidden states of every row of the round) keeps each
sequence's mean; after ``run_batch`` the requests that just ran their first
denoising block get theirs.

NOTE: a hook does not run inside a CUDA graph: prefill CUDA graphs must be off
(the launcher enforces it when a policy asks for features).
"""

from __future__ import annotations

from typing import Any

import torch

from server.sglang.scheduling.state import state_of

#: Prompt tokens gathered per step: bounds the temporary to CHUNK x hidden size.
CHUNK = 8192


class PromptEmbedding:
    """The mean input embedding of a prompt (see module docs).

    NOTE: the table must be whole: with tensor parallelism each rank holds a
    vocabulary shard, so ``tp_size > 1`` is refused at startup rather than
    giving ranks different features.
    """

    def __init__(self, model: torch.nn.Module, tp_size: int) -> None:
        if tp_size != 1:
            raise ValueError(f"prompt-embedding features need tp_size=1 (got {tp_size}): "
                             "each rank would hold only a vocabulary shard of the embedding table")
        embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") \
            else model.get_submodule("model.embed_tokens")
        self.weight: torch.Tensor = embed.weight

    def of(self, token_ids: list[int]) -> torch.Tensor:
        """float32 mean of the embeddings of ``token_ids`` (zeros for an empty prompt)."""
        ids = torch.as_tensor(token_ids, dtype=torch.long, device=self.weight.device)
        total = torch.zeros(self.weight.shape[1], dtype=torch.float32, device=self.weight.device)
        with torch.no_grad():
            for start in range(0, len(ids), CHUNK):
                total += self.weight.index_select(0, ids[start:start + CHUNK]).float().sum(0)
        return total / max(1, len(ids))

    def attach(self, req: Any) -> None:
        state_of(req).features = self.of(req.origin_input_ids)

    def on_admitted(self, req: Any) -> None:
        """``OnAdmitted``: features before the request is first ranked (LEAP orders fresh arrivals)."""
        self.attach(req)


class HiddenStateCapture:
    """Forward pre-hook on ``model.model.layers[layer]`` (see module docs)."""

    def __init__(self, model: torch.nn.Module, layer: int) -> None:
        layers = model.get_submodule("model.layers")
        if not 0 <= layer < len(layers):
            raise ValueError(f"hidden_state_layer={layer} but the model has {len(layers)} layers")
        self._rows: torch.Tensor | None = None
        self._handle = layers[layer].register_forward_pre_hook(self._pre_hook, with_kwargs=True)

    def _pre_hook(self, module: Any, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        forward_batch = args[2] if len(args) > 2 else kwargs.get("forward_batch")
        if forward_batch is None or not forward_batch.forward_mode.is_extend() \
                or kwargs.get("capture_output") is not None:
            return None
        last = forward_batch.extend_start_loc + forward_batch.extend_seq_lens - 1

        def capture(value: torch.Tensor, owned: bool = False) -> None:
            self._rows = value.index_select(0, last.to(value.device)).float()

        return args, {**kwargs, "capture_output": capture}

    def attach(self, reqs: list[Any]) -> None:
        """Give each request of the last extend batch its row (a later chunk overwrites)."""
        rows, self._rows = self._rows, None
        if rows is None or rows.shape[0] != len(reqs):
            return
        for req, row in zip(reqs, rows):
            state_of(req).features = row

    def batch_finished(self, batch: Any, prefill: bool) -> None:
        """``OnBatchFinished``: a prefill batch's requests get their rows."""
        if prefill:
            self.attach(batch.reqs)

    def remove(self) -> None:
        self._handle.remove()


class DenoiseHiddenCapture:
    """Forward pre-hook on ``model.logits_processor`` (see module docs)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._means: torch.Tensor | None = None
        self._handle = model.get_submodule("logits_processor").register_forward_pre_hook(self._pre_hook)

    def _pre_hook(self, module: Any, args: tuple[Any, ...]) -> None:
        hidden, forward_batch = args[1], args[3]
        lens = forward_batch.extend_seq_lens
        if lens is None or int(lens.sum()) != hidden.shape[0]:
            self._means = None
            return
        seq = torch.repeat_interleave(torch.arange(len(lens), device=hidden.device), lens.to(hidden.device))
        sums = torch.zeros(len(lens), hidden.shape[1], dtype=torch.float32, device=hidden.device)
        sums.index_add_(0, seq, hidden.float())
        self._means = sums / lens.to(hidden.device).unsqueeze(1).clamp(min=1)

    def attach(self, reqs: list[Any]) -> None:
        """Give each request that just ran its first denoising block its mean row."""
        means, self._means = self._means, None
        if means is None or means.shape[0] != len(reqs):
            return
        for req, row in zip(reqs, means):
            state = state_of(req)
            if not req.is_dllm_prefill() and state.features is None:
                state.features = row

    def batch_finished(self, batch: Any, prefill: bool) -> None:
        """``OnBatchFinished``: after a dLLM extend round, its requests' first denoising blocks."""
        if batch.forward_mode.is_dllm_extend():
            self.attach(batch.reqs)

    def remove(self) -> None:
        self._handle.remove()


def features_of(req: Any) -> tuple[float, ...] | None:
    """The captured features of ``req`` as plain floats (syncs the device once)."""
    state = state_of(req)
    row: tuple[float, ...] | torch.Tensor | None = state.features
    if row is None:
        return None
    if isinstance(row, torch.Tensor):
        row = tuple(row.cpu().tolist())
        state.features = row
    return row
