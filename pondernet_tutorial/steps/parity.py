"""The parity step function: a GRU cell that reads the whole vector at every step.

    h_1     = 0
    h_{n+1} = GRUCell(x, h_n)                 the same input x at every step
    ŷ_n     = W_y h_{n+1} + b_y                logits of "even" and "odd"
    z_n     = w_λ · h_{n+1} + b_λ              halting logit

As in the paper's parity experiment, the input does not change between steps: what changes is the
recurrent state, so later steps can carry on a computation that one step cannot finish.
"""

from __future__ import annotations

from torch import Tensor, nn

from .base import StepFunction


class ParityStep(StepFunction):
    """GRU step over a ``(B, n_elements)`` vector of −1/0/+1.

    Args:
        n_elements: length of the input vectors.
        n_classes: 2 (even, odd).
        hidden_size: GRU units.
    """

    def __init__(self, n_elements: int, n_classes: int = 2, hidden_size: int = 128):
        super().__init__()
        self.n_elements, self.hidden_size = n_elements, hidden_size
        self.cell = nn.GRUCell(n_elements, hidden_size)
        self.output_head = nn.Linear(hidden_size, n_classes)
        self.halting_head = nn.Linear(hidden_size, 1)

    def encode(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != self.n_elements:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"expected a (batch, {self.n_elements}) tensor of -1/0/+1, got {shape}.")
        if not x.is_floating_point():
            raise ValueError(f"expected a float tensor, got {x.dtype}: use x.float().")
        return x

    def initial_state(self, context: Tensor) -> Tensor:
        return context.new_zeros(context.shape[0], self.hidden_size)

    def step(self, context: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h_next = self.cell(context, h)  # h_{n+1} = GRU(x, h_n)
        return self.output_head(h_next), self.halting_head(h_next).squeeze(1), h_next
