"""Step functions: the networks that ponder, one module per task.

* :mod:`.base`: the :class:`~.base.StepFunction` interface ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})``;
* :mod:`.mnist`: the book's CNN + MLP, the refining CNN, the plain CNN;
* :mod:`.parity`: the parity task's recurrent cells: the paper's tanh RNN and labml's GRU;
* :mod:`.pointer`: one attention lookup per step for the pointer-chasing task.

A new step function is a :class:`~.base.StepFunction` subclass, written in the module of its task (or a
new one here). Its constructor takes ``n_classes`` and its own options as typed keywords with literal
defaults: that signature is its declaration. The run machinery names it: an entry in
:data:`pondernet_tutorial.runs.registry.STEPS` gives it the name that configurations and checkpoints use,
and one in :data:`pondernet_tutorial.runs.options.STEP_OPTIONS` gives its options their help and range
for ``--step-option KEY=VALUE``.

This package imports nothing at its top, so that naming a step function loads no PyTorch.
"""
