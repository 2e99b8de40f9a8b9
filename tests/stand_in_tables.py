"""A run's evaluation tables as stand-ins: the columns a study reads from every run
(``REQUIRED_COLUMNS``), one row of a set named ``test`` and ones."""

from pathlib import Path

from pondernet_tutorial.runs.evaluation import REQUIRED_COLUMNS, RUN_TABLES


def write_run_tables(run_dir: Path) -> None:
    for table in RUN_TABLES:
        columns = REQUIRED_COLUMNS[table.removesuffix(".csv")]
        (run_dir / table).write_text(",".join(columns) + "\ntest" + ",1" * (len(columns) - 1) + "\n")
