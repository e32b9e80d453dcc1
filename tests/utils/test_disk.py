"""Files of a folder tree: a sub-folder that cannot be read is named, never skipped."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mavias.errors import UserError
from mavias.utils.disk import files_under

LIST = ("import sys, pathlib; from mavias.utils.disk import files_under; "
        "print(len(files_under(pathlib.Path(sys.argv[1]))))")


def test_every_file_of_the_tree_is_listed(tmp_path):
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "a.png").write_bytes(b"x")
    (tmp_path / "dog" / "deep").mkdir(parents=True)
    (tmp_path / "dog" / "deep" / "b.png").write_bytes(b"y")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in files_under(tmp_path)) == ["cat/a.png",
                                                                                         "dog/deep/b.png"]


@pytest.fixture
def world_readable():
    """A folder every user can reach (pytest's own temporary folders are its owner's alone)."""
    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_sub_folder_that_cannot_be_read_is_named(world_readable):
    root = world_readable / "photos"
    (root / "cat").mkdir(parents=True)
    (root / "dog").mkdir()
    (root / "dog" / "b.png").write_bytes(b"y")
    os.chmod(root / "dog", 0)
    try:
        if os.geteuid() != 0:
            with pytest.raises(UserError, match="dog cannot be read"):
                files_under(root)
            return
        as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c"]
        if shutil.which("setpriv") is None or subprocess.run([*as_nobody, "import mavias"], timeout=60).returncode:
            pytest.skip("root reads every folder, and no other user can run this Python to list the tree")
        listed = subprocess.run([*as_nobody, LIST, str(root)], capture_output=True, text=True, timeout=60)
        assert listed.returncode != 0 and "dog cannot be read" in listed.stderr, listed.stderr[-2000:]
    finally:
        os.chmod(root / "dog", 0o755)
