"""Round 11 of attacks (stop 63). Each test failed on the code before its fix; the break is named in its
docstring."""

from __future__ import annotations

import pytest

from pondernet_tutorial.runs import files
from pondernet_tutorial.untrusted import DamagedFileError


def test_a_lock_file_swapped_for_a_link_after_its_check_leaves_the_target_whole(tmp_path, monkeypatch):
    """The lock file is checked (a regular file or none) and then opened by filelock, by its path. A link
    put in its place between the two was followed by filelock before 3.20.1, which opened it with O_TRUNC
    and emptied the file it named (CVE-2025-68146): a user's file outside the output folder. From
    3.20.1 filelock opens it with O_NOFOLLOW, and the lock is refused as damaged. Break: install
    filelock 3.20.0 (``pip install filelock==3.20.0``)."""
    victim = tmp_path / "outside" / "thesis.tex"
    victim.parent.mkdir()
    victim.write_text("three years of work\n")
    output = tmp_path / "runs"
    output.mkdir()
    check = files._check_lock_file

    def check_then_swap(lock):
        check(lock)
        lock.symlink_to(victim)  # the race: after the check, before filelock opens it

    monkeypatch.setattr(files, "_check_lock_file", check_then_swap)
    with pytest.raises(DamagedFileError) as caught:
        with files.folder_lock(output / "seed0"):
            pass
    assert victim.read_text() == "three years of work\n"
    assert "damaged" in str(caught.value) and "\n" not in str(caught.value)


def test_a_crafted_checkpoint_cannot_make_a_callback_of_the_users_remove_outside_its_folder(tmp_path):
    """fit() keeps its own best epoch with a FolderCheckpoint, which trusts no restored path; a plain
    ``ModelCheckpoint`` that the caller adds restores the paths recorded in the checkpoint fit continues
    from, and Lightning removed the recorded "best" (``<folder>/../victim``, a folder, recursively) when
    the next epoch came. Now the checkpoint input and output removes only a regular file named without
    ``..``, and Lightning's own removals still happen. Break: ``remove_checkpoint`` of
    CheckedCheckpointIO deleted (Lightning's ``fs.rm(path, recursive=True)`` comes back)."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from tiny_parity import QUIET, module, parity
    from torch.utils.data import TensorDataset

    from pondernet_tutorial import fit

    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "thesis.tex").write_text("three years of work\n")
    (tmp_path / "victim.txt").write_text("notes\n")
    data = TensorDataset(*parity(64, 0))
    datamodule = L.LightningDataModule.from_datasets(data, data, batch_size=32)
    folder = tmp_path / "ck"
    fit(
        module(),
        datamodule,
        1,
        callbacks=[ModelCheckpoint(dirpath=folder)],
        default_root_dir=tmp_path,
        **QUIET,
    )
    checkpoint = torch.load(next(folder.glob("epoch=*.ckpt")), weights_only=True)
    for target, name in (("victim", "best_model_path"), ("victim.txt", "kth_best_model_path")):
        for key, state in checkpoint["callbacks"].items():
            if key.startswith("ModelCheckpoint"):
                state[name] = f"{folder.resolve()}/../{target}"
    torch.save(checkpoint, tmp_path / "crafted.ckpt")

    with pytest.warns(UserWarning, match="left '.*/ck/../victim' where it is"):
        fit(
            module(),
            datamodule,
            3,
            callbacks=[ModelCheckpoint(dirpath=folder)],
            ckpt_path=tmp_path / "crafted.ckpt",
            default_root_dir=tmp_path,
            **QUIET,
        )
    assert (tmp_path / "victim" / "thesis.tex").read_text() == "three years of work\n"
    assert (tmp_path / "victim.txt").read_text() == "notes\n"
    # epoch 1's file was removed when epoch 2 came; epoch 0's stays, its record replaced by the victim's
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=0-step=2.ckpt", "epoch=2-step=6.ckpt"]
