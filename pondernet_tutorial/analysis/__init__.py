"""The book's figures and diagnostics: :mod:`.plots` (the book's style and figures), :mod:`.explain`
(the explanatory and interactive figures), :mod:`.difficulty` (whether halting follows an input's
difficulty, and the verdicts' rules) and :mod:`.notebook` (the notebooks' helpers: glue, quick mode,
the shipped studies)."""
