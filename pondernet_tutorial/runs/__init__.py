"""The run machinery around :func:`pondernet_tutorial.fitting.fit`: what the book's experiments need and a
reader reusing PonderNet does not.

* :mod:`.config`: a run's configuration (:class:`~.config.TrainConfig`), its identity and its folder;
* :mod:`.build`: from a configuration to its data module and LightningModule;
* :mod:`.training`: ``train()``, ``fit()`` inside a run folder with a lock, records and checks;
* :mod:`.resume`: continuing an unfinished run, trusting nothing in its folder but weights and counters;
* :mod:`.module`: the fast module (:mod:`pondernet_tutorial.fast_path`) built from the names a run records;
* :mod:`.checkpoints`: weights as ``model.safetensors`` files (data, never code), safe loading, the shipped runs;
* :mod:`.evaluation`: per-sample, per-step and per-class tables, and the halting tables (whether halting
  follows an input's difficulty);
* :mod:`.studies`: the groups of runs behind the book, ``reproduce``;
* :mod:`.files`, :mod:`.processes`: whole-file writes, folder locks, child processes;
* :mod:`.cli`: the command line (``python -m pondernet_tutorial``).
"""
