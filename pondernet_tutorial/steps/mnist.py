"""MNIST step functions: the book's CNN + MLP, a refining CNN, and the plain CNN baseline.

The book's step (:class:`MNISTStep`, registered as ``mnist_mlp``):

    e       = CNN(x)                          once per forward pass
    h_1     = 0
    h_{n+1} = MLP([e, h_n])                   at every step
    ŷ_n     = W_y h_{n+1} + b_y                class logits
    z_n     = w_λ · h_{n+1} + b_λ              halting logit, λ_n = sigmoid(z_n)

The CNN is the reference experiment's (conv 10 and 20 channels, kernel 5, Dropout2d); the MLP has two
layers of ``hidden_size`` units and, unlike the article's, no ``Dropout(0.2)``. Every step sees the same embedding ``e``, so extra steps add
computation on a fixed summary of the image.

:class:`MNISTRefineStep` (``mnist_refine``) lets extra steps add depth: the CNN's feature map is the
state, and every step applies the same residual convolutional block to it before the heads, so the
prediction of step ``n`` comes from ``n`` blocks of convolutions. :class:`MNISTPlainStep`
(``mnist_cnn``) is the CNN and a linear classifier: with one fixed step it is the plain CNN baseline.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import StepFunction, check_sizes

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def check_images(x: Tensor, values: bool = False) -> None:
    """Raise a ``ValueError`` unless ``x`` is a float batch of shape ``(B, 1, 28, 28)``; ``values``: and
    its pixels lie in [0, 1] (a check that waits for the device: made outside training's step)."""
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
    if values and not torch.compiler.is_compiling() and x.numel():
        low, high = float(x.min()), float(x.max())
        if low < -0.01 or high > 1.01:  # bilinear rotation keeps [0, 1]; 0..255, or normalised twice
            raise ValueError(
                f"expected pixel intensities in [0, 1], got values from {low:.2f} to {high:.2f}: divide "
                "0..255 images by 255, and do not normalise them (the step does)."
            )


def reference_trunk(dropout: float) -> nn.Sequential:
    """The reference CNN's convolutions: ``(B, 1, 28, 28)`` -> ``(B, 20, 4, 4)``."""
    return nn.Sequential(
        nn.Conv2d(1, 10, kernel_size=5),  # (B, 10, 24, 24)
        nn.MaxPool2d(2),  # (B, 10, 12, 12)
        nn.ReLU(),
        nn.Conv2d(10, 20, kernel_size=5),  # (B, 20, 8, 8)
        nn.Dropout2d(dropout),
        nn.MaxPool2d(2),  # (B, 20, 4, 4)
        nn.ReLU(),
    )


class MNISTEmbedding(nn.Module):
    """The reference CNN: ``(B, 1, 28, 28)`` pixels in [0, 1] -> ``(B, embedding_size)``."""

    def __init__(self, embedding_size: int = 64, dropout: float = 0.5):
        super().__init__()
        check_sizes(embedding_size=embedding_size)
        self.register_buffer("mean", torch.tensor(MNIST_MEAN), persistent=False)
        self.register_buffer("std", torch.tensor(MNIST_STD), persistent=False)
        self.net = nn.Sequential(
            *reference_trunk(dropout),
            nn.Flatten(),  # (B, 320)
            nn.Linear(320, embedding_size),
            nn.ReLU(),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net((x - self.mean) / self.std)  # normalised with MNIST's mean and std


class MNISTStep(StepFunction):
    """Step function for MNIST: CNN embedding once, a 2-layer MLP over ``[e, h_n]`` at each step.

    Args:
        n_classes: number of classes.
        hidden_size: size of the hidden state ``h`` and of the MLP's layers.
        embedding_size: size of the CNN embedding ``e``.
        dropout: ``Dropout2d`` probability in the CNN.
    """

    def __init__(
        self, n_classes: int = 10, hidden_size: int = 64, embedding_size: int = 64, dropout: float = 0.5
    ):
        super().__init__()
        check_sizes(hidden_size=hidden_size)
        self.hidden_size = hidden_size
        self.embedding = MNISTEmbedding(embedding_size, dropout)
        self.mlp = nn.Sequential(
            nn.Linear(embedding_size + hidden_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
        )
        self.output_head = nn.Linear(hidden_size, n_classes)  # ŷ_n
        self.halting_head = nn.Linear(hidden_size, 1)  # z_n, λ_n = sigmoid(z_n)

    def encode(self, x: Tensor) -> Tensor:
        """The CNN embedding ``e`` and, since ``e`` is the same at every step, its share of the MLP's
        first layer: ``W [e, h] + b = (W_e e + b) + W_h h``. Returns ``W_e e + b``, ``(B, H)``."""
        check_images(x, values=not self.training)
        e = self.embedding(x)  # e: (B, embedding_size)
        first = self.mlp[0]
        return F.linear(e, first.weight[:, : e.shape[1]], first.bias)  # W_e e + b, once per input

    def initial_state(self, context: Tensor) -> Tensor:
        return context.new_zeros(context.shape[0], self.hidden_size)  # h_1 = 0: (B, H)

    def step(self, context: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        first, second = self.mlp[0], self.mlp[2]
        a = torch.relu(context + F.linear(h, first.weight[:, -h.shape[1] :]))  # ReLU(W [e, h_n] + b)
        h_next = torch.relu(second(a))  # h_{n+1} = MLP([e, h_n])
        return self.output_head(h_next), self.halting_head(h_next).squeeze(1), h_next


class MNISTRefineStep(StepFunction):
    """A step that adds depth: the same residual conv block refines the CNN's feature map every step.

        F_1     = CNN(x)                                  (B, 20, 4, 4), once
        F_{n+1} = ReLU(F_n + conv(ReLU(conv(F_n))))       the same block at every step
        a_n     = ReLU(W_a flatten(F_{n+1}))              (B, hidden_size)
        ŷ_n, z_n = heads(a_n)

    Args:
        n_classes: number of classes.
        hidden_size: width of the layer before the heads.
        dropout: ``Dropout2d`` probability in the CNN.
    """

    def __init__(self, n_classes: int = 10, hidden_size: int = 64, dropout: float = 0.5):
        super().__init__()
        check_sizes(hidden_size=hidden_size)
        self.register_buffer("mean", torch.tensor(MNIST_MEAN), persistent=False)
        self.register_buffer("std", torch.tensor(MNIST_STD), persistent=False)
        self.trunk = reference_trunk(dropout)
        self.block = nn.Sequential(
            nn.Conv2d(20, 20, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(20, 20, kernel_size=3, padding=1),
        )
        self.readout = nn.Sequential(nn.Flatten(), nn.Linear(320, hidden_size), nn.ReLU())
        self.output_head = nn.Linear(hidden_size, n_classes)
        self.halting_head = nn.Linear(hidden_size, 1)

    def encode(self, x: Tensor) -> Tensor:
        check_images(x, values=not self.training)
        return self.trunk((x - self.mean) / self.std)  # F_1: (B, 20, 4, 4)

    def initial_state(self, context: Tensor) -> Tensor:
        return context  # the feature map is the state

    def step(self, context: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h_next = torch.relu(h + self.block(h))  # F_{n+1} = ReLU(F_n + block(F_n))
        a = self.readout(h_next)
        return self.output_head(a), self.halting_head(a).squeeze(1), h_next


class MNISTPlainStep(StepFunction):
    """The CNN embedding and a linear classifier; the state is unused. With one fixed step
    (``method="fixed"``, ``max_steps=1``) it is the plain CNN baseline.

    Args:
        n_classes: number of classes.
        embedding_size: size of the CNN embedding.
        dropout: ``Dropout2d`` probability in the CNN.
    """

    def __init__(self, n_classes: int = 10, embedding_size: int = 64, dropout: float = 0.5):
        super().__init__()
        self.embedding = MNISTEmbedding(embedding_size, dropout)
        self.output_head = nn.Linear(embedding_size, n_classes)

    def encode(self, x: Tensor) -> Tensor:
        check_images(x, values=not self.training)
        return self.embedding(x)

    def initial_state(self, context: Tensor) -> Tensor:
        return context.new_zeros(context.shape[0], 0)

    def step(self, context: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return self.output_head(context), context.new_zeros(context.shape[0]), h
