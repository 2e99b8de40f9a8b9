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
