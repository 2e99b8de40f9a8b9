"""Step functions: the networks that ponder, one module per task.

A step function maps the input and its hidden state to a prediction, a halting logit and the next
state, ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})``; a halting method decides how many times it runs.

* :mod:`.base`: the :class:`~.base.StepFunction` interface;
* :mod:`.mnist`: the book's CNN + MLP, the refining CNN, the plain CNN;
* :mod:`.parity`: the parity task's recurrent cells: the paper's tanh RNN and labml's GRU;
* :mod:`.pointer`: one attention lookup per step for the pointer-chasing task.

A new step function is a :class:`~.base.StepFunction` subclass, written in the module of its task (or a
new one here), whose constructor takes ``n_classes`` and its own options.

This package imports nothing at its top, so that naming a step function loads no PyTorch.
"""
