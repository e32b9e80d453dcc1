"""`mavias --help` answers at once: the root command imports no command module, and the listing it shows is each
command's own help."""

from __future__ import annotations

import os
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


def test_no_command_s_help_imports_torch():
    """A command's help answers without the seconds torch takes to import: its heavy imports are in its body."""
    result = _run("import sys\nfrom mavias.cli import COMMANDS, app\nfor name in COMMANDS:\n    try:\n"
                  "        app([name, '--help'])\n    except SystemExit:\n        pass\n"
                  "print(sorted(m for m in ('torch', 'open_clip', 'airflow') if m in sys.modules))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listing_is_the_command_s_own_help(name):
    assert " ".join(load_command(name).help.split()) == " ".join(COMMANDS[name].help.split())
