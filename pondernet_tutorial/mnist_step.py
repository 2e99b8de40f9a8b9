"""The MNIST step function of the book: a CNN embeds the image once, an MLP ponders over it.

    e      = CNN(x)                          once per forward pass
    h_1    = 0
    h_{n+1} = MLP([e, h_n])                   at every step
    ŷ_n    = W_y h_{n+1} + b_y                class logits
    z_n    = w_λ · h_{n+1} + b_λ              halting logit, λ_n = sigmoid(z_n)

The CNN is the reference experiment's (conv 10 and 20 channels, kernel 5, Dropout2d); the MLP has two
layers of ``hidden_size`` units.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .model import PonderNet, StepFunction

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def check_images(x: Tensor) -> None:
    """Raise a ``ValueError`` unless ``x`` is a float batch of shape ``(B, 1, 28, 28)``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"expected a torch.Tensor of images, got {type(x).__name__}.")
    if x.dim() != 4 or tuple(x.shape[1:]) != (1, 28, 28):
        hint = " (add the channel axis with x.unsqueeze(1))" if x.dim() == 3 else ""
        raise ValueError(f"expected images of shape (batch, 1, 28, 28), got {tuple(x.shape)}{hint}.")
    if not x.is_floating_point():
        raise ValueError(
            f"expected floating-point pixel intensities in [0, 1], got dtype {x.dtype}; "
            "convert uint8 images with x.float() / 255."
        )


class MNISTEmbedding(nn.Module):
    """The reference CNN: ``(B, 1, 28, 28)`` pixels in [0, 1] -> ``(B, embedding_size)``."""

    def __init__(self, embedding_size: int = 64, dropout: float = 0.5):
        super().__init__()
        self.register_buffer("mean", torch.tensor(MNIST_MEAN), persistent=False)
        self.register_buffer("std", torch.tensor(MNIST_STD), persistent=False)
        self.net = nn.Sequential(
            nn.Conv2d(1, 10, kernel_size=5),  # (B, 10, 24, 24)
            nn.MaxPool2d(2),  # (B, 10, 12, 12)
            nn.ReLU(),
            nn.Conv2d(10, 20, kernel_size=5),  # (B, 20, 8, 8)
            nn.Dropout2d(dropout),
            nn.MaxPool2d(2),  # (B, 20, 4, 4)
            nn.ReLU(),
            nn.Flatten(),  # (B, 320)
            nn.Linear(320, embedding_size),
            nn.ReLU(),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net((x - self.mean) / self.std)  # normalised with MNIST's mean and std


class MNISTStep(StepFunction):
    """Step function for MNIST: CNN embedding once, a 2-layer MLP over ``[e, h_n]`` at each step.

    Args:
        hidden_size: size of the hidden state ``h`` and of the MLP's layers.
        embedding_size: size of the CNN embedding ``e``.
        n_classes: number of classes.
        dropout: ``Dropout2d`` probability in the CNN.
    """

    def __init__(
        self, hidden_size: int = 64, embedding_size: int = 64, n_classes: int = 10, dropout: float = 0.5
    ):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = MNISTEmbedding(embedding_size, dropout)
        self.mlp = nn.Sequential(
            nn.Linear(embedding_size + hidden_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
        )
        self.output_head = nn.Linear(hidden_size, n_classes)  # ŷ_n
        self.lambda_head = nn.Linear(hidden_size, 1)  # z_n, λ_n = sigmoid(z_n)

    def encode(self, x: Tensor) -> Tensor:
        check_images(x)
        return self.embedding(x)  # e: (B, embedding_size)

    def initial_state(self, context: Tensor) -> Tensor:
        return context.new_zeros(context.shape[0], self.hidden_size)  # h_1 = 0: (B, H)

    def step(self, context: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h_next = self.mlp(torch.cat([context, h], dim=1))  # h_{n+1} = MLP([e, h_n])
        return self.output_head(h_next), self.lambda_head(h_next).squeeze(1), h_next


def mnist_pondernet(
    max_steps: int = 20, hidden_size: int = 64, embedding_size: int = 64, dropout: float = 0.5
) -> PonderNet:
    """The book's MNIST PonderNet with the reference experiment's defaults."""
    return PonderNet(MNISTStep(hidden_size, embedding_size, dropout=dropout), max_steps=max_steps)
