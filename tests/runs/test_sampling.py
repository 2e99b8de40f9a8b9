"""One halting sampler: the same model, seed and inputs give the same halting steps wherever drawn.

Deliberate breaks these tests catch (each was tried):
- early exit drawing fresh coins per step instead of the (B, N) layout of halting_uniforms:
  test_the_tables_take_the_early_exits_steps;
- the test-set generator never reset between test sets (``if batch_idx == 0`` removed from
  ``test_step``): test_trainer_test_agrees_with_the_tables;
- accuracy logged at another step than the sampled halting step (``step_values`` scoring the last
  step's prediction instead of ``answer``'s): test_trainer_test_agrees_with_the_tables.
"""

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from pondernet_tutorial import ParityStep, PonderLitModule, PonderNet
from pondernet_tutorial.data.base import EvalSet
from pondernet_tutorial.runs.evaluation import evaluate_set, summarize


def parity_module(seed=0, max_steps=12):
    torch.manual_seed(seed)
    module = PonderLitModule(PonderNet(ParityStep(n_elements=8, hidden_size=16), max_steps=max_steps)).eval()
    with torch.no_grad():  # halting spread over several steps
        module.model.step_function.halting_head.bias.fill_(-1.5)
    return module


def inputs(n=300, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (n, 8), generator=g).float()
    return x, ((x == 1).sum(1) % 2).long()


def test_the_tables_take_the_early_exits_steps():
    """The evaluation tables (a full unroll, batches of 37) halt where the early exit (batches of 64) does
    with the same seed; that ``answer`` on a full unroll and ``infer`` agree is tested in
    tests/core/test_pondernet.py, and that the coins do not depend on the batches in test_halting.py."""
    module = parity_module()
    x, y = inputs()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        early = torch.cat([module.model.infer(x[i : i + 64], generator=g)[1] for i in range(0, len(x), 64)])
    table, _ = evaluate_set(module, EvalSet("test", x, y), seed=7, batch_size=37)
    assert (table["halt_step"].to_numpy() == early.numpy()).all()
    assert early.float().std() > 0.5  # the steps really vary: the agreement is not trivial


def test_trainer_test_agrees_with_the_tables():
    module = parity_module(seed=3)
    sets = [inputs(256, seed=s) for s in (1, 2)]
    loaders = [DataLoader(TensorDataset(x, y), batch_size=32) for x, y in sets]
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    results = trainer.test(module, dataloaders=loaders, verbose=False)
    for index, (x, y) in enumerate(sets):
        table, _ = evaluate_set(
            module, EvalSet(f"set{index}", x, y), seed=module.hparams.eval_seed, batch_size=100
        )
        summary = summarize(table).iloc[0]
        logged = results[index]
        assert abs(logged[f"test/set{index}/halt_step"] - summary["halt_step"]) < 1e-6
        assert abs(logged[f"test/set{index}/acc"] - summary["accuracy"]) < 1e-6
        assert abs(logged[f"test/set{index}/expected_steps"] - summary["expected_steps"]) < 1e-5


def test_validation_is_reproducible():
    module = parity_module()
    x, y = inputs(256)
    loader = DataLoader(TensorDataset(x, y), batch_size=64)
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    first = trainer.validate(module, loader, verbose=False)[0]
    second = trainer.validate(module, loader, verbose=False)[0]
    assert first == second
