"""Held-out vocabularies with hand-written ground truth, unseen while the offline judge was designed.

Relevant follows the paper's rules: the class word, its kinds and near-synonyms, its physical components and
essential behaviours. Irrelevant: background, scene, weather, lighting, colours, other objects and, for people,
gender and age.
"""

from __future__ import annotations

import pandas as pd

BIRD_PARTS = ["bird", "beak", "bill", "wing", "feather", "plumage", "tail", "claw", "flying"]
BIRD_CONTEXT = [
    "sky", "forest", "tree", "branch", "leaf", "grass", "bamboo", "flower", "water", "lake", "ocean", "beach",
    "sand", "boat", "dock", "rock", "mountain", "cloud", "sunlight", "shadow", "nest", "blue", "green", "yellow",
    "white", "black", "brown",
]  # fmt: skip
LAND_KINDS = ["songbird", "sparrow", "warbler", "woodpecker"]
WATER_KINDS = ["duck", "gull", "pelican", "seabird"]

PERSON_RELEVANT = ["person", "human", "face", "hair", "eye", "nose", "mouth", "hand", "arm", "leg", "ear"]
PERSON_IRRELEVANT = [
    "man", "woman", "girl", "boy", "child", "old", "young", "smile", "glasses", "hat", "shirt", "jacket", "necklace",
    "street", "wall", "sky", "tree", "sunlight", "blond", "red", "black",
]  # fmt: skip

CAR_RELEVANT = ["car", "wheel", "tire", "door", "windshield", "headlight", "bumper", "hood"]
CAR_IRRELEVANT = [
    "street", "building", "road", "tree", "field", "fire hydrant", "cow", "horse", "grass", "sky", "parking lot",
    "red", "silver", "night", "rain",
]  # fmt: skip

DOG_RELEVANT = ["dog", "puppy", "paw", "tail", "fur", "ear", "snout"]
DOG_IRRELEVANT = ["leash", "collar", "grass", "couch", "ball", "frisbee", "park", "snow", "brown", "white", "sunlight"]


def _rows(class_name: str, relevant: list[str], irrelevant: list[str]) -> list[tuple[str, str, bool]]:
    return [(class_name, tag, True) for tag in relevant] + [(class_name, tag, False) for tag in irrelevant]


def heldout_relevance() -> pd.DataFrame:
    rows = (
        _rows("landbird", BIRD_PARTS + LAND_KINDS, BIRD_CONTEXT + WATER_KINDS)
        + _rows("waterbird", BIRD_PARTS + WATER_KINDS, BIRD_CONTEXT + LAND_KINDS)
        + _rows("person", PERSON_RELEVANT, PERSON_IRRELEVANT)
        + _rows("urban car", CAR_RELEVANT, CAR_IRRELEVANT)
        + _rows("dog", DOG_RELEVANT, DOG_IRRELEVANT)
    )
    return pd.DataFrame(rows, columns=["class", "tag", "relevant"]).assign(source="ground_truth")
