"""The pointer-chasing step function: one attention lookup into the slots per step.

The input is ``n_slots`` arrows (:mod:`pondernet_tutorial.data.pointer`). :meth:`~PointerStep.encode`
describes every slot on its own, from its index and its arrow alone (nothing mixes two slots there),
and each step reads the slots once, through one attention lookup:

    k_i     = W_k e_i                             key of slot i: which slot it is
    v_i     = W_v [e_{a_i}; 1(a_i = i)]            value of slot i: where its arrow points, and whether
                                                  it is an exit (an arrow to itself)
    q_n     = W_q h_n                             where to look
    α_n     = softmax(K q_n / √d)                 (B, n_slots): one lookup
    r_n     = Σ_i α_{n,i} v_i                     what the lookup read
    h_{n+1} = GRUCell(r_n, h_n)
    ŷ_n     = K W_o h_{n+1} / √d                  logits over the slots: "the walk ends here"
    z_n     = w_λ · h_{n+1} + b_λ                 halting logit

with ``e`` a learned embedding of the slot indices and ``h_1`` a learned vector (the walk starts at
slot 0). The exit bit ``1(a_i = i)`` tells a step that the slot it read ends the walk: halting then
needs no learning of when the walk is over. With ``exit_feature=False`` the bit is 0 in every slot, and
a step must find out from what it computed: that the arrow it read, ``e_{a_i}``, points back at the
slot it looked at. A lookup that lands on slot ``i`` learns where ``i`` points, not where that slot points in
turn: each step can advance the walk by one arrow, so a walk through ``k`` slots needs ``k`` steps,
and one step cannot solve long walks.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import StepFunction, check_sizes


class PointerStep(StepFunction):
    """One attention lookup per step over ``(B, n_slots)`` arrows.

    Args:
        n_slots: slots per input.
        n_classes: the answer is a slot: must equal ``n_slots``.
        hidden_size: GRU units.
        key_size: size ``d`` of the slot embeddings, keys, queries and values.
        exit_feature: give every slot's value the bit ``1(a_i = i)``; False sets it to 0.
    """

    def __init__(
        self,
        n_slots: int,
        n_classes: int | None = None,
        hidden_size: int = 64,
        key_size: int = 32,
        exit_feature: bool = True,
    ):
        super().__init__()
        check_sizes(n_slots=n_slots, hidden_size=hidden_size, key_size=key_size)
        if n_classes is not None and n_classes != n_slots:
            raise ValueError(
                f"the answer is a slot: n_classes must equal n_slots={n_slots}, got {n_classes}."
            )
        self.n_slots, self.hidden_size, self.key_size = n_slots, hidden_size, key_size
        self.exit_feature = bool(exit_feature)
        self.slot_embedding = nn.Embedding(n_slots, key_size)  # e_i
        self.key = nn.Linear(key_size, key_size)  # W_k
        self.value = nn.Linear(key_size + 1, key_size)  # W_v
        self.query = nn.Linear(hidden_size, key_size)  # W_q
        self.cell = nn.GRUCell(key_size, hidden_size)
        self.output_head = nn.Linear(hidden_size, key_size)  # W_o
        self.halting_head = nn.Linear(hidden_size, 1)
        self.h_start = nn.Parameter(torch.zeros(hidden_size))  # h_1

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``x (B, n_slots)`` arrows -> keys ``K (B, n_slots, d)`` and values ``V (B, n_slots, d)``."""
        if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != self.n_slots:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"expected a (batch, {self.n_slots}) tensor of slot indices, got {shape}.")
        arrows = x.long()  # a_i
        slots = torch.arange(self.n_slots, device=x.device)
        keys = self.key(self.slot_embedding(slots)).expand(x.shape[0], -1, -1)  # k_i = W_k e_i
        is_exit = (arrows == slots).unsqueeze(-1).to(keys.dtype)  # 1(a_i = i)
        if not self.exit_feature:  # the step must tell an exit from the arrow it read
            is_exit = torch.zeros_like(is_exit)
        described = torch.cat([self.slot_embedding(arrows), is_exit], -1)  # [e_{a_i}; 1(a_i = i)]
        values = self.value(described)  # v_i = W_v [e_{a_i}; 1(a_i = i)]
        return keys, values

    def initial_state(self, context: tuple[Tensor, Tensor]) -> Tensor:
        return self.h_start.expand(context[0].shape[0], -1)

    def read(self, context: tuple[Tensor, Tensor], h: Tensor) -> tuple[Tensor, Tensor]:
        """The step's one lookup: attention ``α_n (B, n_slots)`` and what it read, ``r_n (B, d)``."""
        keys, values = context
        query = self.query(h)  # q_n = W_q h_n
        scores = (keys @ query.unsqueeze(-1)).squeeze(-1) / math.sqrt(self.key_size)  # K q_n / √d
        attention = torch.softmax(scores, -1)  # α_n
        return attention, (attention.unsqueeze(1) @ values).squeeze(1)  # r_n = Σ_i α_{n,i} v_i

    def step(self, context: tuple[Tensor, Tensor], h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        _, read = self.read(context, h)  # the only access to the slots' contents
        h_next = self.cell(read, h)  # h_{n+1} = GRU(r_n, h_n)
        answer = self.output_head(h_next).unsqueeze(-1)  # W_o h_{n+1}, (B, d, 1)
        logits = (context[0] @ answer).squeeze(-1) / math.sqrt(self.key_size)  # ŷ_n = K W_o h_{n+1} / √d
        return logits, self.halting_head(h_next).squeeze(1), h_next
