"""Halting methods: how a step function decides how many steps to take, and how that is trained.

* :mod:`.base`: ``HaltingMethod``, whose ``forward`` is the full unroll, and ``Unroll``, what it returns;
* :mod:`.pondernet`: PonderNet (sampled halting, KL to a geometric prior);
* :mod:`.act`: Adaptive Computation Time (cumulative halting, ponder cost);
* :mod:`.fixed`: the fixed-step baseline (always ``k`` steps).

A new halting method is a ``HaltingMethod`` subclass with ``loss``, ``weights``, ``answer`` and ``infer``, in a module of its own here, whose constructor
takes the step function, ``max_steps`` and its own options as typed keywords with literal defaults: that
signature is its declaration, and each parameter's domain is checked where its equation is taught. The
run machinery names it: an entry in :data:`pondernet_tutorial.runs.registry.METHODS` gives it the name
that configurations, run folders and checkpoints use, and one in
:data:`pondernet_tutorial.runs.options.METHOD_OPTIONS` makes each option a field of
:class:`~pondernet_tutorial.runs.config.TrainConfig` and a flag of the command line (its help, and the
check it names); the defaults are read from the signature.

This package imports nothing at its top, so that naming a method loads no PyTorch.
"""
