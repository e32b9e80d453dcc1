"""How a set of class names is read together: "star" among "circle" and "triangle" is the figure, not the sun.

The offline judge reads a class alone in its most frequent concrete sense, since images show things. A dataset's
classes come from one domain, though: when several of them are most often something else, such as figures ("circle",
"square") or numbers ("seven"), and most can be read so, that domain is the reading: each class is then read in its
sense there that fits its fellows best, where it has one ("diamond" the rhombus, "heart" the figure, "zero" the
digit), and the rest keep theirs. A night passes the classes of the workspace's earlier partitions too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from nltk.corpus.reader.wordnet import NOUN, Synset, WordNetCorpusReader

FIGURES = "noun.shape"  # WordNet's file of shapes and figures: a class set read as figures
LIVING = frozenset({"noun.animal", "noun.body", "noun.person", "noun.plant"})  # never drawn as a figure of itself


@dataclass(frozen=True)
class ClassSetReading:
    """The domain most of a set's class names are read in (None: each alone), and the senses it chose."""

    domain: str | None = None
    names: frozenset[str] = frozenset()  # the set's class names, when it has a domain
    senses: dict[str, Synset] = field(default_factory=dict)  # class name -> its sense in the domain

    @property
    def figures(self) -> bool:
        return self.domain == FIGURES

    def draws(self, name: str, sense: Synset) -> bool:
        """``name`` (read as ``sense``) is drawn as a figure in this set: the set is read as figures and the class is
        no living thing ("arrow" and "cross" among shapes are figures, "dog" is not)."""
        return self.figures and name in self.names and sense.lexname() not in LIVING


def read_class_set(wordnet: WordNetCorpusReader, names: list[str], physical: frozenset[str]) -> ClassSetReading:
    """The set's reading: a lexicographer file outside ``physical`` that holds the most frequent noun sense of at
    least three names and some sense of at least half of them; each name that has a sense there is read in it."""
    senses = {name: wordnet.synsets(name.replace(" ", "_"), NOUN) for name in names}
    first = Counter(found[0].lexname() for found in senses.values() if found)
    domains = [d for d, n in first.most_common() if d not in physical and n >= 3]
    for domain in domains:
        readable = {name: [s for s in found if s.lexname() == domain] for name, found in senses.items()}
        readable = {name: found for name, found in readable.items() if found}
        if len(readable) >= len(names) / 2:
            return ClassSetReading(domain, frozenset(names), _closest_senses(readable))
    return ClassSetReading()


def _closest_senses(readable: dict[str, list[Synset]]) -> dict[str, Synset]:
    """Each name's sense that shares the most ancestors with its fellows' most frequent ones ("zero" the digit, not
    "nothing"); the most frequent on a tie."""
    shared = Counter(a for found in readable.values() for a in found[0].closure(Synset.hypernyms))
    return {name: max(found, key=lambda s: sum(shared[a] for a in s.closure(Synset.hypernyms)))
            for name, found in readable.items()}
