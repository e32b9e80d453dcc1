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
- or is a word for having the class ("redhead: someone who has red hair", "bespectacled", "red-haired").

A class "<adjective> <noun>" ("blond hair") is that noun with its defining property: the adjective's spellings
("blonde"), shades named after it ("platinum blonde") or by it ("auburn: (of hair) ... reddish-brown") and the
property it sets ("hair colour") are relevant, other kinds of the noun ("black hair", "long hair", "ponytail",
"beard") are not, since they are not the class and for people often proxy gender or age.

A rare sense of a tag counts only with evidence: a part of the class (or of its part) that the tag mostly names,
or for an animal a body sense the tag is used in as often as in any other ("bill" of a bird, not "dock", a pier).

Everything else (background, scene, weather, lighting, colours, other objects) is irrelevant by default, following
the paper's rules (supplement, "System Prompt"; REFERENCE.md "LLM step"). For people classes, kinds of person
(gender, age, role) are irrelevant unless the class names them. MiniLM breaks two ties WordNet cannot: whether a far
ancestor is still a name of the class ("vehicle" for "car", not "container"), and whether a whole from another
branch of WordNet is the same thing as the class ("sail" is part of a "sailing vessel", a near-synonym of "boat").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np
from nltk.corpus.reader.wordnet import ADJ, NOUN, VERB, Synset, WordNetCorpusReader

from mavias.encode.base import TextEncoder
from mavias.encode.sentence import DEFAULT_MODEL
from mavias.judging.base import JudgeStats
from mavias.judging.wordnet import load_wordnet

JUDGE_VERSION = "offline-v4"
# Concrete categories: only senses in these lexicographer files can be kinds or parts of a visual class.
PHYSICAL_LEXNAMES = frozenset(
    {"noun.Tops", "noun.animal", "noun.artifact", "noun.body", "noun.food", "noun.object", "noun.person",
     "noun.plant", "noun.substance"}
)  # fmt: skip
LIVING_LEXNAMES = frozenset({"noun.animal", "noun.plant"})  # strict taxonomies: every ancestor is a name of the class
ANIMATE_LEXNAMES = frozenset({"noun.animal", "noun.body"})  # animals and their body parts
ATTRIBUTE_LEVELS = 2  # "red" -> "chromatic colour" -> "colour"; above that "visual property", "property"
MAX_ANCESTOR_LEVELS = 8  # hypernyms up to this far above the class may still name it ("animal" of "zebra")
MIN_ANCESTOR_DEPTH = 4  # but never the abstract top of the hierarchy ("entity", "object", "whole")
CLOSE_ANCESTOR_LEVELS = (
    2  # a farther ancestor is a name of the class only if MiniLM agrees ("vehicle", not "container")
)
MAX_PART_CHAIN = 3  # part-of links from a tag to the class ("eye" -> "face" -> "human"), one less to a near-synonym
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


def normalize_tag(tag: str) -> str:
    return " ".join(tag.strip().lower().replace("_", " ").split())


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
        self._ancestor_similarity = ancestor_similarity
        self._vectors: dict[str, np.ndarray] = {}
        self._concepts: dict[str, ClassConcept] = {}
        self._all_verbs: list[Synset] | None = None
        self._broader_cache: dict[Synset, list[Synset]] = {}
        self.stats = JudgeStats()

    @property
    def judge_id(self) -> str:
        encoder_id = self._encoder.encoder_id if self._encoder else f"sentence-transformers:{DEFAULT_MODEL}"
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

    def concept(self, class_name: str) -> ClassConcept:
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
        all_ancestors = _distances(synset, self._broader, max_levels=100)
        taxa = _taxa(synset, all_ancestors)
        ancestors = {
            a: level
            for a, level in all_ancestors.items()
            if a in taxa or (level <= MAX_ANCESTOR_LEVELS and a.min_depth() >= MIN_ANCESTOR_DEPTH)
        }
        heads = frozenset(_names(synset))
        forms = {form for m in modifiers if self._is_descriptive_adjective(m) for form in self._adjective_forms(m, heads)}
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
        )
        named = [a for a in ancestors if self._is_name_of_class(concept, a)]
        ancestor_names = {variant for a in named for n in _names(a) for variant in self._spellings(n)}
        return replace(
            concept,
            functions=concept.functions | self._products(ancestor_names),
            ancestor_names=frozenset(ancestor_names),
            verbs=frozenset(self._verbs([synset, *named], {*concept.names, *ancestor_names})),
        )

    def _broader(self, synset: Synset) -> list[Synset]:
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
            for word in self._before_head(synset.definition(), self._broader(synset))
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
        """The most frequent noun sense of the name, else of its head ("urban car" -> car, "landbird" -> bird)."""
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

    def _is_descriptive_adjective(self, word: str) -> bool:
        """A modifier that describes the object itself ("blond", "red"), not its place ("urban") or kind ("ceiling")."""
        adjectives = self._wn.synsets(word, ADJ)
        if not adjectives or adjectives[0].lexname() != "adj.all":
            return False
        return self._count(adjectives, word) >= self._count(self._wn.synsets(word, NOUN), word)

    def _lemmas(self, word: str) -> set[str]:
        return {word} | {lemma for pos in (NOUN, VERB, ADJ) if (lemma := self._wn.morphy(word, pos))}

    def _defining_words(self, gloss: str) -> set[str]:
        words: set[str] = set()
        gloss = gloss.lower()
        for match in DEFINING_MARKERS.finditer(gloss):
            phrase = PHRASE_END.split(gloss[match.end() :])[0]
            for word in WORD.findall(phrase):
                if word not in FUNCTION_WORDS:
                    words |= self._lemmas(word)
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

    # --- the tag -----------------------------------------------------------------------------------------------

    def is_relevant(self, concept: ClassConcept, tag: str) -> bool:
        text = normalize_tag(tag)
        if not text:
            return False
        if text in concept.names or self._lemmas(text) & concept.names:
            return True
        if concept.synset is None:
            return False
        if concept.forms and self._lemmas(text.split()[-1]) & concept.forms:
            return True  # "platinum blonde" is a shade of the class's "blond"
        if self._describes_the_class(concept, text):
            return True
        if concept.forms and self._names_another_kind(concept, text):
            return False
        if text in concept.ancestor_names or self._lemmas(text) & concept.defining_words or text in concept.functions:
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

    def _names_another_kind(self, concept: ClassConcept, text: str) -> bool:
        """For "blond hair": "long hair", "black hair" name other kinds of hair; "platinum blonde" names the class."""
        *modifiers, head = text.split()
        if self._lemmas(head) & concept.forms:
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
        return self._count(self._wn.synsets(_lemma_key(text), VERB), text) >= max(self._count(nouns, text), 1)

    def _noun_senses(self, text: str) -> list[Synset]:
        senses = self._wn.synsets(_lemma_key(text), NOUN)
        *modifiers, head = text.split()
        if not senses and modifiers and all(map(self._is_descriptive_adjective, modifiers)):
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
            return self._is_name_of_class(concept, sense)
        return self._is_young_of(concept, sense) or self._is_part(concept, text, sense)

    def _is_young_of(self, concept: ClassConcept, sense: Synset) -> bool:
        """A young animal of the class or of an ancestor that names it: "kitten: young domestic cat" for a tabby,
        "puppy" for a retriever. Every member of the class was one; a sibling kind ("labrador") is no stage of it."""
        if self._wn.synset("young.n.01") not in sense.closure(_hypernyms):
            return False
        return any(p == concept.synset or set(_names(p)) & concept.ancestor_names for p in self._broader(sense))

    def _is_name_of_class(self, concept: ClassConcept, ancestor: Synset) -> bool:
        """A close or taxonomic ancestor always; a far one only when MiniLM finds its name close to the class's."""
        if concept.ancestors[ancestor] <= CLOSE_ANCESTOR_LEVELS or ancestor in concept.taxa:
            return True
        return self._similarity_between(_names(ancestor), sorted(concept.names)) >= self._ancestor_similarity

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
        return self._count([sense], text) > 0 or self._count(senses, text) == 0

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
        return self._count([sense], text) >= max((self._count([s], text) for s in others), default=0)

    def _is_body_word_of_living_class(self, concept: ClassConcept, text: str, sense: Synset) -> bool:
        """For an animal, a rare animal or body sense of the tag is plausible when the tag is used in it at least as
        often as in any sense naming another kind of thing: "bill" of a bird (its other physical senses are
        unattested) and "foot" of a vertebrate, but not "dock" (a tail's bone; a pier far more often) nor "hand" of
        a dog. Rare artifact senses stay out ("wing" as a car's fender); the sense must still be a part or kind."""
        if sense.lexname() not in ANIMATE_LEXNAMES or concept.synset.lexname() not in LIVING_LEXNAMES:
            return False
        return self._is_most_used(text, sense, other_kinds=ANIMATE_LEXNAMES)

    @staticmethod
    def _count(senses: list[Synset], text: str) -> int:
        """How often ``text`` was tagged with these senses in WordNet's sense-tagged corpus."""
        key = _lemma_key(text)
        return sum(lemma.count() for sense in senses for lemma in sense.lemmas() if lemma.name().lower() == key)

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
            from mavias.encode import SentenceTransformerEncoder

            self._encoder = SentenceTransformerEncoder()
        return self._encoder
