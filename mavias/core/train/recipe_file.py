"""A run folder's ``recipe.json``: what the recipe resolved (written by
:class:`~mavias.core.train.recipe.ResolvedRecipe`), readable without torch for the night's planning task."""

from __future__ import annotations

import json
from pathlib import Path

RECIPE_FILE = "recipe.json"


def read_recipe_record(run_dir: str | Path, requested: dict | None = None) -> dict | None:
    """The resolution a run folder recorded (for ``requested``, when given), or None."""
    path = Path(run_dir) / RECIPE_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    return None if requested is not None and record.get("requested") != requested else record
