"""Data modules, one module per task.

* :mod:`.base`: batches served from tensors, the :class:`EvalSet` of the evaluation;
* :mod:`.mnist`: MNIST as tensors, batched rotation, :class:`MNISTDataModule`;
* :mod:`.parity`: the parity task, generated on the fly, :class:`ParityDataModule`;
* :mod:`.pointer`: the pointer-chasing task, generated on the fly, :class:`PointerDataModule`.

A new task is a ``LightningDataModule`` in a module of its own here. Besides the usual loaders it has
``test_set_names`` (one name per test loader) and ``evaluation_sets()`` (the test sets as tensors, for
the evaluation tables); an entry in :mod:`pondernet_tutorial.runs.registry` makes it an experiment.
"""
