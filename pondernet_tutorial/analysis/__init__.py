"""The book's figures, rules and diagnostics: :mod:`.plots` (the book's style and figures),
:mod:`.explain` (the explanatory and interactive figures), :mod:`.verdicts` (the book's rules on
halting against difficulty, applied to the halting tables a run's evaluation writes),
:mod:`.paper_claims` (the paper's parity claims), :mod:`.diagnose` (the book's rule on one model) and
:mod:`.notebook` (the notebooks' helpers: glue, quick mode, the shipped studies)."""
