"""Step functions: the networks that ponder, one module per task.

* :mod:`.base`: the :class:`~.base.StepFunction` interface ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})``;
* :mod:`.mnist`: the book's CNN + MLP, the refining CNN, the plain CNN;
* :mod:`.parity`: the parity task's recurrent cells: the paper's tanh RNN and labml's GRU;
* :mod:`.pointer`: one attention lookup per step for the pointer-chasing task.

A new step function is a :class:`~.base.StepFunction` subclass, written in the module of its task (or a
new one here) and added to :data:`STEPS` under the name that configurations and checkpoints use. Its
constructor takes ``n_classes`` and its own options as keywords, each declared in :data:`STEP_OPTIONS`
(type, help, range check), which ``--step-option KEY=VALUE`` and
:class:`~pondernet_tutorial.runs.config.TrainConfig` check before anything is trained. An option named like
one of the experiment's data options (parity's ``n_elements``) must equal it.
"""

from __future__ import annotations

from ..options import ELEMENTS_REASON, MAX_ELEMENTS, MAX_WIDTH, WIDTH_REASON, Option, between, in_range

# Import paths, resolved when used: listing the names imports no PyTorch (fast --help).
STEPS: dict[str, str] = {
    "mnist_mlp": "pondernet_tutorial.steps.mnist:MNISTStep",
    "mnist_refine": "pondernet_tutorial.steps.mnist:MNISTRefineStep",
    "mnist_cnn": "pondernet_tutorial.steps.mnist:MNISTPlainStep",
    "parity_gru": "pondernet_tutorial.steps.parity:ParityStep",
    "parity_rnn": "pondernet_tutorial.steps.parity:ParityRNNStep",
    "pointer_attention": "pondernet_tutorial.steps.pointer:PointerStep",
}

_HIDDEN_SIZE = Option(
    int,
    help="units of the hidden state and of the layers before the heads",
    check=in_range(1, MAX_WIDTH, WIDTH_REASON),
)
_EMBEDDING_SIZE = Option(int, help="size of the CNN's embedding", check=in_range(1, MAX_WIDTH, WIDTH_REASON))
_DROPOUT = Option(
    float, help="Dropout2d probability in the CNN, in [0, 1)", check=between(0, 1, closed="left")
)
_PARITY = {
    "n_elements": Option(
        int,
        help="length of the input vectors (the experiment's)",
        check=in_range(1, MAX_ELEMENTS, ELEMENTS_REASON),
    ),
    "hidden_size": _HIDDEN_SIZE,
}
# The keyword options of each step function's constructor (besides n_classes); their defaults are the
# constructor's, or the experiment's step_options for its default step function.
STEP_OPTIONS: dict[str, dict[str, Option]] = {
    "mnist_mlp": {"hidden_size": _HIDDEN_SIZE, "embedding_size": _EMBEDDING_SIZE, "dropout": _DROPOUT},
    "mnist_refine": {"hidden_size": _HIDDEN_SIZE, "dropout": _DROPOUT},
    "mnist_cnn": {"embedding_size": _EMBEDDING_SIZE, "dropout": _DROPOUT},
    "parity_gru": _PARITY,
    "parity_rnn": _PARITY,
    "pointer_attention": {
        "n_slots": Option(
            int, help="slots per sample (the experiment's)", check=in_range(2, MAX_ELEMENTS, ELEMENTS_REASON)
        ),
        "hidden_size": _HIDDEN_SIZE,
        "key_size": Option(
            int,
            help="size of the slots' keys, values and the query",
            check=in_range(1, MAX_WIDTH, WIDTH_REASON),
        ),
        "exit_feature": Option(
            bool,
            True,
            "give every slot the bit 'this slot is an exit'; false: a step must tell from the arrow it read",
        ),
    },
}


def step_class(name: str):
    """The step function class registered as ``name`` (or at an import path ``module:Class``)."""
    from ..registry import resolve_component

    return resolve_component(name, STEPS, "step function")
