import pytest
import torch

from pondernet_tutorial import diagnose


class Fixed(torch.nn.Module):
    """Gives a given halting distribution p of shape (N, B): ``weights(forward(x))`` is ``p``."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return None  # diagnose hands this to weights() and reads nothing else

    def weights(self, out):
        return self.p


def test_expected_steps_rho_and_mass_at_n():
    # sample i halts surely at step i+1 (N = 3, B = 3); the last one puts all its mass on N
    p = torch.eye(3)
    d = diagnose(Fixed(p), None, difficulty=[1, 2, 3], show=False)
    assert d.mean_steps == pytest.approx(2.0)
    assert d.rho == pytest.approx(1.0)
    assert d.mass_at_n == pytest.approx(1 / 3)
    assert d.spread == pytest.approx(1.0)
    assert d.distribution == pytest.approx([1 / 3] * 3)
    assert diagnose(Fixed(p), None, difficulty=[3, 2, 1], show=False).rho == pytest.approx(-1.0)


def test_bad_difficulty_length_is_refused():
    with pytest.raises(ValueError, match="one per input"):
        diagnose(Fixed(torch.eye(3)), None, difficulty=[1, 2], show=False)


def test_mass_at_n_reads_the_last_step():
    p = torch.tensor([[1.0, 0.5], [1e-9, 1e-9], [1e-9, 0.5]])  # (N=3, B=2)
    assert diagnose(Fixed(p), None, show=False).mass_at_n == pytest.approx(0.25)


def test_a_trained_model_in_eval_mode_and_its_lightning_module():
    # what fit() returns is a LightningModule in eval mode, whose forward pass is inference (a sampled
    # halting step, no distribution): diagnose must still read the full unroll's distribution, in
    # either mode, and leave the mode as it found it
    from pondernet_tutorial import ParityStep, PonderLitModule, PonderNet
    from pondernet_tutorial.methods.base import expected_steps

    torch.manual_seed(0)
    module = PonderLitModule(PonderNet(ParityStep(n_elements=4, hidden_size=8), max_steps=5))
    module.eval()
    x = torch.randn(6, 4)
    with torch.no_grad():
        expected = expected_steps(module.model.weights(module.model(x)))
    for model in (module, module.model):
        for training in (False, True):
            model.train(training)
            d = diagnose(model, x, show=False)
            assert d.mean_steps == pytest.approx(float(expected.mean()), rel=1e-5)
            assert len(d.distribution) == 5
            assert model.training == training


def test_the_printout_names_the_distribution(capsys):
    diagnose(Fixed(torch.eye(3)), None, difficulty=[1, 2, 3])
    out = capsys.readouterr().out
    assert "halting distribution" in out and "0.33 0.33 0.33" in out
    assert "Spearman rho against your difficulty: 1.00" in out


def steps_at(expected_steps, n_steps=8):
    """A halting distribution (N, B) whose E[n] per sample is ``expected_steps`` (between 1 and 2)."""
    e = torch.tensor(expected_steps, dtype=torch.float32)
    p = torch.full((n_steps, len(e)), 1e-12)
    p[0], p[1] = 2 - e, e - 1  # E[n] = 1·(2 − e) + 2·(e − 1) = e
    return p


def test_steps_that_barely_vary_are_a_fixed_depth_even_with_a_high_rho():
    # E[n] rises with the difficulty (ρ = 1) but by a fraction of a step: the book's rule calls it a
    # fixed depth, and diagnose must say so instead of leaving the reader with ρ alone
    d = diagnose(Fixed(steps_at([1.2, 1.3, 1.4, 1.5])), None, difficulty=[1, 2, 3, 4], show=False)
    assert d.rho == pytest.approx(1.0)
    assert d.spread < 0.5
    assert d.verdict == "fixed depth"


def test_steps_that_rise_with_the_difficulty_follow_it_and_beyond_counts_the_wait():
    p = torch.eye(4)  # sample i halts surely at step i + 1
    d = diagnose(Fixed(p), None, difficulty=[0, 1, 2, 3], show=False)
    assert d.verdict == "follows difficulty"
    assert d.beyond == pytest.approx(1.0)  # one step past what each input needs
    assert diagnose(Fixed(p), None, difficulty=[3, 2, 1, 0], show=False).verdict == "wrong direction"
    assert diagnose(Fixed(p), None, show=False).verdict == "no verdict without a difficulty"
    assert diagnose(Fixed(steps_at([1.2, 1.3])), None, show=False).verdict == "fixed depth"


def test_the_prior_mean_is_the_truncated_geometric_mean_and_is_printed(capsys):
    from pondernet_tutorial import ParityStep, PonderLitModule, PonderNet

    module = PonderLitModule(PonderNet(ParityStep(n_elements=4, hidden_size=8), max_steps=5, lambda_p=0.5))
    d = diagnose(module, torch.randn(6, 4), difficulty=list(range(6)))
    prior = torch.tensor([0.5**n for n in range(1, 6)])
    prior = prior / prior.sum()  # the prior renormalised over 1..N, as the KL sees it
    assert d.prior_mean == pytest.approx(float((torch.arange(1, 6) * prior).sum()), rel=1e-5)
    out = capsys.readouterr().out
    assert f"the prior's mean over 1..N: {d.prior_mean:.2f}" in out
    assert f"verdict: {d.verdict}" in out
    assert diagnose(Fixed(torch.eye(3)), None, show=False).prior_mean is None


def test_an_empty_batch_is_refused():
    with pytest.raises(ValueError, match="at least one input"):
        diagnose(Fixed(torch.ones(3, 0)), None, show=False)


class Answering(Fixed):
    """A stand-in that also answers: ``answer(out)`` gives ``logits`` (B, C), as a method does."""

    def __init__(self, p, logits):
        super().__init__(p)
        self.logits = logits

    def answer(self, out, generator=None):
        return self.logits, None


def test_no_verdict_on_halting_for_a_model_that_has_not_learned_the_task(capsys):
    """Halting that follows the difficulty, judged only where the answers are right well above chance:
    rule 1's mark (chance plus ten points) against the accuracy's 95% interval."""
    batch = 200
    p = torch.zeros(4, batch)
    difficulty = torch.arange(batch) % 4
    p[difficulty, torch.arange(batch)] = 1.0  # each sample halts at its difficulty + 1: follows it
    right = torch.zeros(batch, 2)
    right[:, 1] = 5.0  # every answer is class 1
    ones, half = torch.ones(batch, dtype=torch.long), torch.arange(batch) % 2
    d = diagnose(Answering(p, right), None, difficulty=difficulty, targets=ones, show=False)
    assert (d.accuracy, d.verdict) == (1.0, "follows difficulty")
    d = diagnose(Answering(p, right), None, difficulty=difficulty, targets=half)
    assert d.accuracy == 0.5 and d.verdict == "no verdict, the task is not learned"
    assert "accuracy: 50.0% (learned at 60% or more: chance + 10 points)" in capsys.readouterr().out
    few = diagnose(
        Answering(p[:, :4], right[:4]), None, difficulty=difficulty[:4], targets=half[:4], show=False
    )
    assert few.verdict == "follows difficulty"  # 2 of 4 right: the interval reaches above the mark
    assert diagnose(Answering(p, right), None, difficulty=difficulty, show=False).accuracy is None


def test_targets_are_scored_by_a_real_models_answer():
    from pondernet_tutorial import ParityStep, PonderNet

    torch.manual_seed(0)
    model = PonderNet(ParityStep(n_elements=4, hidden_size=8), max_steps=5)
    x, y = torch.randn(50, 4), torch.randint(0, 2, (50,))
    with torch.no_grad():
        model.eval()
        answers, _ = model.answer(model(x), torch.Generator().manual_seed(0))
    d = diagnose(model, x, targets=y, show=False)
    assert d.accuracy == pytest.approx(float((answers.argmax(-1) == y).float().mean()))
    with pytest.raises(ValueError, match="targets has 3 values for a batch of 50"):
        diagnose(model, x, targets=y[:3], show=False)


def test_chance_is_one_over_the_classes_and_the_spread_mark_is_inclusive():
    """Rule 1's chance is 1/C: with ten classes, 30% right (of 1,000) is learned, though under a coin
    toss's 60% mark. A spread of exactly 0.5 steps without a difficulty is no verdict, not a fixed
    depth. A NaN in the halting distribution is refused. (Each survived a mutation sweep.)"""
    batch = 1000
    p = torch.zeros(4, batch)
    p[torch.arange(batch) % 2, torch.arange(batch)] = 1.0  # E[n] = 1 or 2
    logits = torch.zeros(batch, 10)
    logits[:, 3] = 5.0  # always class 3
    targets = torch.where(torch.arange(batch) % 10 < 3, 3, 0)  # 30% of the answers right
    d = diagnose(Answering(p, logits), None, targets=targets, show=False)
    assert d.accuracy == pytest.approx(0.3) and d.verdict != "no verdict, the task is not learned"
    exactly = torch.tensor([[1.0, 0.5, 0.0], [0.0, 0.5, 1.0]])  # E[n] of 1, 1.5 and 2: a spread of 0.5
    d = diagnose(Fixed(exactly), None, show=False)
    assert d.spread == 0.5 and d.verdict == "no verdict without a difficulty"
    with pytest.raises(ValueError, match="non-finite values"):
        diagnose(Fixed(torch.tensor([[float("nan")], [1.0]])), None, show=False)
