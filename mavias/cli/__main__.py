"""``python -m mavias.cli``: the `mavias` command."""

from mavias.cli import app

app()
