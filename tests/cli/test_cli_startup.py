"""`mavias --help` answers at once: the root command imports no command module, and the listing it shows is each
command's own help."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from mavias.cli import COMMANDS, load_command

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "pandas", "numpy", "mavias.cli.train", "mavias.core.train")


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_help_imports_nothing_heavy():
    result = _run("import sys\nfrom mavias.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
                  f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert all(name in result.stdout for name in COMMANDS)


def test_help_takes_under_a_second_warm():
    """Measured as the command's CPU time, which a busy machine does not inflate as it does the wall time."""
    command = [sys.executable, "-m", "mavias.cli", "--help"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(command, capture_output=True, env=env, check=True)  # warm: files cached, bytecode compiled
    best = float("inf")
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, capture_output=True, env=env, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    assert best < 1.0, f"mavias --help took {best:.2f} s of CPU"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listing_is_the_command_s_own_help(name):
    assert " ".join(load_command(name).help.split()) == " ".join(COMMANDS[name].help.split())
