"""Model weights as data, and the pretrained runs shipped with the package.

A model file (``model.safetensors``) holds the module's ``state_dict`` and, in its header, the format
and the hyperparameters. Reading it never unpickles anything; the file is read once, through the open
file that was checked, and the declared shapes are counted before any tensor is made. Weights that no
training writes (NaN, infinities, integers) are refused. The hyperparameters name registered
components only (:data:`~.registry.STEPS`, :data:`~.registry.METHODS`, :data:`~.registry.LOSSES`)
unless the caller trusts the file (``trust_code=True``, as Hugging Face's ``trust_remote_code``); a
model file must also be the model that its folder's ``metadata.json`` records and the caller asks for.
Shipped runs lie in ``pretrained/<experiment>/<variant>/seed<k>/`` (:func:`load_pretrained`).
"""

from __future__ import annotations

import inspect
import json
import math
import os
from dataclasses import fields
from pathlib import Path

import torch

from ..untrusted import (
    MAX_DEPTH,
    NOT_THERE,
    CheckpointError,  # noqa: F401 (raised here, caught by its callers)
    DamagedFileError,
    nested_deeper_than,
    read_json,
    read_regular,
    shown,
)
from .build import ModelTooLargeError, count_weights, make_module, one_line
from .config import (
    PLATEAU_SETTINGS,
    PRETRAINED_DIR,
    WEIGHTS,
    TrainConfig,
    check_same_identity,
    identity_differences,
    listed_shipped,
    other_methods_options,
)
from .files import atomic_file, plain
from .module import RunModule
from .options import MAX_PARAMETERS, PARAMETERS_REASON, check_steps, method_options, step_options
from .processes import command_name
from .registry import LOSSES, METHODS, STEPS, UnregisteredComponentError, check_registered, is_plain

FORMAT = "pondernet_tutorial/weights-v3"
TRUST_HINT = "Load it only if you trust the file: load_model(..., trust_code=True), or evaluate --trust-code"
# the largest model file: MAX_PARAMETERS weights of 8 bytes (float64 at most), and a header of at most
# MAX_HEADER_BYTES (the package writes a few kB)
MAX_HEADER_BYTES = 2**20
MAX_WEIGHTS_BYTES = 8 * MAX_PARAMETERS + MAX_HEADER_BYTES
NOT_SAVED = {"self", "grad_clip", "compile"}  # RunModule's arguments that a model file never holds


def save_weights(module: RunModule, path: str | os.PathLike, inside=None) -> Path:
    """Save the module's weights and hyperparameters as one ``safetensors`` file, whole (``inside``: as
    for :func:`~.files.atomic_file`). Only a :class:`RunModule` names its parts so that
    :func:`load_model` can rebuild it."""
    from safetensors.torch import save

    if not isinstance(module, RunModule):  # a model built in code: nothing in the file could rebuild it
        raise TypeError(
            f"save_weights saves a RunModule, got a {type(module).__name__}: keep a model built in code "
            "with safetensors.torch.save_model(module, path), and load it into the same model with "
            "safetensors.torch.load_model(module, path)."
        )

    state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    header = {"format": FORMAT, "hparams": json.dumps(plain(dict(module.hparams)))}
    with atomic_file(path, "wb", inside) as handle:
        handle.write(save(state, metadata=header))
    return Path(path)


def read_header(path: Path, follow_links: bool = True) -> tuple[dict, bytes]:
    """The hyperparameters in a model file's header, and the file's bytes, checked as a whole file
    without making any tensor: one open of a regular file of bounded size (:func:`read_regular`), a
    header within the file whose tensors cover the bytes after it exactly, and the weights counted.
    ``follow_links=False``: the model file of a run folder, which a link must not lead out of.

    Raises:
        CheckpointError: one line on why the file is not a whole model file of this package's format.
    """
    try:
        data = read_regular(path, MAX_WEIGHTS_BYTES, follow_links)  # one open, checked, then read through it
        if data[:4] == b"PK\x03\x04":  # a zip archive: torch.save's format, a Lightning .ckpt included
            raise CheckpointError(
                f"{path} is a PyTorch archive (a checkpoint of fit(), or torch.save's), not a {WEIGHTS}: "
                "continue training from it with fit(..., ckpt_path=path), and keep a model built in code "
                "with safetensors.torch.save_model(module, path)."
            )
        header, weights = _header(data)
        metadata = header.pop("__metadata__", None) or {}
        entries = [_entry(entry) for entry in header.values()]
        end = max((end for _, end in entries), default=0)
        if end != weights:  # safetensors' own check, made here before anything is counted
            raise ValueError(f"its header places the weights in {end:,} bytes, the file holds {weights:,}")
        values = sum(math.prod(shape) for shape, _ in entries)
        if values > MAX_PARAMETERS:
            raise CheckpointError(
                f"{path} declares {values:,} weights, more than {MAX_PARAMETERS:,} ({PARAMETERS_REASON}): "
                "it is not a model of this package's experiments."
            )
        if not isinstance(metadata, dict) or "format" not in metadata:  # safetensors' own save_model
            raise CheckpointError(
                f"{path} is not a model file of this package (its header names no format): a model built "
                "in code loads into the same model with safetensors.torch.load_model(module, path)."
            )
        if metadata.get("format") != FORMAT:
            found = metadata.get("format")
            raise CheckpointError(
                f"{path} has format {found!r}, this package reads {FORMAT!r}: it was not "
                "written by this version of pondernet_tutorial; train the run again with this one."
            )
        hparams = json.loads(metadata.get("hparams", "null"))
        if not isinstance(hparams, dict) or nested_deeper_than(hparams):
            raise CheckpointError(
                f"{path} is not a PonderNet model file: its hyperparameters are not a dictionary of "
                f"values nested at most {MAX_DEPTH} deep."
            )
        return hparams, data
    except (*NOT_THERE, DamagedFileError) as error:  # any other OSError (no permission, an I/O error)
        # says nothing of the file: raised as it is, so that no finished run is taken for a damaged one
        raise CheckpointError(
            f"{path} is not a model file ({error.strerror or error}): give the {WEIGHTS} file of a run."
        ) from None
    except (ValueError, TypeError, RecursionError) as error:  # JSONDecodeError: ValueError
        raise CheckpointError(
            f"{path} is not a whole {WEIGHTS} file ({one_line(error)}) A model.pt of an older version and a "
            "Lightning .ckpt are PyTorch pickles, which this package never loads: download or train it again."
        ) from None


def _header(data: bytes) -> tuple[dict, int]:
    """The JSON header of a safetensors file's bytes (an 8-byte little-endian length, then the header,
    which must lie within the file), and the number of bytes after it."""
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes, fewer than the 8 of a header's length")
    size = int.from_bytes(data[:8], "little")
    if size > min(len(data) - 8, MAX_HEADER_BYTES):
        raise ValueError(f"a header of {size:,} bytes in a file of {len(data):,}")
    header = json.loads(data[8 : 8 + size].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("its header is not a dictionary")
    return header, len(data) - 8 - size


def _entry(entry) -> tuple[list[int], int]:
    """A tensor's shape and the end of its bytes, as its entry in the header declares them."""
    shape, offsets = (entry.get("shape"), entry.get("data_offsets")) if isinstance(entry, dict) else (0, 0)
    if not (
        isinstance(shape, list)
        and isinstance(offsets, list)
        and len(offsets) == 2
        and all(type(n) is int and n >= 0 for n in [*shape, *offsets])
    ):
        raise ValueError(f"a tensor's entry in its header is {str(entry)[:80]}, not a shape and offsets")
    return shape, offsets[1]


# the weights' types that training writes (--precision 16-true, bf16-true, 32, 64-true)
TRAINED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_values(state: dict, module, path: Path) -> None:
    """Refuse weights that no training writes: a floating-point tensor of the model given as integers
    (copied in silently, they would be evaluated), or holding NaN or an infinity."""
    expected = module.state_dict()
    for name, tensor in state.items():
        if name not in expected or not expected[name].is_floating_point():
            continue  # a missing or unexpected name is load_state_dict's to refuse
        if tensor.dtype not in TRAINED_DTYPES:  # integers, or float8 (which isfinite cannot check)
            raise CheckpointError(
                f"{path} holds the weights {name} as {str(tensor.dtype).removeprefix('torch.')}, not floating "
                "point of a precision that training uses: it was not written by training; train the run again."
            )
        if not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"{path} holds NaN or infinite values in {name}: its training diverged or the file is "
                "damaged; train the run again."
            )


def _check_registered_only(hparams: dict, path: Path) -> None:
    """Refuse, before anything is imported, hyperparameters that name unregistered code."""
    try:
        odd = sorted(k for k, v in hparams.items() if not is_plain(v))
        if odd:
            raise UnregisteredComponentError(f"its hyperparameters {', '.join(odd)} are not plain data")
        method = hparams.get("method", "pondernet")
        check_registered(
            method,
            METHODS,
            "halting method",
            hparams.get("method_options"),
            skip=("step_function", "loss_fn"),
        )
        check_registered(
            hparams.get("step"), STEPS, "step function", hparams.get("step_options"), ("n_classes",)
        )
        check_registered(hparams.get("loss_fn", "cross_entropy"), LOSSES, "loss function")
    except UnregisteredComponentError as error:
        raise CheckpointError(f"{path}: {error}; nothing was imported or run. {TRUST_HINT}.") from None


def _check_sizes(hparams: dict, path: Path) -> None:
    """Refuse a checkpoint whose options are not of their declared types, or whose model its
    constructors refuse or would hold more than ``MAX_PARAMETERS`` weights, before anything is
    allocated: the model is first built on PyTorch's ``meta`` device (:func:`~.build.count_weights`),
    which holds shapes and no memory. Activation memory grows with the batch, the steps and the widths:
    N is bounded by its declared maximum, the widths by the number of weights."""
    try:
        step, method = hparams.get("step"), hparams.get("method", "pondernet")
        for name, declared, values in (
            ("step option", (step_options(step) if isinstance(step, str) else None) or {}, "step_options"),
            (
                "method option",
                method_options(method) if isinstance(method, str) and method in METHODS else {},
                "method_options",
            ),
        ):
            for key, value in (hparams.get(values) or {}).items():  # dictionaries: load_model checked
                if key in declared:
                    declared[key].validate(f"{name} {key}", value)
                if key in ("max_steps", "eval_max_steps") and value is not None:
                    check_steps(value, f"{name} {key}")
        n_classes = hparams.get("n_classes")
        if isinstance(n_classes, int) and not 1 <= n_classes <= 100_000:
            raise ValueError(f"n_classes must lie in [1, 100,000], got {n_classes}")
    except ValueError as error:
        raise CheckpointError(f"{path} has hyperparameters out of range: {one_line(error)}") from None
    registered = all(isinstance(name, str) for name in (step, method)) and step in STEPS and method in METHODS
    try:
        count_weights(
            lambda: RunModule(**hparams), f"{path} has hyperparameters this package does not accept"
        )
    except ValueError as error:
        if not registered and not isinstance(error, ModelTooLargeError):
            return  # a trusted component (import path) that cannot be built on meta: its own build decides
        raise CheckpointError(one_line(error)) from None


def _hparams_differences(saved: dict, expected: dict) -> str:
    return "; ".join(d.replace("requested", "expected") for d in identity_differences(saved, expected))


def comparable(hparams) -> dict:
    """A module's hyperparameters as a model file and a request are compared: without the plateau
    schedule's settings where no plateau schedule reads them (the run's identity leaves them out, and
    an engine before stop 63 saved the requested ones)."""
    hparams = plain(dict(hparams))
    if hparams.get("lr_schedule") == "constant":
        for name in PLATEAU_SETTINGS:
            hparams.pop(name, None)
    return hparams


def expected_hparams(config: TrainConfig) -> dict:
    """The hyperparameters of the model that a configuration trains (as saved in its model file)."""
    return plain(dict(make_module(config).hparams))


def load_model(
    path: str | os.PathLike, map_location="cpu", trust_code: bool = False, config: TrainConfig | None = None
) -> RunModule:
    """Load a model file written by :func:`save_weights` (``model.safetensors``), in eval mode.

    Args:
        trust_code: let the file name any step function or loss by import path, with any options, as
            code to import and call. Only for files you trust.
        config: the configuration that the caller asks for: the file's hyperparameters must be that
            configuration's (a component it names by import path is then the caller's choice).

    A model file with a ``metadata.json`` beside it (a run folder) must hold the hyperparameters that
    the metadata records.

    Raises:
        CheckpointError: the file is missing, damaged, of another format (a PyTorch pickle included),
            has hyperparameters this package does not know (named in the message), names a component
            that is not registered (without ``trust_code``), is not the model its folder records or
            the caller asks for, or its weights do not fit the model its hyperparameters describe.
            The message is one line.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load as safetensors_load

    path = Path(path)
    if not os.path.lexists(path):
        raise CheckpointError(f"no model file at {path}; train one with `{command_name()} train`.")
    in_run = (path.parent / "metadata.json").exists()
    # a run folder's model file (its metadata beside it, or missing or damaged): never through a link
    hparams, data = read_header(path, follow_links=not in_run and path.name != WEIGHTS)
    try:  # safetensors checks again that the header covers the bytes exactly
        state = safetensors_load(data)
    except (SafetensorError, ValueError, TypeError) as error:
        raise CheckpointError(f"{path} is not a whole {WEIGHTS} file ({one_line(error)})") from None
    unknown = sorted(set(hparams) - (set(inspect.signature(RunModule.__init__).parameters) - NOT_SAVED))
    if unknown:
        names = ", ".join(shown(name) for name in unknown[:3]) + (
            f" and {len(unknown) - 3:,} more" if len(unknown) > 3 else ""
        )
        raise CheckpointError(f"{path} has hyperparameters this package does not know: {names}.")
    for name in ("step_options", "method_options"):
        if not isinstance(hparams.get(name) or {}, dict):
            raise CheckpointError(
                f"{path} is not a model file of this package: its {name} are "
                f"{type(hparams[name]).__name__}, not a dictionary; train the run again."
            )
    if in_run:
        metadata = read_json(path.parent / "metadata.json", follow_links=False)  # the run folder's own
        if metadata is None:
            raise CheckpointError(f"the metadata.json beside {path} is damaged: train the run again.")
        recorded = metadata.get("hparams")
        if recorded is not None and (not isinstance(recorded, dict) or plain(hparams) != plain(recorded)):
            raise CheckpointError(
                f"{path} is not the model that its folder's metadata.json records "
                f"({_hparams_differences(hparams, recorded)}): train the run again."
            )
    asked = None
    if config is not None:
        asked = expected_hparams(config)
        if comparable(hparams) != comparable(asked):
            raise CheckpointError(
                f"{path} is not the model of the requested configuration "
                f"({_hparams_differences(hparams, asked)}): train the run again."
            )
    if not trust_code and asked is None:
        _check_registered_only(hparams, path)
    _check_sizes(hparams, path)  # before anything is allocated
    try:
        module = RunModule(**hparams)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path} has hyperparameters this package does not accept: {error}") from None
    except (MemoryError, RuntimeError) as error:  # the allocator's refusal
        raise CheckpointError(
            f"{path} describes a model that does not fit in memory: {one_line(error)}"
        ) from None
    _check_values(state, module, path)
    try:
        module.load_state_dict(state)
    except RuntimeError as error:
        detail = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        raise CheckpointError(
            f"the weights in {path} do not fit the model its hyperparameters describe: {detail[:400]}"
        ) from None
    return module.to(map_location).eval()


def available_pretrained(root: str | os.PathLike | None = None) -> list[dict]:
    """Every shipped run with weights: ``[{"experiment", "variant", "seed", "path"}, ...]``."""
    root = Path(root or PRETRAINED_DIR)
    runs = []
    for model in sorted(root.glob(f"*/*/seed*/{WEIGHTS}")):
        run = model.parent
        seed = run.name.removeprefix("seed")
        if not (seed.isascii() and seed.isdigit() and seed == str(int(seed))):  # "seedx", "seed²", "seed01"
            continue
        runs.append(
            {
                "experiment": run.parent.parent.name,
                "variant": run.parent.name,
                "seed": int(seed),
                "path": run,
            }
        )
    return runs


def load_pretrained(
    experiment: str,
    method: str = "pondernet",
    seed: int = 0,
    map_location="cpu",
    trust_code: bool = False,
    **options,
) -> RunModule:
    """A shipped model, ready in eval mode.

    ``load_pretrained("mnist-interpolation")`` is the reference PonderNet (seed 0);
    ``load_pretrained("parity-extrapolation", "act", seed=1, tau=0.001)`` an ACT run on parity. The
    ``options`` are :class:`TrainConfig` fields and the method's options (as
    :meth:`TrainConfig.from_options` takes them); they pick the run folder, and the run's recorded
    configuration and its model file's own hyperparameters must equal them.

    Args:
        experiment: an experiment's name (``python -m pondernet_tutorial list`` lists them).
        method: the halting method: ``pondernet``, ``act``, ``fixed``, ``hrm`` or ``trm``.
        seed: the run's seed.
        map_location: where the weights go, as ``torch.load`` takes it (``"cuda"``).
        trust_code: as :func:`load_model`'s; the shipped runs need none.
        options: the run's other settings (``lambda_p=0.1``, ``tau=0.001``, ``max_steps=5``).

    Returns:
        the :class:`~pondernet_tutorial.runs.module.RunModule`, in eval mode.

    Raises:
        CheckpointError: no such run is shipped (the message lists those that are), or its files do
            not match the run asked for.
        TypeError: an option that is not a field of :class:`TrainConfig`, or ``output_dir``: the shipped
            runs lie in the package (a run of another folder: :func:`load_model`).
    """
    _check_pretrained_options(options, method)
    for name, owners in other_methods_options(method, options).items():
        raise CheckpointError(
            f"{name} is an option of {' and '.join(owners)}, not of {method}: pass method={owners[0]!r}."
        )
    config = TrainConfig.from_options(
        experiment=experiment, method=method, seed=seed, output_dir=str(PRETRAINED_DIR), **options
    )
    folder = config.run_dir
    if not (folder / WEIGHTS).is_file():
        raise CheckpointError(
            f"no shipped model {experiment}/{config.variant} for seed {seed}; shipped for {experiment} and "
            f"{method}: {listed_shipped(experiment, method)}. Train it with `{command_name()} reproduce`."
        )
    metadata = read_json(folder / "metadata.json", follow_links=False)
    if metadata is None:
        raise CheckpointError(
            f"the metadata.json of the shipped run in {folder} is missing or damaged: reinstall the package."
        )
    try:
        check_same_identity(metadata.get("identity", {}), config.identity(), f"the shipped run in {folder}")
    except ValueError as error:
        raise CheckpointError(str(error)) from error
    return load_model(folder / WEIGHTS, map_location, trust_code=trust_code, config=config)


def _check_pretrained_options(options: dict, method: str) -> None:
    """Refuse, in one line that names what is accepted, a keyword that is not an option of a run."""
    accepted = {f.name for f in fields(TrainConfig)} - {"experiment", "method", "seed", "output_dir"}
    accepted |= set(other_methods_options(method, options))
    accepted |= set(method_options(method) if method in METHODS else ())
    odd = sorted(set(options) - accepted)
    if not odd:
        return
    where = (
        f": it loads the runs shipped in {PRETRAINED_DIR}; load a run of another folder with "
        "load_model('<run folder>/model.safetensors')"
        if "output_dir" in odd
        else ""
    )
    raise TypeError(
        f"load_pretrained() got the unexpected keyword {', '.join(odd)}{where}. It takes experiment, method, "
        "seed, map_location, trust_code and the options of TrainConfig that name a run (lambda_p, beta, tau, "
        "max_steps, step_options, ...)."
    )
