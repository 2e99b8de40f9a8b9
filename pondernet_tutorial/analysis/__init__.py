"""The book's figures and diagnostics: :mod:`.plots` (the book's style and figures), :mod:`.explain`
(the explanatory and interactive figures), :mod:`.diagnose` (the book's rule on one model) and
:mod:`.notebook` (the notebooks' helpers: glue, quick mode, the shipped studies). The rules themselves
and the halting tables they judge are the run machinery's (:mod:`pondernet_tutorial.runs.difficulty`),
which writes those tables when it evaluates a run."""
