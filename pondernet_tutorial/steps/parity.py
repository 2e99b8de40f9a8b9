"""The parity step functions: a recurrent cell that reads the whole vector at every step.

    h_1     = 0
    h_{n+1} = cell(x, h_n)                    the same input x at every step
    ŷ_n     = W_y h_{n+1} + b_y                logits of "even" and "odd"
    z_n     = w_λ · h_{n+1} + b_λ              halting logit

As in the paper's parity experiment, the input does not change between steps: what changes is the
recurrent state, so later steps can carry on a computation that one step cannot finish. Two cells:

* :class:`ParityRNNStep`, the paper's: "a simple RNN with a single hidden layer containing 128 tanh
  units" (Banino et al. 2021, appendix B.1), ``h_{n+1} = tanh(W_x x + W_h h_n + b)``;
* :class:`ParityStep`, labml's re-implementation's: a GRU cell (64 units in the book's first parity
  runs).

The paper's network ends in "a single logistic sigmoid output unit"; here two logits and a softmax,
which is the same family of functions (the sigmoid of the difference of the two logits).
"""

from __future__ import annotations

from torch import Tensor, nn

from .base import StepFunction, check_sizes


def check_vectors(x, n_elements: int) -> Tensor:
    """Raise unless ``x`` is a float ``(batch, n_elements)`` tensor."""
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != n_elements:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"expected a (batch, {n_elements}) tensor of -1/0/+1, got {shape}.")
    if not x.is_floating_point():
        raise ValueError(f"expected a float tensor, got {x.dtype}: use x.float().")
    return x


class ParityStep(StepFunction):
    """GRU step over a ``(B, n_elements)`` vector of −1/0/+1.

    Args:
        n_elements: length of the input vectors.
        n_classes: 2 (even, odd).
        hidden_size: GRU units.
    """

    def __init__(self, n_elements: int, n_classes: int = 2, hidden_size: int = 128):
        super().__init__()
        check_sizes(n_elements=n_elements, hidden_size=hidden_size)
        self.n_elements, self.hidden_size = n_elements, hidden_size
        self.cell = self.make_cell(n_elements, hidden_size)
        self.output_head = nn.Linear(hidden_size, n_classes)
        self.halting_head = nn.Linear(hidden_size, 1)

    def make_cell(self, n_elements: int, hidden_size: int) -> nn.Module:
        return nn.GRUCell(n_elements, hidden_size)  # h' = GRU(x, h)

    def encode(self, x: Tensor) -> Tensor:
        return check_vectors(x, self.n_elements)

    def initial_state(self, context: Tensor) -> Tensor:
        return context.new_zeros(context.shape[0], self.hidden_size)

    def step(self, context: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h_next = self.cell(context, h)  # h_{n+1} = cell(x, h_n)
        return self.output_head(h_next), self.halting_head(h_next).squeeze(1), h_next


class ParityRNNStep(ParityStep):
    """The paper's step function: a simple (Elman) RNN cell of tanh units over a ``(B, n_elements)``
    vector of −1/0/+1; the arguments are :class:`ParityStep`'s (the paper: 128 hidden units)."""

    def make_cell(self, n_elements: int, hidden_size: int) -> nn.Module:
        return nn.RNNCell(n_elements, hidden_size, nonlinearity="tanh")  # h' = tanh(W_x x + W_h h + b)
