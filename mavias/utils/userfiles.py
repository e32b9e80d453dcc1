"""Files users hand to the command line, read with one readable error when they are missing, a folder, or not text
(no heavy imports: the serving environment reads its settings through here)."""

from __future__ import annotations

from pathlib import Path

from mavias.errors import UserError


def require_file(path: Path, what: str, error: type[UserError] = UserError) -> None:
    if not path.is_file():
        raise error(f"{what} {path} " + ("is a folder, not a file" if path.is_dir() else "does not exist"))


def read_text(path: Path, *, what: str, error: type[UserError] = UserError) -> str:
    """The UTF-8 text of the file at ``path``; ``error`` when it is missing or not text."""
    require_file(path, what, error)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{what} {path} is not UTF-8 text ({short_reason(err)})",
                    hint="pass the text file itself, saved as UTF-8") from None


def short_reason(err: BaseException) -> str:
    return " ".join(str(err).split())[:200]
