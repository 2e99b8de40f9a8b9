import pytest
import torch

from pondernet_tutorial import diagnose
from pondernet_tutorial.methods.base import PonderOutput


class Fixed(torch.nn.Module):
    """Returns a given halting distribution p of shape (N, B)."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        n, b = self.p.shape
        return PonderOutput(logits=torch.zeros(n, b, 2), halting_logits=torch.zeros(n, b), log_p=self.p.log())


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
    # what fit() returns is a LightningModule in eval mode, whose forward pass samples the halting
    # step (no log_p): diagnose must still read the full unroll's distribution
    from pondernet_tutorial import ParityStep, PonderLitModule

    torch.manual_seed(0)
    module = PonderLitModule(
        ParityStep, 2, step_options={"n_elements": 4, "hidden_size": 8}, method_options={"max_steps": 5}
    )
    module.eval()
    x = torch.randn(6, 4)
    expected = module.model.evaluation_forward(x).expected_steps
    for model in (module, module.model):
        d = diagnose(model, x, show=False)
        assert d.mean_steps == pytest.approx(float(expected.mean()), rel=1e-5)
        assert len(d.distribution) == 5


def test_the_printout_names_the_distribution(capsys):
    diagnose(Fixed(torch.eye(3)), None, difficulty=[1, 2, 3])
    out = capsys.readouterr().out
    assert "halting distribution" in out and "0.33 0.33 0.33" in out
    assert "Spearman rho against your difficulty: 1.00" in out
