"""The pointer-chasing task: its samples, its difficulty, its data module, its step function, a run.

Deliberate breaks these tests catch (each was tried):
- the walk ending one slot later (``position == k + 1`` in ``pointer_batch``):
  test_labels_and_difficulty_match_a_walk;
- a distractor chain running into the walk (arrows no longer one per target), and distractor chains
  ending half as often as ``end_prob`` says: test_arrows_form_disjoint_chains;
- the test set drawn from the global generator: test_sets_are_fixed_and_the_training_data_follows_the_seed;
- values that look two arrows ahead (``e_{a_{a_i}}``): test_encode_describes_each_slot_on_its_own;
- a second lookup in ``step`` (reading again with the first read as the query):
  test_a_step_reads_the_slots_once;
- a ``.item()`` in ``step``: test_encode_and_step_compile_as_one_graph.
"""

import pytest
import torch
from torch import nn

from pondernet_tutorial.data.modules import PointerDataModule
from pondernet_tutorial.data.pointer import END_PROB, pointer_batch
from pondernet_tutorial.methods.pondernet import PonderNet
from pondernet_tutorial.runs.config import WEIGHTS, TrainConfig
from pondernet_tutorial.runs.evaluation import evaluate_run
from pondernet_tutorial.runs.training import train
from pondernet_tutorial.steps.pointer import PointerStep


def walk(arrows: list[int]) -> tuple[int, int]:
    """Follow the arrows from slot 0, one slot at a time: ``(exit, slots visited)``."""
    slot, visited = 0, 1
    while arrows[slot] != slot:
        slot, visited = arrows[slot], visited + 1
        assert visited <= len(arrows), "a cycle: the walk from slot 0 never ends"
    return slot, visited


def test_labels_and_difficulty_match_a_walk():
    x, y, k = pointer_batch(3000, 12, (1, 9), end_prob=0.3, generator=torch.Generator().manual_seed(0))
    assert x.shape == (3000, 12) and x.dtype == torch.float32
    assert torch.equal(x, x.round()) and x.min() >= 0 and x.max() <= 11
    for arrows, label, difficulty in zip(x.long().tolist(), y.tolist(), k.tolist()):
        assert walk(arrows) == (label, difficulty)
    assert set(k.tolist()) == set(range(1, 10))  # every difficulty of the range
    assert set(y.tolist()) == set(range(12))  # every slot can be the answer (slot 0 when k = 1)


def test_arrows_form_disjoint_chains():
    x, _, k = pointer_batch(2000, 16, (1, 8), generator=torch.Generator().manual_seed(1))
    arrows = x.long()
    slots = torch.arange(16)
    moves = arrows != slots  # every arrow that is not an exit
    for row, move in zip(arrows, moves):
        targets = row[move]
        assert len(targets.unique()) == len(targets)  # no two arrows into one slot: chains, no trees
        assert not (targets == 0).any()  # slot 0 starts its chain
    for row in arrows.tolist():  # from every slot the arrows reach an exit: no cycles
        for start in range(16):
            slot = start
            for _ in range(16):
                slot = row[slot]
            assert row[slot] == slot
    exits = (~moves).sum(1).float()
    # the walk's exit, the last slot's, and each of the 16 − k − 1 slots between with probability END_PROB
    expected = 2 + (16 - k.float() - 1).mean() * END_PROB
    assert exits.min() >= 2 and abs(exits.mean() - expected) < 0.1


def test_sets_are_fixed_and_the_training_data_follows_the_seed():
    dm = PointerDataModule(n_slots=20, train_k=(1, 4), beyond_k=(5, 8), test_per_k=30, val_size=300)
    dm.setup()
    test, beyond = dm.evaluation_sets()
    assert (test.name, beyond.name) == ("test", "beyond") == tuple(dm.test_set_names)
    assert test.per_sample["k"].tolist() == [k for k in range(1, 5) for _ in range(30)]
    assert beyond.per_sample["k"].tolist() == [k for k in range(5, 9) for _ in range(30)]
    for eval_set in (test, beyond):
        ks = eval_set.per_sample["k"].tolist()
        for arrows, label, k in zip(eval_set.inputs.long().tolist(), eval_set.labels.tolist(), ks):
            assert walk(arrows) == (label, k)
    torch.manual_seed(123)  # the fixed sets do not depend on the global generator
    again = PointerDataModule(n_slots=20, train_k=(1, 4), beyond_k=(5, 8), test_per_k=30, val_size=300)
    again.setup()
    assert torch.equal(again.evaluation_sets()[1].inputs, beyond.inputs)
    assert torch.equal(again.val_inputs, dm.val_inputs)
    quick = PointerDataModule(n_slots=20, train_k=(1, 4), test_per_k=30, test_subset=3)
    (only,) = quick.evaluation_sets()
    assert torch.equal(only.inputs[3:6], test.inputs[30:33])  # the first samples of every k

    def first_batch(seed, global_seed=0):
        torch.manual_seed(global_seed)  # the training data follows the run's seed, not the global generator
        module = PointerDataModule(n_slots=20, train_k=(1, 4), seed=seed)
        return next(iter(module.train_dataloader()))[0]

    assert torch.equal(first_batch(0), first_batch(0, global_seed=5))
    assert not torch.equal(first_batch(0), first_batch(1))
    assert dm.train_size == 128_000 and len(dm.train_dataloader()) == 1000


def test_bad_arguments():
    with pytest.raises(ValueError, match="train_k"):
        PointerDataModule(n_slots=8, train_k=(0, 4))
    with pytest.raises(ValueError, match="beyond_k"):
        PointerDataModule(n_slots=8, train_k=(1, 4), beyond_k=(5, 9))
    with pytest.raises(ValueError, match="end_prob"):
        PointerDataModule(n_slots=8, train_k=(1, 4), end_prob=0)
    with pytest.raises(ValueError, match="n_classes"):
        PointerStep(8, n_classes=10)
    with pytest.raises(ValueError, match=r"\(batch, 8\)"):
        PointerStep(8).encode(torch.zeros(2, 9))


def test_step_shapes_and_halting_head():
    step = PointerStep(n_slots=8, n_classes=8, hidden_size=12, key_size=6)
    x, _, _ = pointer_batch(5, 8, (1, 6))
    keys, values = step.encode(x)
    assert keys.shape == values.shape == (5, 8, 6)
    h = step.initial_state((keys, values))
    assert h.shape == (5, 12)
    logits, z, h_next = step.step((keys, values), h)
    assert logits.shape == (5, 8) and z.shape == (5,) and h_next.shape == (5, 12)
    assert isinstance(step.halting_head, nn.Linear) and step.halting_head.bias is not None
    PonderNet(step, max_steps=4, halting_bias=-2.0)
    assert step.halting_head.bias.item() == -2.0


def test_encode_describes_each_slot_on_its_own():
    """Changing one slot's arrow changes that slot's value only, and no key: the context holds no
    information about a slot's neighbours beyond its own arrow."""
    torch.manual_seed(0)
    step = PointerStep(10, hidden_size=8, key_size=6)
    x, _, _ = pointer_batch(64, 10, (1, 8))
    keys, values = step.encode(x)
    changed = x.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 10
    keys2, values2 = step.encode(changed)
    assert torch.equal(keys, keys2)
    others = [i for i in range(10) if i != 3]
    assert torch.equal(values[:, others], values2[:, others])
    assert not torch.allclose(values[:, 3], values2[:, 3])


def test_a_step_reads_the_slots_once():
    """The slots' contents reach a step only through one attention-weighted sum ``r_n``: replacing every
    value by ``r_n`` changes nothing, so a step can follow one arrow and no more."""
    torch.manual_seed(0)
    step = PointerStep(10, hidden_size=8, key_size=6)
    for p in step.parameters():  # sharper attention than at initialisation
        nn.init.normal_(p, std=1.0)
    x, _, _ = pointer_batch(64, 10, (1, 8))
    keys, values = step.encode(x)
    h = torch.randn(64, 8)
    attention, read = step.read((keys, values), h)
    assert attention.shape == (64, 10) and torch.allclose(attention.sum(1), torch.ones(64))
    flat = read.unsqueeze(1).expand_as(values)  # every slot holds r_n
    for a, b in zip(step.step((keys, values), h), step.step((keys, flat), h)):
        torch.testing.assert_close(a, b)


def test_encode_and_step_compile_as_one_graph():
    """No data-dependent Python and no host synchronisation: ``torch.compile(fullgraph=True)`` (with
    the eager backend, which traces without generating code) fails on any graph break."""
    step = PointerStep(8, hidden_size=8, key_size=4)

    def unroll(x):
        context = step.encode(x)
        h = step.initial_state(context)
        outputs = []
        for _ in range(3):
            logits, z, h = step.step(context, h)
            outputs.append((logits, z))
        return outputs

    x, _, _ = pointer_batch(4, 8, (1, 4))
    compiled = torch.compile(unroll, fullgraph=True, backend="eager")
    for (a, za), (b, zb) in zip(compiled(x), unroll(x)):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(za, zb)


def test_a_tiny_run_trains_and_is_evaluated_by_difficulty(tmp_path):
    config = TrainConfig.from_options(
        experiment="pointer-extrapolation",
        output_dir=str(tmp_path),
        progress_bar=False,
        epochs=1,
        train_subset=256,
        max_steps=4,
        step_options={"hidden_size": 8, "key_size": 4},
        compile=False,
    )
    module, metadata = train(config)
    assert metadata["epochs_run"] == 1 and (config.run_dir / WEIGHTS).is_file()
    tables = evaluate_run(config, limit=3, module=module)
    summary = tables["summary"]
    assert list(summary.columns[:2]) == ["set", "k"]
    assert summary.groupby("set")["k"].apply(list).to_dict() == {
        "test": list(range(1, 9)),
        "beyond": list(range(9, 17)),
    }
    assert (summary["n"] == 3).all() and summary["halt_step"].between(1, 4).all()
    per_sample = tables["per_sample"]
    assert len(per_sample) == 16 * 3 and per_sample["label"].between(0, 31).all()


@pytest.mark.parametrize("exit_feature", [True, False])
def test_the_exit_bit_reaches_the_values_only_when_asked(exit_feature):
    """``exit_feature=False`` takes the bit 'this slot is an exit' out of every slot's value: the
    value layer's column for it then changes nothing (break tried: the bit kept -> failed)."""
    from pondernet_tutorial.data.pointer import pointer_batch

    torch.manual_seed(0)
    step = PointerStep(n_slots=8, exit_feature=exit_feature)
    arrows, _, _ = pointer_batch(16, 8, (1, 8), generator=torch.Generator().manual_seed(1))
    _, before = step.encode(arrows)
    with torch.no_grad():
        step.value.weight[:, -1] += 1.0  # the weights of the exit bit
    _, after = step.encode(arrows)
    assert torch.equal(before, after) is (not exit_feature)
