"""Halting methods: how a step function decides how many steps to take, and how that is trained.

A halting method unrolls a step function ``(x, h_n) -> (ŷ_n, z_n, h_{n+1})`` and turns its halting logits
``z_n`` into weights ``p_n`` of the steps: training weighs every step's loss by them, inference stops
each input at its own step.

* :mod:`.base`: ``HaltingMethod``, whose ``forward`` is the full unroll, and ``Unroll``, what it returns;
* :mod:`.pondernet`: PonderNet (sampled halting, KL to a geometric or a uniform prior), every equation in
  one file;
* :mod:`.act`: Adaptive Computation Time (cumulative halting, ponder cost);
* :mod:`.fixed`: the fixed-step baseline (always ``k`` steps);
* :mod:`.trm`: TRM's halting head (one logit, trained towards "this step's answer is right");
* :mod:`.hrm`: HRM's halting head (halt and continue logits, trained by Q-learning);
* :mod:`.first_exit`: the early exit of the heads that halt by a rule on their logits (TRM's, HRM's).

A new halting method is a ``HaltingMethod`` subclass with ``loss``, ``weights``, ``answer`` and
``infer``, in a module of its own here.

This package imports nothing at its top, so that naming a method loads no PyTorch.
"""
