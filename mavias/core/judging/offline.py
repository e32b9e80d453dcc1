"""The offline judge: WordNet's is-a / part-of knowledge, the class's own definition, and MiniLM as a tie-breaker.

Similarity to the class name alone ranks *context* high (for "boat": sea 0.65 against hull 0.31 in MiniLM), which is
exactly the shortcut MAVias must expose, so embeddings never decide relevance on their own here. A tag is relevant to
a class when WordNet says it

- names the class or one of its kinds (hyponyms), or an ancestor that still names it ("bird" -> "vertebrate"; for an
  animal or plant every taxonomic ancestor up to its kingdom, "animal"), or the young of either ("kitten");
  proper names are never the class ("heron" is the bird, not Heron of Alexandria). Ancestors include the genus of
  a gloss where WordNet's links miss it ("bus: a vehicle carrying many passengers" is filed under "public
  transport"; its roof is "covering on top of a motor vehicle", so a bus is a motor vehicle with its parts);
- is a part of the class or of any ancestor specific enough that every instance has its parts, through a short
  chain of parts ("eye" -> "face" -> "head" -> "animal" <- ... <- "zebra"), or is the general name of such a part
  ("door" for "car door"), or a member or substance of the class ("tree" of "forest"); a body part whose
  definition names such an ancestor ("fur: dense coat of fine silky hairs on mammals");
- or appears in a defining phrase of the class's gloss ("... characterized by feathers ...", "... made of snow"),
  or names a function of the class or of its parts ("wing: a movable organ for flying", "musical instrument":
  music), or an action: a verb derived from a name of the class ("wader" -> "wade"), whose definition names it
  ("drive: operate a vehicle"), whose usage example has it as the subject ("The birds perched"), or a participle
  before a gloss's head ("wading and swimming and diving birds");
- or is a word for having the class ("redhead: someone who has red hair", "bespectacled", "red-haired");
- or, for a figure (or a class of a set read as figures, :mod:`mavias.core.judging.readings`), names a part of an
  outline ("corner", "edge", "tip"), since a figure is its outline; or is the written sign of the class or of an
  ancestor naming it ("numeral: a symbol used to represent a number" for "seven").

A class "<adjective> <noun>" ("blond hair") is that noun with its defining property: the adjective's spellings
("blonde"), shades named after it ("platinum blonde") or by it ("auburn: (of hair) ... reddish-brown") and the
property it sets ("hair colour") are relevant, other kinds of the noun ("black hair", "long hair", "ponytail",
"beard") are not, since they are not the class and for people often proxy gender or age.

A rare sense of a tag counts only with evidence: a part of the class (or of its part) that the tag mostly names,
or for an animal a body sense the tag is used in as often as in any other ("bill" of a bird, not "dock", a pier).

Everything else (background, scene, weather, lighting, colours, other objects) is irrelevant by default, following
the paper's rules (supplement, "System Prompt"). For people classes, kinds of person
(gender, age, role) are irrelevant unless the class names them. MiniLM breaks two ties WordNet cannot: whether a far
ancestor is still a name of the class ("vehicle" for "car", not "container"), and whether a whole from another
branch of WordNet is the same thing as the class ("sail" is part of a "sailing vessel", a near-synonym of "boat").

The class's side, what WordNet knows about it, is built once per class in :mod:`mavias.core.judging.concepts`.
"""

from __future__ import annotations

import re

import numpy as np
from nltk.corpus.reader.wordnet import ADJ, NOUN, VERB, Synset, WordNetCorpusReader

from mavias.core.encode.base import TextEncoder
from mavias.core.encode.sentence import DEFAULT_MODEL
from mavias.core.judging.base import OFFLINE_SOURCE, JudgeStats
from mavias.core.judging.concepts import (
    LIVING_LEXNAMES,
    PHYSICAL_LEXNAMES,
    ClassConcept,
    ConceptBuilder,
    _count,
    _distances,
    _hypernyms,
    _hyponyms,
    _is_descriptive_adjective,
    _lemma_key,
    _lemmas,
    _mentions,
    _names,
)
from mavias.core.judging.wordnet import load_wordnet
from mavias.core.relevance import normalize_tag

JUDGE_VERSION = "offline-v6"
ANIMATE_LEXNAMES = frozenset({"noun.animal", "noun.body"})  # animals and their body parts
MAX_PART_CHAIN = 3  # part-of links from a tag to the class ("eye" -> "face" -> "human"), one less to a near-synonym
# What an outline has: its points and corners, ends and edges, boundary lines, sides and projections ("arm", "lobe").
OUTLINE_LEXNAMES = frozenset({"noun.shape", "noun.location"})  # or a projection ("arm" of a cross)
PROJECTION = "projection.n.04"
# Each kind of outline part with how far below it its words may lie: further down are places ("bus stop" is a point,
# "skyline" an outline), not parts of a figure.
OUTLINE_PARTS = {"point.n.02": 0, "corner.n.02": 0, "extremity.n.04": 2, "boundary.n.02": 1, "subfigure.n.01": 2,
                 PROJECTION: 1}
PART_OF_FIGURE = re.compile(r"\b(?:portion|part|section|segment) of\b")  # "arc: a continuous portion of a circle"
SYMBOL_OF = re.compile(r"\bsymbols?\b[^;]*?\brepresent\w*\s+(?:an? |the )?([a-z]+)")  # "numeral: a symbol used to ...


def _is_member_or_substance_of(synset: Synset, whole: Synset) -> bool:
    """A tree of a forest, snow of a snowman; direct links only, since chains of them climb into taxonomic genera."""
    return whole in synset.member_holonyms() or whole in synset.substance_holonyms()


class OfflineJudge:
    """Judges with WordNet 3.0 and a sentence encoder; no network, no key, deterministic."""

    def __init__(
        self,
        encoder: TextEncoder | None = None,
        wordnet: WordNetCorpusReader | None = None,
        *,
        synonym_similarity: float = 0.7,
        ancestor_similarity: float = 0.45,
    ):
        self._wn = wordnet or load_wordnet()
        self._encoder = encoder
        self._synonym_similarity = synonym_similarity
        self._vectors: dict[str, np.ndarray] = {}
        self._builder = ConceptBuilder(self._wn, self._similarity_between, ancestor_similarity=ancestor_similarity)
        self._outline_parts = {self._wn.synset(name): depth for name, depth in OUTLINE_PARTS.items()}
        self._projection = self._wn.synset(PROJECTION)
        self.stats = JudgeStats()

    @property
    def judge_id(self) -> str:
        encoder_id = self._encoder.encoder_id if self._encoder else f"sentence-transformers:{DEFAULT_MODEL}"
        reading = self._builder.reading.domain
        return f"{OFFLINE_SOURCE}wordnet-3.0+{encoder_id}" + (f"+read-as-{reading}" if reading else "")

    @property
    def prompt_version(self) -> str:
        return JUDGE_VERSION

    def read_classes(self, class_names: list[str]) -> None:
        """Every class of the dataset, so each name is read as its fellow classes are (a figure, a number)."""
        self._builder.read_classes(class_names)

    def judge(self, class_name: str, tags: list[str]) -> set[str]:
        concept = self.concept(class_name)
        if concept.synset is not None:  # one batched encoder call instead of many small ones
            self._embed([text for tag in tags if (words := normalize_tag(tag))
                         for text in self._texts_to_compare(concept, words)])  # "_" is no words: irrelevant
        self.stats.tags_judged += len(tags)
        return {tag for tag in tags if self.is_relevant(concept, tag)}

    def concept(self, class_name: str) -> ClassConcept:
        return self._builder.build(class_name)

    # --- the tag -----------------------------------------------------------------------------------------------

    def is_relevant(self, concept: ClassConcept, tag: str) -> bool:
        text = normalize_tag(tag)
        if not text:
            return False
        if text in concept.names or _lemmas(self._wn, text) & concept.names:
            return True
        if concept.synset is None:
            return False
        if concept.forms and _lemmas(self._wn, text.split()[-1]) & concept.forms:
            return True  # "platinum blonde" is a shade of the class's "blond"
        if self._describes_the_class(concept, text):
            return True
        if concept.forms and self._names_another_kind(concept, text):
            return False
        if (text in concept.ancestor_names or _lemmas(self._wn, text) & concept.defining_words
                or text in concept.functions):
            return True
        if (concept.figure and self._is_outline_part(text)) or self._is_symbol_of(concept, text):
            return True
        if self._is_verb_of(concept, text):
            return True
        return any(
            (self._is_plausible_sense(text, sense) or self._is_named_part(concept, text, sense)
             or self._is_body_word_of_living_class(concept, text, sense))
            and self._relates(concept, text, sense)
            for sense in self._physical_senses(text)
        )

    def _describes_the_class(self, concept: ClassConcept, text: str) -> bool:
        """A word for someone or something that has the class, or for the property the class's modifier sets.

        "redhead: someone who has red hair", "bespectacled: wearing ... eyeglasses" (a person or an adjective whose
        gloss gives the class as what it has; objects that have it, such as a car "with four wheels", are wholes,
        not the class); "red-haired" (having <form> <noun>); "hair colour" for "red hair" (red is a colour).
        """
        words = text.split()
        if concept.forms and len(words) == 2 and words[0] in concept.heads and words[1] in concept.attributes:
            return True
        compound = re.fullmatch(r"([a-z]+)-([a-z]+)", text)
        if compound and compound[1] in concept.forms and compound[2].endswith("d"):
            stems = {compound[2][:-2], compound[2][:-1]}
            return bool({self._wn.morphy(stem, NOUN) for stem in stems} & concept.heads)
        owned = [name for name in concept.names if not concept.forms or any(f in name.split() for f in concept.forms)]
        owned = [name for name in owned if " " in name or name not in concept.forms]
        senses = [s for pos in (NOUN, ADJ) for s in self._wn.synsets(_lemma_key(text), pos)
                  if _names(s)[0] == text and (s.pos() != NOUN or s.lexname() == "noun.person")]
        return any(re.search(rf"\b(?:with|having|has|have|wearing|wears)\b.*\b{re.escape(name)}(?:s|es)?\b",
                             s.definition().lower().split(";")[0]) for s in senses for name in owned)

    def _is_outline_part(self, text: str) -> bool:
        """A figure is its outline, so a word for a part of an outline ("corner", "edge", "tip", "rim") describes it;
        lines and patterns that may fill a background ("waves", "stripes") are not parts of an outline, nor are
        things that merely have points ("circle" as a traffic circle, a point of a road)."""
        for sense in self._noun_senses(text):
            kind = self._outline_kind(sense)
            if kind and (sense.lexname() in OUTLINE_LEXNAMES or kind == self._projection):
                return True
            if sense.lexname() == "noun.shape" and PART_OF_FIGURE.search(sense.definition()):
                return True
        return False

    def _outline_kind(self, sense: Synset) -> Synset | None:
        """The kind of outline part ``sense`` is, when it lies close enough below one (``OUTLINE_PARTS``)."""
        for path in sense.hypernym_paths():
            for kind, depth in self._outline_parts.items():
                if kind in path and len(path) - 1 - path.index(kind) <= depth:
                    return kind
        return None

    def _is_symbol_of(self, concept: ClassConcept, text: str) -> bool:
        """The written sign of the class or of an ancestor naming it: "numeral: a symbol used to represent a number"
        for "seven"."""
        names = concept.names | concept.ancestor_names
        return any((match := SYMBOL_OF.search(sense.definition().lower())) and match[1] in names
                   for sense in self._noun_senses(text))

    def _names_another_kind(self, concept: ClassConcept, text: str) -> bool:
        """For "blond hair": "long hair", "black hair" name other kinds of hair; "platinum blonde" names the class."""
        *modifiers, head = text.split()
        if _lemmas(self._wn, head) & concept.forms:
            return False  # named by the class's modifier: relevant, see is_relevant
        head_names = set(_names(concept.synset))
        if modifiers and head in head_names:
            return not set(modifiers) & concept.names
        return any(sense in concept.excluded for sense in self._noun_senses(text))

    def _is_verb_of(self, concept: ClassConcept, text: str) -> bool:
        """An action of the class: a gerund, or a word used more as a verb than as a noun ("drive", not "pink")."""
        verb = self._wn.morphy(text, VERB)
        if verb is None or verb not in concept.verbs:
            return False
        if text.endswith("ing") or (text.endswith("ed") and verb != text):
            return True  # a gerund or a participle ("perched") is the action, not a thing
        nouns = [sense for sense in self._wn.synsets(_lemma_key(text), NOUN) if not sense.instance_hypernyms()]
        if nouns and nouns[0].lexname() in {*PHYSICAL_LEXNAMES, "noun.location"}:
            return False  # mainly a thing or a place ("dock", "park")
        return _count(self._wn.synsets(_lemma_key(text), VERB), text) >= max(_count(nouns, text), 1)

    def _noun_senses(self, text: str) -> list[Synset]:
        senses = self._wn.synsets(_lemma_key(text), NOUN)
        *modifiers, head = text.split()
        if not senses and modifiers and all(_is_descriptive_adjective(self._wn, m) for m in modifiers):
            senses = self._wn.synsets(head, NOUN)  # an open compound WordNet lacks: "red wing" is a wing
        return senses

    def _physical_senses(self, text: str) -> list[Synset]:
        return [sense for sense in self._noun_senses(text) if sense.lexname() in PHYSICAL_LEXNAMES]

    def _relates(self, concept: ClassConcept, text: str, sense: Synset) -> bool:
        if sense in concept.excluded:
            return False
        if sense in concept.kinds or _is_member_or_substance_of(sense, concept.synset):
            return True
        if sense in concept.ancestors:
            return self._builder.is_name_of_class(concept, sense)
        return self._is_young_of(concept, sense) or self._is_part(concept, text, sense)

    def _is_young_of(self, concept: ClassConcept, sense: Synset) -> bool:
        """A young animal of the class or of an ancestor that names it: "kitten: young domestic cat" for a tabby,
        "puppy" for a retriever. Every member of the class was one; a sibling kind ("labrador") is no stage of it."""
        if self._wn.synset("young.n.01") not in sense.closure(_hypernyms):
            return False
        return any(p == concept.synset or set(_names(p)) & concept.ancestor_names for p in self._builder.broader(sense))

    def _is_part(self, concept: ClassConcept, text: str, sense: Synset) -> bool:
        """A part of the class, of a near-synonym of it, or (through fewer links) of a specific enough ancestor.

        Parts of the class's kinds do not count: a motorboat's windshield is no part of every boat.
        """
        for whole, steps in self._wholes(text, sense).items():
            if whole == concept.synset or (steps < MAX_PART_CHAIN and self._is_near_synonym(concept, whole)):
                return True
            if whole in concept.part_wholes and steps <= MAX_PART_CHAIN:
                return True
        return self._is_body_part_of_ancestor(concept, sense)

    def _is_body_part_of_ancestor(self, concept: ClassConcept, sense: Synset) -> bool:
        """A body part or covering whose definition names an ancestor ("fur: dense coat ... on mammals")."""
        if sense.lexname() not in ("noun.body", "noun.animal") or concept.synset.lexname() != "noun.animal":
            return False
        if any(a.lexname() == "noun.Tops" and a.name().startswith("organism") for a in sense.closure(_hypernyms)):
            return False  # an animal itself ("cow: ... of mammals"), not a part of one
        names = frozenset(n for whole in concept.part_wholes for n in _names(whole))
        return _mentions(sense.definition().lower(), names)

    def _wholes(self, text: str, sense: Synset) -> dict[Synset, int]:
        """What the sense, or a kind of it named after the tag, is part of, with the fewest part-of links."""
        wholes: dict[Synset, int] = {}
        for start in (sense, *self._named_kinds(text, sense)):
            for whole, steps in _distances(start, Synset.part_holonyms, MAX_PART_CHAIN).items():
                wholes[whole] = min(steps, wholes.get(whole, steps))
        return wholes

    @staticmethod
    def _named_kinds(text: str, sense: Synset) -> list[Synset]:
        """Kinds of the sense named "<something> <tag>": "car door" for "door", "pneumatic tire" for "tire"."""
        suffix = "_" + _lemma_key(text)
        return [kind for kind in _hyponyms(sense) if any(name.endswith(suffix) for name in kind.lemma_names())]

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
        return _count([sense], text) > 0 or _count(senses, text) == 0

    def _is_named_part(self, concept: ClassConcept, text: str, sense: Synset) -> bool:
        """A rare sense the tag is the main name of, made plausible by being a part of the class or of an
        ancestor every instance shares ("bridge" and "peg" of a stringed instrument, "coat" of a mammal), or a
        part of such a part used at least as often as the tag's other senses ("rim" of a vehicle's wheel, not
        "dock", a tail's bone but mostly a pier)."""
        if _names(sense)[0] != text:
            return False
        wholes = {concept.synset, *concept.part_wholes}
        if wholes & set(sense.part_holonyms()):
            return True
        return bool(wholes & _distances(sense, Synset.part_holonyms, 2).keys()) and self._is_most_used(text, sense)

    def _is_most_used(self, text: str, sense: Synset, other_kinds: frozenset[str] = frozenset()) -> bool:
        """Whether the tag is used in ``sense`` at least as often as in any other physical sense outside the
        categories ``other_kinds`` (WordNet's sense-tagged counts)."""
        others = [s for s in self._physical_senses(text) if s != sense and s.lexname() not in other_kinds]
        return _count([sense], text) >= max((_count([s], text) for s in others), default=0)

    def _is_body_word_of_living_class(self, concept: ClassConcept, text: str, sense: Synset) -> bool:
        """For an animal, a rare animal or body sense of the tag is plausible when the tag is used in it at least as
        often as in any sense naming another kind of thing: "bill" of a bird (its other physical senses are
        unattested) and "foot" of a vertebrate, but not "dock" (a tail's bone; a pier far more often) nor "hand" of
        a dog. Rare artifact senses stay out ("wing" as a car's fender); the sense must still be a part or kind."""
        if sense.lexname() not in ANIMATE_LEXNAMES or concept.synset.lexname() not in LIVING_LEXNAMES:
            return False
        return self._is_most_used(text, sense, other_kinds=ANIMATE_LEXNAMES)

    def _texts_to_compare(self, concept: ClassConcept, text: str) -> list[str]:
        """Every text the decision on ``text`` may embed: the names of candidate wholes and ancestors."""
        senses = self._physical_senses(text)
        wholes = {whole for sense in senses for whole in self._wholes(text, sense)}
        candidates = [s for s in wholes if self._near_synonym_candidate(concept, s)]
        candidates += [s for s in senses if s in concept.ancestors]
        return [*sorted(concept.names), *(name for s in candidates for name in _names(s))]

    # --- embeddings --------------------------------------------------------------------------------------------

    def _similarity_between(self, texts: list[str], others: list[str]) -> float:
        """Highest cosine similarity between any of ``texts`` and any of ``others``."""
        return float((self._embed(texts) @ self._embed(others).T).max())

    def _embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, self._get_encoder().encode(missing), strict=True))
        return np.stack([self._vectors[t] for t in texts])

    def _get_encoder(self) -> TextEncoder:
        if self._encoder is None:
            from mavias.core.encode import SentenceTransformerEncoder

            self._encoder = SentenceTransformerEncoder()
        return self._encoder
