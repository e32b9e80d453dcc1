"""What WordNet knows about a class name, built once per name for the offline judge.

A concept gathers the class's sense, its kinds, its ancestors (with the genera of glosses where WordNet's links miss
them), the ancestors whose parts every instance has, and the words its gloss defines it by: features, functions,
actions and, for "<adjective> <noun>", the adjective's spellings and the property it sets.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from nltk.corpus.reader.wordnet import ADJ, NOUN, VERB, Synset, WordNetCorpusReader

from mavias.core.judging.readings import FIGURES, ClassSetReading, read_class_set
from mavias.core.relevance import normalize_tag

# Concrete categories: only senses in these lexicographer files can be kinds or parts of a visual class.
PHYSICAL_LEXNAMES = frozenset(
    {"noun.Tops", "noun.animal", "noun.artifact", "noun.body", "noun.food", "noun.object", "noun.person",
     "noun.plant", "noun.substance"}
)  # fmt: skip
LIVING_LEXNAMES = frozenset({"noun.animal", "noun.plant"})  # strict taxonomies: every ancestor is a name of the class
ATTRIBUTE_LEVELS = 2  # "red" -> "chromatic colour" -> "colour"; above that "visual property", "property"
MAX_ANCESTOR_LEVELS = 8  # hypernyms up to this far above the class may still name it ("animal" of "zebra")
MIN_ANCESTOR_DEPTH = 4  # but never the abstract top of the hierarchy ("entity", "object", "whole")
CLOSE_ANCESTOR_LEVELS = 2  # a farther ancestor is a name of the class only if MiniLM agrees ("vehicle", not "container")
MIN_PART_WHOLE_DEPTH = 6  # ancestors whose parts every instance has ("wheeled vehicle", "animal"; not "organism")
# A phrase of a gloss that introduces the defining features of the thing ("with four wheels", "having scales").
DEFINING_MARKERS = re.compile(
    r"\b(?:with|having|has|have|characterized by|consisting of|made of|made from|whose|bearing)\b\s+(?!been\b)"
)
PHRASE_END = re.compile(r"[;,:()]|\b(?:for|in|on|at|near|from|to|used|that|which|where|when|usually|especially)\b")
WORD = re.compile(r"[a-z][a-z-]*")
GENUS_STOPS = frozenset(
    "for in on at of near from to by with having has that which who whose where when used usually especially "
    "consisting made characterized suitable".split()
)  # words that end the genus phrase of a gloss ("a vehicle | carrying ...", "a bus | used to ...")
GENUS_PREAMBLE = re.compile(r"^(?:any|one|either|each) of (?:various |several |many )?")  # "any of various trucks"
WHOLE_OF = re.compile(r"\b(?:of|in|on) (?:a |an |the )?")  # "covering on top | of a motor vehicle"
PRODUCT = re.compile(r"\bcapable of (?:producing|making) ([a-z]+)")  # "capable of producing music"
FUNCTION = re.compile(r"\bfor ([a-z]{2,}ing)\b")  # "a movable organ for flying"
FUNCTION_WORDS = frozenset(
    "a an the and or nor but of is are was be been by as its it this these that not no into through over under "
    "about than very more most such some any each both either other".split()
)


@dataclass(frozen=True)
class ClassConcept:
    """What WordNet knows about one class name."""

    name: str
    synset: Synset | None
    names: frozenset[str]  # the class string, its WordNet lemma names and defining modifiers ("blond" of "blond hair")
    kinds: frozenset[Synset]  # the class synset and, unless it is a people class, all its hyponyms
    excluded: frozenset[Synset]  # kinds of person for a people class: gender, age, role are not the class
    ancestors: dict[Synset, int]  # hypernym -> levels above the class
    defining_words: frozenset[str]  # lemmas from the defining phrases of the gloss
    functions: frozenset[str]  # activities the class and its parts are for, as gerunds and verbs
    part_wholes: frozenset[Synset] = frozenset()  # ancestors specific enough that every instance has their parts
    ancestor_names: frozenset[str] = frozenset()  # names of ancestors that still name the class ("instrument")
    verbs: frozenset[str] = frozenset()  # what the class does or is used for ("wade" of "wader", "drive" a vehicle)
    forms: frozenset[str] = frozenset()  # spellings of a defining modifier ("blond", "blonde" of "blond hair")
    heads: frozenset[str] = frozenset()  # names of the class's noun ("hair" of "red hair")
    attributes: frozenset[str] = frozenset()  # what a defining modifier is a value of ("colour" for "red")
    taxa: frozenset[Synset] = frozenset()  # taxonomic ancestors of a living thing ("aquatic bird", "animal")
    figure: bool = False  # a figure, or a class of a set read as figures: its outline is the class


def _lemma_key(text: str) -> str:
    return text.replace(" ", "_")


def _names(synset: Synset) -> list[str]:
    return [lemma.replace("_", " ").lower() for lemma in synset.lemma_names()]


def _distances(start: Synset, relation, max_levels: int) -> dict[Synset, int]:
    """Synsets reachable from ``start`` in 1..max_levels steps of ``relation``, with their fewest steps."""
    found: dict[Synset, int] = {}
    frontier = {start}
    for level in range(1, max_levels + 1):
        frontier = {nxt for synset in frontier for nxt in relation(synset)} - found.keys() - {start}
        found.update(dict.fromkeys(frontier, level))
    return found


def _hypernyms(synset: Synset) -> list[Synset]:
    return synset.hypernyms() + synset.instance_hypernyms()


def _hyponyms(synset: Synset) -> list[Synset]:
    return synset.hyponyms() + synset.instance_hyponyms()


def _common_concrete_sense(senses: list[Synset]) -> Synset:
    """The first sense that is a concrete common noun: "heron" the bird, not Heron of Alexandria."""
    concrete = [s for s in senses if s.lexname() in PHYSICAL_LEXNAMES and not s.instance_hypernyms()]
    return (concrete or senses)[0]


def _mentions(text: str, names: frozenset[str]) -> bool:
    """Whether ``text`` names one of ``names`` as a word (singular or plural)."""
    return any(re.search(rf"\b{re.escape(name)}(?:s|es)?\b", text) for name in names)


def _taxa(synset: Synset, ancestors: dict[Synset, int]) -> frozenset[Synset]:
    """For an animal or plant, its ancestors in the same taxonomy and the kingdom above them ("animal").

    Biological classification is a strict is-a: a pelican is an aquatic bird, a bird and an animal however far up.
    Artifacts are classified by use as well ("container" above "car"), so they get no such shortcut.
    """
    if synset.lexname() not in LIVING_LEXNAMES:
        return frozenset()
    taxa = {a for a in ancestors if a.lexname() == synset.lexname()}
    kingdoms = {h for a in {synset, *taxa} for h in _hypernyms(a) if h.lexname() == "noun.Tops"}
    return frozenset(taxa | kingdoms)


def _count(senses: list[Synset], text: str) -> int:
    """How often ``text`` was tagged with these senses in WordNet's sense-tagged corpus."""
    key = _lemma_key(text)
    return sum(lemma.count() for sense in senses for lemma in sense.lemmas() if lemma.name().lower() == key)


def _lemmas(wn: WordNetCorpusReader, word: str) -> set[str]:
    return {word} | {lemma for pos in (NOUN, VERB, ADJ) if (lemma := wn.morphy(word, pos))}


def _is_descriptive_adjective(wn: WordNetCorpusReader, word: str) -> bool:
    """A modifier that describes the object itself ("blond", "red"), not its place ("urban") or kind ("ceiling")."""
    adjectives = wn.synsets(word, ADJ)
    if not adjectives or adjectives[0].lexname() != "adj.all":
        return False
    return _count(adjectives, word) >= _count(wn.synsets(word, NOUN), word)


class ConceptBuilder:
    """Builds the concept of a class name from WordNet 3.0, once per name.

    ``similarity`` (the judge's MiniLM, highest cosine between two lists of names) decides whether a far ancestor is
    still a name of the class.
    """

    def __init__(
        self,
        wordnet: WordNetCorpusReader,
        similarity: Callable[[list[str], list[str]], float],
        *,
        ancestor_similarity: float,
    ):
        self._wn = wordnet
        self._similarity = similarity
        self._ancestor_similarity = ancestor_similarity
        self._concepts: dict[str, ClassConcept] = {}
        self._all_verbs: list[Synset] | None = None
        self._broader_cache: dict[Synset, list[Synset]] = {}
        self.reading = ClassSetReading()

    def read_classes(self, names: list[str]) -> None:
        """Read every class of the dataset together from now on (:mod:`mavias.core.judging.readings`)."""
        reading = read_class_set(self._wn, sorted({normalize_tag(n) for n in names}), PHYSICAL_LEXNAMES)
        if reading != self.reading:
            self.reading = reading
            self._concepts.clear()

    def build(self, class_name: str) -> ClassConcept:
        name = normalize_tag(class_name)
        if name not in self._concepts:
            self._concepts[name] = self._make_concept(name)
        return self._concepts[name]

    def _make_concept(self, name: str) -> ClassConcept:
        synset, modifiers = self._class_synset(name)
        if synset is None:
            return ClassConcept(name, None, frozenset({name}), frozenset(), frozenset(), {}, frozenset(), frozenset())
        hyponyms = set(_distances(synset, _hyponyms, max_levels=100))
        people = synset == self._wn.synset("person.n.01") or synset.lexname() == "noun.person"
        all_ancestors = _distances(synset, self.broader, max_levels=100)
        taxa = _taxa(synset, all_ancestors)
        ancestors = {
            a: level
            for a, level in all_ancestors.items()
            if a in taxa or (level <= MAX_ANCESTOR_LEVELS and a.min_depth() >= MIN_ANCESTOR_DEPTH)
        }
        heads = frozenset(_names(synset))
        forms = {form for m in modifiers if _is_descriptive_adjective(self._wn, m)
                 for form in self._adjective_forms(m, heads)}
        names = {name, *_names(synset), *forms, *(f"{form} {head}" for form in forms for head in _names(synset))}
        concept = ClassConcept(
            name=name,
            synset=synset,
            names=frozenset(names),
            kinds=frozenset({synset} if people or forms else {synset, *hyponyms}),
            excluded=frozenset(hyponyms if people or forms else ()),
            ancestors=ancestors,
            defining_words=frozenset(self._defining_words(synset.definition())
                                     | self._having_modifiers(synset.definition(), [synset, *all_ancestors])),
            functions=frozenset(self._functions([synset, *ancestors])),
            part_wholes=frozenset(a for a in all_ancestors if a.min_depth() >= MIN_PART_WHOLE_DEPTH),
            forms=frozenset(forms),
            heads=heads,
            attributes=frozenset(self._attributes(modifiers) if forms else ()),
            taxa=taxa,
            figure=synset.lexname() == FIGURES or self.reading.draws(name, synset),
        )
        named = [a for a in ancestors if self.is_name_of_class(concept, a)]
        ancestor_names = {variant for a in named for n in _names(a) for variant in self._spellings(n)}
        return replace(
            concept,
            functions=concept.functions | self._products(ancestor_names),
            ancestor_names=frozenset(ancestor_names),
            verbs=frozenset(self._verbs([synset, *named], {*concept.names, *ancestor_names})),
        )

    def is_name_of_class(self, concept: ClassConcept, ancestor: Synset) -> bool:
        """A close or taxonomic ancestor always; a far one only when MiniLM finds its name close to the class's."""
        if concept.ancestors[ancestor] <= CLOSE_ANCESTOR_LEVELS or ancestor in concept.taxa:
            return True
        return self._similarity(_names(ancestor), sorted(concept.names)) >= self._ancestor_similarity

    def broader(self, synset: Synset) -> list[Synset]:
        """Hypernyms, and the kinds WordNet's glosses file the synset under where its hypernym links do not.

        The genus of its own gloss ("bus: a vehicle carrying many passengers", though linked only to "public
        transport"), and the whole its parts are defined on ("roof: protective covering on top of a motor vehicle",
        a part of bus, car and truck) when that whole subsumes the part's other wholes: a bus is a motor vehicle.
        """
        if synset not in self._broader_cache:
            genera = {self._genus(synset.definition(), synset.lexname())} | self._part_genera(synset)
            genera = {g for g in genera - {None, synset, *_hypernyms(synset)} if synset not in g.closure(_hypernyms)}
            self._broader_cache[synset] = [*_hypernyms(synset), *genera]
        return self._broader_cache[synset]

    def _part_genera(self, synset: Synset) -> set[Synset]:
        genera = set()
        for part in synset.part_meronyms():
            others = [whole for whole in part.part_holonyms() if whole != synset]
            gloss = part.definition().lower().split(";")[0]
            for match in WHOLE_OF.finditer(gloss):
                genus = self._genus(gloss[match.end() :], synset.lexname())
                if others and all(genus in whole.closure(_hypernyms) for whole in others):
                    genera.add(genus)
        return genera

    def _genus(self, gloss: str, lexname: str) -> Synset | None:
        """The head noun of a gloss's first phrase, as its longest WordNet compound, in the category ``lexname``:
        "any of various large trucks that carry firemen" -> truck; "grey or white wading bird with" -> wading bird."""
        words = WORD.findall(GENUS_PREAMBLE.sub("", gloss.lower().split(";")[0]))
        head = None
        for i, word in enumerate(words):
            if word in GENUS_STOPS or (head is not None and not self._wn.morphy(word, NOUN)):
                break
            if word not in FUNCTION_WORDS and self._wn.morphy(word, NOUN):
                head = i
        for size in (3, 2, 1):
            if head is None or head + 1 < size:
                continue
            senses = self._wn.synsets("_".join(words[head + 1 - size : head + 1]), NOUN)
            senses = [s for s in senses if s.lexname() == lexname and lexname in PHYSICAL_LEXNAMES]
            if senses:
                return senses[0]
        return None

    def _adjective_forms(self, word: str, heads: frozenset[str]) -> set[str]:
        """The spellings of an adjective's main sense ("blond": "blonde"), of its other senses and of the adjectives
        similar to it that are about the class's noun ("flaxen: of hair color"; "grey": "hoary"), and the shades of
        its cluster about that noun named by the main sense ("auburn: (of hair) colored a moderate reddish-brown",
        "reddish" being a spelling of "red"), one-word forms only."""
        senses = self._wn.synsets(word, ADJ)
        chosen = {senses[0], *(s for s in senses if _mentions(s.definition().lower(), heads))}
        similar = {s for sense in chosen if sense.pos() == ADJ for s in sense.similar_tos()
                   if _mentions(s.definition().lower(), heads)}
        main = {lemma.lower() for lemma in senses[0].lemma_names()}
        cluster = {s for sense in chosen for head in (sense.similar_tos() if sense.pos() != ADJ else [sense])
                   for s in head.similar_tos()}
        shades = {s for s in cluster
                  if _mentions(s.definition().lower(), heads) and main & set(re.split(r"[^a-z]+", s.definition().lower()))}
        lemmas = {lemma for sense in chosen | similar | shades for lemma in sense.lemma_names()}
        return {word} | {lemma.lower() for lemma in lemmas if "_" not in lemma}

    def _spellings(self, name: str) -> set[str]:
        """A name, and the same with a relational adjective as its noun: "aquatic bird" is a "water bird"."""
        *modifiers, head = name.split()
        if len(modifiers) != 1 or not (senses := self._wn.synsets(modifiers[0], ADJ)):
            return {name}
        nouns = {p.name().replace("_", " ") for lemma in senses[0].lemmas() for p in lemma.pertainyms()}
        return {name, *(f"{noun} {head}" for noun in nouns)}

    def _products(self, names: set[str]) -> set[str]:
        """What a relational adjective in a name says the class is capable of producing: "musical instrument"
        (musical: "characterized by or capable of producing music") -> "music"."""
        modifiers = {name.split()[0] for name in names if " " in name}
        glosses = [senses[0].definition() for m in modifiers if (senses := self._wn.synsets(m, ADJ))]
        return {match[1] for gloss in glosses for match in PRODUCT.finditer(gloss.lower())}

    def _attributes(self, modifiers: list[str]) -> set[str]:
        """What the modifiers are values of: "red" is a chromatic colour, a colour ("color", "colour")."""
        values = [s for m in modifiers for s in self._wn.synsets(m, NOUN) if s.lexname() == "noun.attribute"]
        return {n for v in values for a in _distances(v, _hypernyms, ATTRIBUTE_LEVELS) for n in _names(a)}

    def _verbs(self, synsets: list[Synset], names: set[str]) -> set[str]:
        """Verbs of what the class does or is used for.

        Verbs derived from a name of the class ("wader" -> "wade", "bicycle" -> "bicycle"), verbs whose
        definition names the class or an ancestor that names it ("drive: operate or control a vehicle") or whose
        usage example has it as the subject ("The birds perched"), and participles before a gloss's head.
        """
        derived = {
            related.name().lower()
            for synset in synsets
            for lemma in synset.lemmas()
            for related in lemma.derivationally_related_forms()
            if related.synset().pos() == VERB
        }
        subjects = "|".join(re.escape(name) for name in sorted(names))
        subject = re.compile(rf"\b(?:{subjects})(?:s|es)?\s+(?:[a-z]+ly\s+)?([a-z]+)")  # "the birds (quickly) perched"
        mentioned = {
            lemma.lower()
            for verb in self._verb_synsets()
            if _mentions(verb.definition(), frozenset(names)) or self._is_subject_in_examples(verb, subject)
            for lemma in verb.lemma_names()
            if "_" not in lemma
        }
        participles = {
            verb
            for synset in synsets
            for word in self._before_head(synset.definition(), self.broader(synset))
            if word.endswith("ing") and (verb := self._wn.morphy(word.split("-")[-1], VERB))
        }  # "wading and swimming and diving birds" (aquatic bird)
        return derived | mentioned | participles

    def _is_subject_in_examples(self, verb: Synset, subject: re.Pattern) -> bool:
        """Whether a usage example has a name of the class doing this verb: "The birds perched high in the tree"."""
        return any(self._wn.morphy(match[1], VERB) in verb.lemma_names()
                   for example in verb.examples() for match in subject.finditer(example.lower()))

    def _verb_synsets(self) -> list[Synset]:
        if self._all_verbs is None:
            self._all_verbs = list(self._wn.all_synsets(VERB))
        return self._all_verbs

    def _class_synset(self, name: str) -> tuple[Synset | None, list[str]]:
        """The name's sense in its class set's reading, else its most frequent noun sense, else its head's ("urban
        car" -> car, "landbird" -> bird)."""
        if name in self.reading.senses:
            return self.reading.senses[name], []
        words = name.split()
        for start in range(len(words)):
            senses = self._wn.synsets(_lemma_key(" ".join(words[start:])), NOUN)
            if senses:
                return _common_concrete_sense(senses), words[:start]
        head = words[-1] if words else ""
        for cut in range(1, len(head) - 2):  # a closed compound: the longest known head with a known modifier
            prefix, suffix = head[:cut], head[cut:]
            if self._wn.synsets(suffix, NOUN) and self._wn.synsets(prefix):
                return self._wn.synsets(suffix, NOUN)[0], [*words[:-1], prefix]
        return None, []

    def _defining_words(self, gloss: str) -> set[str]:
        words: set[str] = set()
        gloss = gloss.lower()
        for match in DEFINING_MARKERS.finditer(gloss):
            phrase = PHRASE_END.split(gloss[match.end() :])[0]
            for word in WORD.findall(phrase):
                if word not in FUNCTION_WORDS:
                    words |= _lemmas(self._wn, word)
        return words

    def _having_modifiers(self, gloss: str, heads: list[Synset]) -> set[str]:
        """Things the class has, named by "-ed" modifiers before the gloss's head noun: "striped ... equines" -> stripe,
        "bowed stringed instrument" -> bow, string; "a wheeled vehicle" -> wheel. Colours and sizes are never "-ed"."""
        found = set()
        for word in self._before_head(gloss, heads):
            last = word.split("-")[-1]  # "heavy-bodied" -> "bodied"
            stem = self._wn.morphy(last, VERB) if last.endswith("ed") else None
            nouns = self._wn.synsets(stem, NOUN) if stem else []
            if nouns and nouns[0].lexname() in PHYSICAL_LEXNAMES:
                found |= {stem, last}
        return found

    def _before_head(self, gloss: str, heads: list[Synset]) -> list[str]:
        """The words of a gloss's first clause before its head noun, a name of one of ``heads``."""
        head_words = {name.split()[-1] for synset in heads for name in _names(synset)}
        words = WORD.findall(gloss.lower().split(";")[0])
        end = next((i for i, w in enumerate(words) if w in head_words or self._wn.morphy(w, NOUN) in head_words), 0)
        return words[:end]

    def _functions(self, wholes: list[Synset]) -> set[str]:
        """What the class and its parts are for ("wing: a movable organ for flying" -> "flying", "fly")."""
        glosses = [wholes[0].definition(), *(part.definition() for whole in wholes for part in whole.part_meronyms())]
        gerunds = {word for gloss in glosses for word in FUNCTION.findall(gloss.lower())}
        return gerunds | {verb for word in gerunds if (verb := self._wn.morphy(word, VERB))}
