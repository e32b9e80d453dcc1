"""Print the `serve` extra of pyproject.toml, one requirement a line (for pip, without the torch-heavy base)."""

import sys
import tomllib
from pathlib import Path

pyproject = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "pyproject.toml")
print("\n".join(tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["serve"]))
