"""PonderNet's ``prior`` option in the run machinery: at its default the shipped identities, folders and
hyperparameters are unchanged; with the uniform prior a run's folder, identity and model name no λ_p
(which then does nothing), except in the frozen control, where λ_p sets λ_n.

Deliberate breaks these tests catch (each was tried):
- ``prior`` left out of ``OMITTED_AT_DEFAULT``: test_the_default_prior_leaves_the_shipped_identities_alone;
- the ``UNUSED_WHEN`` entry removed: test_a_uniform_run_names_no_lambda_p.
"""

from pondernet_tutorial.runs.config import TrainConfig

PAPER = "parity-paper16-interpolation"


def test_the_default_prior_leaves_the_shipped_identities_alone():
    for experiment in (PAPER, "parity-interpolation", "pointer-extrapolation", "mnist-interpolation"):
        plain = TrainConfig(experiment=experiment)
        geometric = TrainConfig.from_options(experiment=experiment, prior="geometric")
        assert "prior" not in plain.identity() and "prior" not in plain.method_kwargs()
        assert geometric.identity() == plain.identity() and geometric.run_dir == plain.run_dir
        assert geometric.method_kwargs() == plain.method_kwargs()


def test_a_uniform_run_names_no_lambda_p():
    uniform = TrainConfig.from_options(experiment=PAPER, prior="uniform")
    assert uniform.variant == "pondernet-beta=0.01-prior=uniform"
    assert "lambda_p" not in uniform.identity() and "lambda_p" not in uniform.method_kwargs()
    other = TrainConfig.from_options(experiment=PAPER, prior="uniform", lambda_p=0.7)
    assert other.run_dir == uniform.run_dir and other.identity() == uniform.identity()
    control = TrainConfig.from_options(experiment=PAPER, prior="uniform", learn_halting=False)
    assert control.variant == "pondernet-lambda_p=0.1-beta=0.01-prior=uniform-learn_halting=false"
    assert control.method_kwargs()["lambda_p"] == 0.1
