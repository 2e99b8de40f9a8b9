"""Command line: ``python -m pondernet_tutorial {train, evaluate, reproduce, list} --help``.

A mistake in the input (a value out of range, an unknown name, a missing checkpoint or data set) prints
one line ``error: ...`` that says what to do, and exits with status 2. The parser and ``--help`` load
neither PyTorch nor Lightning.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from dataclasses import fields

from ..untrusted import shown
from .config import (
    FIELD_OPTIONS,
    PRETRAINED_DIR,
    WEIGHTS,
    TrainConfig,
    default_value,
    listed_shipped,
    other_methods_options,
    shipped_runs,
)
from .options import Option, all_method_options, at_least, method_option_names
from .processes import command_name
from .registry import EXPERIMENTS, METHODS, STEPS, get_experiment


def config_names() -> list[str]:
    """The options of ``train``: TrainConfig's fields, the method's options in the place of
    ``method_options``."""
    names = []
    for f in fields(TrainConfig):
        names.extend(method_option_names() if f.name == "method_options" else [f.name])
    return names


def run_options() -> list[str]:
    """The options by which ``evaluate --pretrained`` names a shipped run, as in train (--tau, ...)."""
    skip = {"experiment", "method", "seed", "quick"}
    return [
        n for n in config_names() if n not in skip and (n not in FIELD_OPTIONS or FIELD_OPTIONS[n].identity)
    ]


# The options that reproduce shares with every run it trains (declared with reproduce=True).
REPRODUCE_OPTIONS = tuple(name for name, option in FIELD_OPTIONS.items() if option.reproduce)
LIMIT = Option(
    int,
    help="evaluate on the first N samples of each test set only (on parity and pointer chasing: of each k)",
    check=at_least(1),
    optional=True,
)


# What each command can do about running out of memory, in its own options
OUT_OF_MEMORY = {
    "train": "choose smaller sizes (--batch-size, --step-option hidden_size=..., --max-steps)",
    "evaluate": "evaluate fewer samples (--limit) or fewer rotated test sets (--angles, --uniform)",
    "reproduce": "train fewer runs at once (--jobs)",
}


class UserError(Exception):
    """A mistake in the command line's input: printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _value(text: str):
    """A KEY=VALUE value: a number, a boolean or a string."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def declaration(name: str):
    """A field's declaration and its help line: its own, or its methods' constructors'
    (``pondernet and act: ...``, or each method's help where they differ)."""
    if name in FIELD_OPTIONS:
        return FIELD_OPTIONS[name], FIELD_OPTIONS[name].help
    by_method = {method: options[name] for method, options in all_method_options().items() if name in options}
    helps = {}
    for method, option in by_method.items():
        helps.setdefault(option.help, []).append(method)
    kinds = {option.type for option in by_method.values()}
    if len(kinds) > 1:  # one flag, one type
        raise TypeError(
            f"the methods declare {name} with different types: {', '.join(k.__name__ for k in kinds)}."
        )
    text = "; ".join(f"{' and '.join(methods)}: {help}" for help, methods in helps.items())
    return next(iter(by_method.values())), text


def _set_ups() -> dict[str, list[str]]:
    """The experiments grouped by set-up, each under its name without the setting (``mnist``,
    ``parity``, ``pointer``); the sizes of one set-up share a name (``parity-paper*``)."""
    groups: dict[str, list[str]] = {}
    for name in EXPERIMENTS:
        family = name.rsplit("-", 1)[0]
        groups.setdefault(family.rstrip("0123456789") + ("*" if family[-1].isdigit() else ""), []).append(
            name
        )
    return groups


def _default_text(name: str, option, help: str) -> str:
    """`` [default: X]``, or the default of each set-up or method where they differ."""
    if "[default:" in help or option.type is dict:
        return ""
    methods = [m for m, options in all_method_options().items() if name in options] or list(METHODS)[:1]
    values = {}
    for set_up, experiments in _set_ups().items():
        per = {(e, m): default_value(name, e, m) for e in experiments for m in methods}
        if all(len({repr(per[e, m]) for e in experiments}) == 1 for m in methods):
            values.update({(set_up, m): per[experiments[0], m] for m in methods})
        else:  # the experiments of one set-up differ: each under its own name
            values.update(per)
    labels = list(dict.fromkeys(label for label, _ in values))
    if len(set(map(repr, values.values()))) == 1:
        return f" [default: {next(iter(values.values()))}]"
    by_set_up = all(len({repr(values[s, m]) for m in methods}) == 1 for s in labels)
    by_method = all(len({repr(values[s, m]) for s in labels}) == 1 for m in methods)
    if by_set_up:
        parts = [f"{s}: {values[s, methods[0]]}" for s in labels]
    elif by_method:
        parts = [f"{m}: {values[labels[0], m]}" for m in methods]
    else:  # each method's usual value, then the set-ups that differ; methods alike share a part
        texts: dict[str, list[str]] = {}
        for m in methods:
            column = [repr(values[s, m]) for s in labels]
            usual = max(column, key=column.count)
            odd = [f"{s}: {values[s, m]}" for s in labels if repr(values[s, m]) != usual]
            usual_value = next(values[s, m] for s in labels if repr(values[s, m]) == usual)
            texts.setdefault(f"{usual_value}" + (f" ({', '.join(odd)})" if odd else ""), []).append(m)
        parts = [f"{' and '.join(ms)}: {text}" for text, ms in texts.items()]
    return " [default: " + "; ".join(parts) + "]"


def _add_options(parser: argparse.ArgumentParser, names) -> None:
    """One flag per option, with its help, type and choices from its declaration."""
    for name in names:
        option, help = declaration(name)
        flag = "--" + name.replace("_", "-")
        text = help + _default_text(name, option, help)
        if option.type is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
        elif option.type is dict:
            parser.add_argument(
                "--step-option", dest=name, action="append", default=[], metavar="KEY=VALUE", help=text
            )
        else:
            kind = option.type if option.type in (int, float) else str
            choices = list(option.allowed) if getattr(option, "allowed", None) else None
            parser.add_argument(flag, type=kind, default=None, choices=choices, help=text)


def _config_values(args, names) -> dict:
    values = {}
    for name in names:
        value = getattr(args, name, None)
        if name == "step_options":
            options = {}
            for item in value or []:
                key, sep, text = item.partition("=")
                if not sep or not key:
                    raise UserError(f"--step-option takes KEY=VALUE, got {item!r}.")
                options[key] = _value(text)
            value = options or None
        if value is not None:
            values[name] = value
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=command_name(),
        description="Train and evaluate PonderNet, ACT and fixed-step networks on MNIST and parity, and "
        "reproduce the book's results.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p_train = sub.add_parser(
        "train", help="train one run", description="Train one run; see --experiment and --method."
    )
    _add_options(p_train, config_names())
    p_train.add_argument(
        "--overwrite", action="store_true", help="replace a run already in the output folder"
    )

    p_eval = sub.add_parser(
        "evaluate",
        help="evaluate a checkpoint on its experiment's test sets",
        description="Evaluate a checkpoint on its experiment's test sets (MNIST: rotated test sets) and "
        "print the per-set table.",
    )
    src = p_eval.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--checkpoint", help="a model.safetensors written by `train` (its metadata.json names the experiment)"
    )
    src.add_argument(
        "--pretrained",
        choices=list(shipped_runs()),
        help="a shipped run of this experiment (the experiments with shipped runs); name the run by its "
        "method, seed and the options it was trained with (as in train: --tau, --lambda-p, ...)",
    )
    p_eval.add_argument(
        "--experiment",
        choices=list(EXPERIMENTS),
        help="the checkpoint's experiment, if no metadata.json lies beside it",
    )
    p_eval.add_argument(
        "--method",
        choices=list(METHODS),
        default="pondernet",
        help="with --pretrained: the method [pondernet]",
    )
    p_eval.add_argument("--seed", type=int, default=0, help="with --pretrained: the seed [0]")
    _add_options(
        p_eval.add_argument_group("the shipped run's options (with --pretrained, as in train)"), run_options()
    )
    for flag, help in (
        ("--angles", "MNIST: exact angles in degrees, counter-clockwise positive [-180 -165 ... 180]"),
        ("--uniform", "MNIST: half-ranges ±θ of uniform rotation [22.5 45 67.5 90]"),
    ):
        p_eval.add_argument(flag, type=float, nargs="*", help=help)
    p_eval.add_argument("--limit", type=int, help=LIMIT.help)
    p_eval.add_argument("--data-dir", help=FIELD_OPTIONS["data_dir"].help)
    p_eval.add_argument(
        "--output", help="write the per-sample table to this CSV file (its folder must exist)"
    )
    p_eval.add_argument("--overwrite", action="store_true", help="replace the --output file if it is there")
    p_eval.add_argument(
        "--trust-code",
        action="store_true",
        help="let the checkpoint name step functions and losses by import path (code that is imported and "
        "run): only for files you trust [off: registered components only]",
    )

    from .studies import STUDIES

    p_rep = sub.add_parser(
        "reproduce",
        help="train and evaluate the runs behind the book",
        description="Train (unless trained) and evaluate (unless evaluated) every run of the chosen "
        "studies, and write their tables. Studies: "
        + "; ".join(f"{s.name} ({s.description})" for s in STUDIES.values()),
    )
    p_rep.add_argument(
        "--study",
        nargs="+",
        default=["mnist-reference"],
        choices=[*STUDIES, "all"],
        help="studies to reproduce [mnist-reference]",
    )
    p_rep.add_argument(
        "--output-dir",
        default="results/reproduce",
        help="results folder [results/reproduce]; never the shipped one unless --ship",
    )
    p_rep.add_argument("--quick", action="store_true", help=FIELD_OPTIONS["quick"].help)
    p_rep.add_argument("--jobs", type=int, default=1, help="runs trained at once, in separate processes [1]")
    p_rep.add_argument("--overwrite", action="store_true", help="retrain runs that are already trained")
    p_rep.add_argument(
        "--reevaluate", action="store_true", help="evaluate runs again even where their tables are up to date"
    )
    p_rep.add_argument("--ship", action="store_true", help="write into the package's pretrained/ folder")
    _add_options(p_rep, REPRODUCE_OPTIONS)

    sub.add_parser("list", help="list experiments, methods, step functions, studies and shipped runs")
    return parser


MAX_ERROR_LINE = 2_000  # characters: an error line that quotes a file's names stays a line


def main(argv=None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a path of bytes that are not UTF-8 (a Latin-1 folder name)
        if hasattr(stream, "reconfigure"):  # prints escaped, never as a UnicodeEncodeError after the work
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    from .processes import stop_on_signals

    try:
        with stop_on_signals():  # SIGINT, SIGTERM, SIGHUP: a failure (128 + the signal), never exit 0
            code = _run(args)
        sys.stdout.flush()  # a reader that stopped early (| head) shows here, inside the try
        return code
    except UserError as error:  # (a message may quote a file's names: shown on one line, without escapes)
        print(f"error: {shown(error, MAX_ERROR_LINE)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as error:
        print(f"error: {shown(_interrupted_line(args, error), MAX_ERROR_LINE)}", file=sys.stderr)
        return getattr(error, "exit_code", 130)
    except BrokenPipeError:  # the reader of the output went away: no traceback, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as error:  # a full disk, no permission: one line naming the file and the free space
        from ..untrusted import ReadRefusedError
        from .files import WriteFailedError, is_write_refusal, write_failed

        # a path the user gave, with a name over the file system's limit
        if error.errno == errno.ENAMETOOLONG:
            print(
                f"error: {shown(error.filename, MAX_ERROR_LINE)}: a name in this path is too long; choose a shorter one.",
                file=sys.stderr,
            )
            return 2
        if not is_write_refusal(error) or isinstance(error, ReadRefusedError):
            if error.errno is None:
                raise
            # the system's failure (an I/O error of a disk or a network file system, a refused read):
            # nothing was taken for a damaged file, so nothing was deleted
            where = error.filename or _destination(args)
            print(
                f"error: could not use {shown(where, 300)} ({shown(error.strerror or error, 300)}): nothing "
                "was deleted; run the same command again once that is fixed.",
                file=sys.stderr,
            )
            return 1
        if isinstance(error, WriteFailedError):
            line = error
        else:  # a write that names no file (Lightning's, a library's): the folder the user chose
            line = write_failed(error, error.filename or _destination(args), whole=False)
        print(f"error: {shown(line, MAX_ERROR_LINE)}", file=sys.stderr)
        return 1


def _destination(args) -> str:
    """Where the command writes, as the user gave it: the output folder, or evaluate's --output."""
    if args.command == "evaluate":
        return args.output or os.path.dirname(args.checkpoint or "") or os.curdir
    if getattr(args, "ship", False):
        return str(PRETRAINED_DIR)
    return getattr(args, "output_dir", None) or TrainConfig().output_dir


def _interrupted_line(args, error) -> str:
    """What an interrupted command kept, and what to rerun."""
    stop = str(error) if str(error).startswith("interrupted") else "interrupted"
    if args.command == "train":
        kept = "the run's folder holds no finished model.safetensors (runs already finished are untouched)"
        rerun = "rerun the same command: a parity or pointer run continues from its last epoch, MNIST starts again"
    elif args.command == "reproduce":
        kept = f"the runs finished so far are kept in {args.output_dir if not args.ship else 'pretrained/'}"
        rerun = "rerun the same command to train the rest (unfinished parity and pointer runs continue) and write the study tables"
        if args.overwrite:  # a finished run is trained again under --overwrite, whenever it finished
            rerun += "; with --overwrite it also trains again the runs this command has already finished"
    else:
        kept, rerun = "nothing was written", "rerun the command"
    return f"{stop}: {kept}; {rerun}."


def _user_errors():
    """The exception types that mean a mistake in the input (imported only when a command runs)."""
    from ..data.mnist import MNISTDamagedError, MNISTNotFoundError
    from ..fitting import TrainingDivergedError
    from ..untrusted import DamagedFileError
    from .build import GraphUnavailableError, MissingPackageError, StepDoesNotFitError
    from .checkpoints import CheckpointError
    from .config import ConfigMismatchError

    try:  # Lightning's error for a bad --accelerator, --devices or --strategy
        from lightning.fabric.utilities.exceptions import MisconfigurationException
    except ImportError:  # pragma: no cover - Lightning moved it
        MisconfigurationException = UserError
    return (
        CheckpointError,
        ConfigMismatchError,
        DamagedFileError,
        MNISTDamagedError,
        MNISTNotFoundError,
        FileExistsError,
        GraphUnavailableError,
        MissingPackageError,
        MisconfigurationException,
        StepDoesNotFitError,
        TrainingDivergedError,
    )


def _checked(check, *args, **kwargs):
    """``check(*args, **kwargs)``, its ``ValueError`` (or ``TypeError``) turned into a user error."""
    try:
        return check(*args, **kwargs)
    except (ValueError, TypeError) as error:
        raise UserError(str(error)) from error


def _run(args) -> int:
    if args.command == "list":
        return _list()
    from .config import check_writable_folder

    # The configuration and the output folder are checked first: a mistake there costs no PyTorch import.
    if args.command == "train":
        values = _config_values(args, config_names())
        _refuse_other_methods_options(values.get("method") or FIELD_OPTIONS["method"].default, values)
        config = _checked(TrainConfig.from_options, **values)
        _checked(check_writable_folder, config.output_dir)
        from .build import check_model

        _checked(check_model, config)  # the method's and step function's options, by their constructors
    elif args.command == "reproduce":
        from .processes import check_jobs

        _checked(check_jobs, args.jobs)
        if args.ship and args.quick:
            raise UserError("quick runs are never shipped as pretrained results: drop --quick or --ship.")
        given = _config_values(args, REPRODUCE_OPTIONS)
        checked = _checked(
            TrainConfig.from_options, quick=args.quick, **given
        )  # the shared options, before any training
        common = {name: getattr(checked, name) for name in given}  # as checked (devices "2" -> 2)
        _checked(
            check_writable_folder, PRETRAINED_DIR if args.ship else args.output_dir, "--output-dir", args.ship
        )
    errors = _user_errors()
    try:
        if args.command == "train":
            from .training import train

            _, metadata = train(config, overwrite=args.overwrite)
            if metadata is not None:  # None on the other ranks of a multi-process run: rank 0 reports
                print(
                    # the n-th of the epochs run (history.csv and metadata.json count from 0)
                    f"best val accuracy {metadata['best_val_acc']:.4f} (epoch {metadata['best_epoch'] + 1} of "
                    f"{metadata['epochs_run']}, "
                    f"stopped by {metadata['stopped_by']}), {metadata['wall_time_s']} s -> {config.run_dir}"
                )
        elif args.command == "evaluate":
            _evaluate(args)
        elif args.command == "reproduce":
            from .studies import STUDIES, reproduce

            studies = list(STUDIES) if "all" in args.study else args.study
            reproduce(
                studies,
                args.output_dir,
                args.quick,
                args.jobs,
                args.overwrite,
                args.reevaluate,
                args.ship,
                **common,
            )
    except errors as error:  # in the command line's words (--overwrite, not overwrite=True) where they differ
        text = getattr(error, "command_line", None) or str(error)
        if type(error).__name__ == "MisconfigurationException":  # Lightning's words: what to change
            text = (
                f"{text.rstrip('.! ')}: check --accelerator, --devices and --strategy (left out, a run "
                "uses what this machine has)."
            )
        raise UserError(text) from error
    except (MemoryError, RuntimeError) as error:  # the allocator's refusal: one line, no traceback
        from ..untrusted import is_out_of_memory

        text = " ".join(str(error).split())
        if not is_out_of_memory(error):
            raise
        raise UserError(
            f"out of memory ({text[:200] or 'MemoryError'}): {OUT_OF_MEMORY[args.command]}."
        ) from None
    return 0


def _evaluate(args) -> None:
    from pathlib import Path

    from .config import check_model_fits, check_writable_file

    # the request is checked before any model or data is loaded
    limit = _checked(LIMIT.validate, "--limit", args.limit)
    if args.output:  # never over the model it reads, nor a file that is there unasked
        _checked(
            check_writable_file,
            args.output,
            "--output",
            args.overwrite,
            [args.checkpoint] if args.checkpoint else [],
        )
    given = _config_values(args, run_options())
    if args.pretrained:
        experiment_name = args.pretrained
        pretrained = _pretrained_config(args, given)  # the run is found before PyTorch is imported
    else:
        if given:
            raise UserError(
                f"--{next(iter(given)).replace('_', '-')} names a shipped run: use it with --pretrained; "
                "a --checkpoint's options are recorded in it."
            )
        if not args.checkpoint.strip():
            raise UserError(
                "--checkpoint is empty: give the model.safetensors of a run "
                "(<output dir>/<experiment>/<variant>/seed<k>/model.safetensors)."
            )
        if os.path.isdir(args.checkpoint):  # a run's folder: its model file
            if not os.path.lexists(os.path.join(args.checkpoint, WEIGHTS)):
                raise UserError(
                    f"{args.checkpoint} is a folder without a {WEIGHTS}: give a run's model file."
                )
            args.checkpoint = os.path.join(args.checkpoint, WEIGHTS)
        if not os.path.lexists(args.checkpoint):  # said before the metadata.json that lies beside it
            raise UserError(
                f"no model file at {args.checkpoint}; give the model.safetensors of a run, or train one "
                f"with `{command_name()} train`."
            )
        recorded = _recorded_experiment(Path(args.checkpoint))
        experiment_name = args.experiment or recorded
        if experiment_name is None:
            raise UserError(
                f"no readable metadata.json beside {args.checkpoint}: say which experiment it is with --experiment."
            )
        if recorded in EXPERIMENTS and EXPERIMENTS[recorded].task != EXPERIMENTS[experiment_name].task:
            raise UserError(
                f"{args.checkpoint} is a run of {recorded}, another task than {experiment_name}'s: "
                f"evaluate it with --experiment {recorded} (or another experiment of its task)."
            )
    experiment = _checked(get_experiment, experiment_name)
    rotations = None
    if args.angles is not None or args.uniform is not None:
        if experiment.task != "mnist":
            raise UserError("--angles and --uniform apply to the MNIST experiments only.")
        from ..data.mnist import EXACT_ANGLES, REFERENCE_ANGLES, rotation_sweep

        angles = EXACT_ANGLES if args.angles is None else tuple(args.angles)
        uniform = REFERENCE_ANGLES if args.uniform is None else tuple(args.uniform)
        rotations = _checked(rotation_sweep, angles, uniform)

    from .checkpoints import load_model, load_pretrained
    from .evaluation import evaluate, summarize
    from .training import make_datamodule

    if args.pretrained:
        config = pretrained
        print(f"== evaluating the shipped run {_run_name(config)}", file=sys.stderr, flush=True)
        module = load_pretrained(
            config.experiment, config.method, config.seed, trust_code=args.trust_code, **given
        )
    else:
        config = _checked(TrainConfig.from_options, experiment=experiment_name)
        module = load_model(args.checkpoint, trust_code=args.trust_code)
        hparams = module.hparams
        _checked(
            check_model_fits, experiment_name, hparams["n_classes"], hparams["step_options"], args.checkpoint
        )
    if args.data_dir:
        config.data_dir = args.data_dir
    datamodule = make_datamodule(
        config, test_rotations=rotations or experiment.evaluation.get("sweep"), test_subset=limit
    )
    per_sample, _ = evaluate(module, datamodule.evaluation_sets())
    table = summarize(per_sample, experiment.group_by)
    columns = [*experiment.group_by, "accuracy", "halt_step", "expected_steps", "n"]
    if args.output:  # first: the table is the work, the lines below only show it
        from .files import write_csv

        write_csv(args.output, per_sample, index=False)  # whole, or not at all
    print(table[columns].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    run = f"{config.experiment}/{config.variant} seed {config.seed}" if args.pretrained else args.checkpoint
    print(_evaluation_summary(run, per_sample))


def _evaluation_summary(run: str, per_sample) -> str:
    """The last line of ``evaluate``: accuracy and steps over every test sample; on rotated MNIST the
    upright digits first, then what the average covers (upside-down digits included)."""

    def stats(frame) -> str:
        accuracy = (frame["prediction"] == frame["label"]).mean()
        return (
            f"accuracy {accuracy:.4f}, mean steps {frame['halt_step'].mean():.2f} (expected "
            f"{frame['expected_steps'].mean():.2f}) over {len(frame):,} test samples"
        )

    if not {"mode", "degrees"} <= set(per_sample.columns):
        return f"{run}: {stats(per_sample)}"
    sets = per_sample.drop_duplicates("set")
    exact = sets.loc[sets["mode"] == "exact", "degrees"]
    uniform = sets.loc[sets["mode"] == "uniform", "degrees"]
    from .evaluation import count

    covered = []
    if len(exact) > 5:
        covered.append(f"{len(exact)} exact angles from {exact.min():g}° to {exact.max():g}°")
    elif len(exact):
        covered.append(f"{count(len(exact), 'exact angle')} ({', '.join(f'{d:g}°' for d in exact)})")
    if len(uniform):
        covered.append(f"{count(len(uniform), 'uniform range')} ({', '.join(f'±{d:g}°' for d in uniform)})")
    upright = per_sample[(per_sample["mode"] == "exact") & (per_sample["degrees"] == 0)]
    lines = [f"{run}:"]
    if len(upright):
        lines.append(f"  upright (0°): {stats(upright)}")
    lines.append(
        f"  averaged over {count(len(sets), 'rotation')}, {' and '.join(covered)}: {stats(per_sample)}"
    )
    return "\n".join(lines)


def _run_name(config: TrainConfig) -> str:
    return f"{config.experiment}/{config.variant}/seed{config.seed}"


def _refuse_other_methods_options(method: str, given) -> None:
    """An option that only other methods take, given on the command line, is refused in one line: the
    run would silently leave it out."""
    for name, owners in other_methods_options(method, given).items():
        raise UserError(
            f"--{name.replace('_', '-')} is an option of {' and '.join(owners)}, not of {method}: "
            f"add --method {owners[0]}."
        )


def _pretrained_config(args, given: dict) -> TrainConfig:
    """The configuration of the shipped run that ``evaluate --pretrained`` names, refused in one line,
    before PyTorch is imported, when no such run is shipped."""
    _refuse_other_methods_options(args.method, given)
    config = _checked(
        TrainConfig.from_options,
        experiment=args.pretrained,
        method=args.method,
        seed=args.seed,
        output_dir=str(PRETRAINED_DIR),
        **given,
    )
    if config.seed in shipped_runs().get(args.pretrained, {}).get(config.variant, []):
        return config
    raise UserError(
        f"no shipped model {_run_name(config)}; shipped {args.method} runs of {args.pretrained}: "
        f"{listed_shipped(args.pretrained, args.method)}. Name one by its options, as in train (e.g. --tau 0.01)."
    )


def _recorded_experiment(checkpoint) -> str | None:
    """The experiment that the metadata.json beside a checkpoint records, if it is there and readable."""
    meta = checkpoint.parent / "metadata.json"  # with_name would fail on a path without a name (/)
    from ..untrusted import read_json

    try:
        experiment = read_json(meta, follow_links=False)["config"]["experiment"]
    except (KeyError, TypeError):
        return None
    return experiment if isinstance(experiment, str) else None


def _list() -> int:
    from .studies import STUDIES

    print("experiments:")
    for e in EXPERIMENTS.values():
        print(f"  {e.name}: {e.description}")
    print("methods: " + ", ".join(METHODS))
    print("step functions: " + ", ".join(STEPS))
    print("studies:")
    for s in STUDIES.values():
        print(f"  {s.name}: {s.description}")
    shipped = sorted(
        p.parent.parent.relative_to(PRETRAINED_DIR) for p in PRETRAINED_DIR.glob(f"*/*/seed*/{WEIGHTS}")
    )
    print("shipped runs with weights:")
    for run in dict.fromkeys(shipped):
        print(f"  {_readable_run_name(PRETRAINED_DIR / run)}")
    return 0


def _readable_run_name(run_dir) -> str:
    """``experiment/variant`` of a run folder, with an option whose value is a dictionary written out
    with its own ``=`` (``step_options=(exit_feature=false,n_slots=32)``; the folder name, made of the
    characters every file system keeps, reads ``step_options=exit_featurefalse_n_slots32``)."""
    from ..untrusted import read_json
    from .config import _slug

    name = f"{run_dir.parent.name}/{run_dir.name}"
    try:
        # None (unreadable) has no "config": a TypeError
        options = read_json(next(run_dir.glob("seed*/metadata.json")), follow_links=False)["config"]
    except (StopIteration, KeyError, TypeError):
        return name  # the folder name, as it is
    if not isinstance(options, dict):  # not a record of the package's
        return name
    for key, value in options.items():
        if isinstance(value, dict) and value:
            readable = ",".join(f"{k}={_slug(v)}" for k, v in sorted(value.items()))
            name = name.replace(f"{key}={_slug(value)}", f"{key}=({readable})")
    return name


if __name__ == "__main__":
    sys.exit(main())
