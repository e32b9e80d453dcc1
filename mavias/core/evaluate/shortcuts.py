"""Label-free shortcut discovery: the biased tags B' of each class, from tags and a reference model alone.

A tag t (irrelevant to class c) is a shortcut of c when two kinds of evidence, measured on disjoint samples, agree:

1. *association*, on the training split (what a model can learn): c carries t more often than the other classes.
   Log odds ratio with the Haldane-Anscombe correction and a 95% Wald interval; one-sided hypergeometric (Fisher
   exact) test; Benjamini-Hochberg over every (class, tag) pair with at least ``min_support`` training samples of c
   carrying t.
2. *reliance*, on samples the model measured never trained on: the reference's log-probability of c is higher where
   t is present (on the validation split; on a small split also the cross-fitted references' on the training split,
   :mod:`mavias.core.protocol.crossfit`). *Within*: class-c samples with t against class-c samples without it. *Cross*:
   samples of the other classes with t against those without it, each centred on its own class's median. One-sided
   Mann-Whitney tests; either part can show reliance (the smaller p-value, doubled: Bonferroni over the two; the cross
   part only with at least ``MIN_CROSS_SUPPORT`` images), as a within-class comparison can be confounded by what else
   comes with t in c's images (a lighthouse that takes the boat's place in the frame) while other classes' images
   with t still show the pull towards c. Benjamini-Hochberg over the pairs the association screened in.
   Probabilities, not 0/1 accuracy, so a reference that is 99.5% accurate on biased validation data still shows how
   much more confident t makes it. Where the reference run kept an early checkpoint (a bias-amplified proxy: an
   early-stopped ERM leans on shortcuts more openly, as in FACTS), each pair takes the strongest of the models'
   evidence among those with the images to decide it, its p-value multiplied by their number (Bonferroni).

Because the pairs are screened on training samples and confirmed on validation samples, the samples that choose a
pair are not the samples that test it (cross-fitted evidence reuses the training samples, each predicted by a model
that never trained on it; the screening reads only their tag counts). A pair is in B' when its association q-value
and its reliance q-value are both at most ``MAX_Q_VALUE``, the association is at least of medium size (the interval's
lower bound of the odds ratio at least ``MIN_ODDS_RATIO``) and both effects point the same way. Whether the reliance
carries over to other classes is reported, not required: where at least ``MIN_CROSS_SUPPORT`` validation images of
other classes carry the tag and show a smaller pull (the cross AUC's one-sided 95% upper bound, from the Mann-Whitney
null standard error, under ``MIN_CROSS_AUC``), the pair is relied on *within the class only*: a co-object the model
uses only beside the object (a mushroom under a bird), or a part of the object that a judge mistook for context and
the tagger sees on clearer pictures. Only the relevance decision tells the two apart, so the pair stays in B' and its
reason asks for a look at that decision (on the seen built-in benchmarks, turning such pairs away lost more planted
co-objects than it kept out false pairs: BENCHMARKS.md). ``score`` = the reliance effect 2·AUC − 1 of the part that
shows it ranks the tags of a class.

A pair no model's samples can decide (fewer than ``MIN_SIDE`` images on the smaller side of the within-class test and
fewer than ``MIN_CROSS_SUPPORT`` of other classes with the tag, for every model) and that is not shown relied on is
*undecided* (``decidable`` false), not "not relied on": 19 images with a tag against 1 without cannot show anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control, hypergeom, mannwhitneyu

MAX_Q_VALUE = 0.05
# A shortcut is a strong cue, not any enrichment: Chen, Cohen & Chen (2010) put a medium effect at an odds ratio of
# 3.47. A tag twice as common in a class (a colour left to the classes without one of their own) is not a shortcut.
MIN_ODDS_RATIO = 3.47
# The same medium effect as an AUC (Cohen's d 0.5 -> Phi(0.5 / sqrt 2)); fewer cross images than this cannot tell.
MIN_CROSS_AUC = 0.64
MIN_CROSS_SUPPORT = 10
MIN_SIDE = 10  # images on the smaller side of a within-class reliance test, below which it cannot decide
Z_95 = 1.959964
Z_95_ONE_SIDED = 1.644854
SHORTCUT = "shortcut"
RULE_VERSION = 5  # part of the cache key of a reference's B' (mavias.core.protocol.reference): bump on any change
CROSS_FITTED = "cross-fitted"  # the name of the cross-fitted references' predictions (mavias.core.protocol.crossfit)
SHORTCUT_COLUMNS = [
    "class", "tag", "support", "class_n", "others_with_tag", "log_odds", "log_odds_ci_low", "log_odds_ci_high",
    "association_q", "within_auc", "within_n_with", "within_n_without", "cross_auc", "cross_n_with",
    "cross_n_without", "reliance_p", "reliance_q", "score", "model", "decidable", "biased", "reason", "rank", "rule",
]


@dataclass(frozen=True)
class Predictions:
    """One model's log-probabilities on samples it never trained on, with their labels and tags."""

    name: str
    labels: np.ndarray
    tags: pd.Series
    log_probs: np.ndarray


def tag_presence(tags: pd.Series) -> pd.DataFrame:
    """Long table (row, tag) of the tags each row carries (lists or sets; missing = no tags)."""
    collections = list | tuple | set | frozenset | np.ndarray
    sets = tags.map(lambda value: sorted(set(value)) if isinstance(value, collections) else [])
    long = sets.explode().dropna()
    return pd.DataFrame({"row": long.index, "tag": long.to_numpy()})


def pair_counts(labels: np.ndarray | pd.Series, tags: pd.Series) -> pd.DataFrame:
    """How many rows of each label carry each tag (``label``, ``tag``, ``n``), the most carried first (then by label
    and tag)."""
    presence = tag_presence(tags.reset_index(drop=True))
    presence["label"] = np.asarray(labels)[presence["row"].to_numpy()]
    counts = presence.groupby(["label", "tag"]).size().rename("n").reset_index()
    return counts.sort_values(["n", "label", "tag"], ascending=[False, True, True], ignore_index=True)


def association(labels: np.ndarray, tags: pd.Series, irrelevant: pd.Series, n_classes: int,
                min_support: int) -> pd.DataFrame:
    """Association of every (class, irrelevant tag) pair with ``min_support`` carriers in the class (training)."""
    presence = tag_presence(tags.reset_index(drop=True))
    presence["label"] = labels[presence["row"].to_numpy()]
    carried = presence.groupby(["label", "tag"]).size().rename("support").reset_index()
    candidates = _irrelevant_pairs(labels, irrelevant.reset_index(drop=True))
    pairs = candidates.merge(carried, on=["label", "tag"], how="left").fillna({"support": 0})
    pairs = pairs[pairs["support"] >= min_support].copy()
    class_n = np.bincount(labels, minlength=n_classes)
    tag_n = presence.groupby("tag").size()
    pairs["class_n"] = class_n[pairs["label"].to_numpy()]
    pairs["others_with_tag"] = pairs["tag"].map(tag_n).to_numpy() - pairs["support"]
    a, b = pairs["support"].to_numpy(float), (pairs["class_n"] - pairs["support"]).to_numpy(float)
    c = pairs["others_with_tag"].to_numpy(float)
    d = len(labels) - pairs["class_n"].to_numpy(float) - c
    log_odds = np.log((a + 0.5) * (d + 0.5) / ((b + 0.5) * (c + 0.5)))
    se = np.sqrt(1 / (a + 0.5) + 1 / (b + 0.5) + 1 / (c + 0.5) + 1 / (d + 0.5))
    pairs["log_odds"] = log_odds
    pairs["log_odds_ci_low"], pairs["log_odds_ci_high"] = log_odds - Z_95 * se, log_odds + Z_95 * se
    p = hypergeom.sf(a - 1, len(labels), a + c, a + b)  # P(at least `a` carriers in c by chance)
    pairs["association_q"] = false_discovery_control(p) if len(p) else p
    return pairs.reset_index(drop=True)


def _irrelevant_pairs(labels: np.ndarray, irrelevant: pd.Series) -> pd.DataFrame:
    presence = tag_presence(irrelevant)
    presence["label"] = labels[presence["row"].to_numpy()]
    return presence[["label", "tag"]].drop_duplicates()


def reliance(pairs: pd.DataFrame, predictions: Sequence[Predictions]) -> pd.DataFrame:
    """Within- and cross-class reliance on each pair: the strongest evidence among the models whose samples are enough
    to decide it (``MIN_SIDE``; all of them when none is), its p-value multiplied by their number; ``decidable``: some
    model's samples are enough."""
    masks = [_has_tag(model.tags.reset_index(drop=True), set(pairs["tag"])) for model in predictions]
    rows = []
    for label, tag in zip(pairs["label"], pairs["tag"]):
        per_model = [_pair_reliance(int(label), model.labels, has.get(tag, np.zeros(len(model.labels), bool)),
                                    model.log_probs) for model, has in zip(predictions, masks)]
        # Only the sets with the images to decide compete (chosen by counts alone, so Bonferroni over them holds)
        thin = [too_few_to_decide(row) for row in per_model]
        decisive = [i for i, too_few in enumerate(thin) if not too_few] or list(range(len(per_model)))
        best = min(decisive, key=lambda i: np.inf if np.isnan(per_model[i]["reliance_p"])
                   else per_model[i]["reliance_p"])
        p_value = float(np.minimum(1.0, per_model[best]["reliance_p"] * len(decisive)))  # NaN (untestable) stays NaN
        rows.append({**per_model[best], "reliance_p": p_value, "model": predictions[best].name,
                     "decidable": not all(thin)})
    return pd.DataFrame(rows, index=pairs.index, columns=RELIANCE_COLUMNS)


RELIANCE_COLUMNS = ["within_auc", "within_n_with", "within_n_without", "cross_auc", "cross_n_with", "cross_n_without",
                    "reliance_p", "score", "model", "decidable"]


def too_few_to_decide(row: Mapping) -> bool:
    """Whether a pair's reliance rests on too few images to decide it: fewer than ``MIN_SIDE`` on the smaller side
    within the class and fewer than ``MIN_CROSS_SUPPORT`` images of other classes with the tag."""
    return min(row["within_n_with"], row["within_n_without"]) < MIN_SIDE and row["cross_n_with"] < MIN_CROSS_SUPPORT


def _has_tag(tags: pd.Series, wanted: set[str]) -> dict[str, np.ndarray]:
    presence = tag_presence(tags)
    presence = presence[presence["tag"].isin(wanted)]
    out = {}
    for tag, rows in presence.groupby("tag")["row"]:
        mask = np.zeros(len(tags), bool)
        mask[rows.to_numpy()] = True
        out[tag] = mask
    return out


def _pair_reliance(label: int, labels: np.ndarray, has: np.ndarray, log_probs: np.ndarray) -> dict:
    score = log_probs[:, label]
    own = labels == label
    within = _one_sided(score[own & has], score[own & ~has])
    centred = score - _class_medians(score, labels)
    cross = _one_sided(centred[~own & has], centred[~own & ~has])
    n_cross = int((~own & has).sum())
    # a few images of other classes cannot show a shortcut, alone or beside the class's (chosen by counts alone)
    parts = [part for part in (within, cross if n_cross >= MIN_CROSS_SUPPORT else None) if part is not None]
    strongest = min(parts, key=lambda part: part[1], default=None)
    p = np.nan if strongest is None else min(1.0, strongest[1] * len(parts))
    effect = np.nan if strongest is None else 2 * strongest[0] - 1
    return {"within_auc": np.nan if within is None else within[0], "within_n_with": int((own & has).sum()),
            "within_n_without": int((own & ~has).sum()), "cross_auc": np.nan if cross is None else cross[0],
            "cross_n_with": n_cross, "cross_n_without": int((~own & ~has).sum()),
            "reliance_p": float(p), "score": effect}


def _class_medians(score: np.ndarray, labels: np.ndarray) -> np.ndarray:
    medians = pd.Series(score).groupby(labels).transform("median")
    return medians.to_numpy()


def _one_sided(with_tag: np.ndarray, without_tag: np.ndarray) -> tuple[float, float] | None:
    """(AUC, one-sided p) that ``with_tag`` scores exceed ``without_tag`` scores; None when a side is empty."""
    if len(with_tag) == 0 or len(without_tag) == 0:
        return None
    test = mannwhitneyu(with_tag, without_tag, alternative="greater")
    return float(test.statistic / (len(with_tag) * len(without_tag))), float(test.pvalue)


def find_shortcuts(
    train_labels: np.ndarray, train_tags: pd.Series, train_irrelevant: pd.Series,
    predictions: Sequence[Predictions], class_names: Sequence[str], *, min_support: int,
) -> pd.DataFrame:
    """Every screened (class, tag) pair with its evidence; ``biased`` marks B' (see the module docstring).
    ``predictions``: the reference's on the validation split, and any other model's on samples it never trained on
    (``model`` names the one whose evidence a pair took)."""
    pairs = association(np.asarray(train_labels), train_tags, train_irrelevant, len(class_names), min_support)
    screened = pairs[is_associated(pairs)]
    evidence = reliance(screened, predictions)
    pairs = pairs.join(evidence)
    tested = pairs["reliance_p"].notna()
    pairs["reliance_q"] = np.nan
    if tested.any():
        pairs.loc[tested, "reliance_q"] = false_discovery_control(pairs.loc[tested, "reliance_p"].to_numpy())
    pairs["decidable"] = pairs["decidable"].astype("boolean").fillna(False).astype(bool)  # untested: not decided
    pairs["biased"] = (pairs["reliance_q"] <= MAX_Q_VALUE) & (pairs["score"] > 0)
    upper = cross_auc_upper(pairs)
    pairs["reason"] = [_reason(row, carries, bound, no_images) for row, carries, bound, no_images
                       in zip(pairs.itertuples(), carries_over(pairs, upper), upper, unmeasured(pairs))]
    pairs["class"] = [class_names[label] for label in pairs["label"]]
    pairs = pairs.sort_values(["label", "biased", "score", "log_odds", "tag"],
                              ascending=[True, False, False, False, True], na_position="last")
    pairs["rank"] = pairs.groupby("label").cumcount() + 1
    pairs["rule"] = SHORTCUT
    return pairs.reindex(columns=SHORTCUT_COLUMNS).reset_index(drop=True)


def as_flag(values: pd.Series | bool) -> pd.Series | bool:
    """A boolean column, also as read back from CSV ("True"/"False"); a scalar (a column older tables lack) as is."""
    return values if isinstance(values, bool) else values.astype(str).str.lower() == "true"


def is_undecided(evidence: pd.DataFrame) -> pd.Series:
    """The associated pairs neither in B' nor decidable on the samples measured (also as read back from CSV)."""
    decidable = as_flag(evidence["decidable"]) if "decidable" in evidence else True
    return is_associated(evidence) & ~as_flag(evidence["biased"]) & ~pd.Series(decidable, index=evidence.index)


def rests_on_few(evidence: pd.DataFrame) -> pd.Series:
    """The pairs in B' that no model's samples were enough to decide (:func:`too_few_to_decide` for each), shown on
    those few images alone (also as read back from CSV; a table without ``decidable`` tells nothing)."""
    if "decidable" not in evidence:
        return pd.Series(False, index=evidence.index)
    return as_flag(evidence["biased"]) & ~as_flag(evidence["decidable"])


def carries_over(evidence: pd.DataFrame, upper: pd.Series | None = None) -> pd.Series:
    """The pairs whose reliance is not shown confined to the class's own images: too few other-class images with the
    tag to tell, or a cross AUC whose one-sided 95% upper bound reaches ``MIN_CROSS_AUC`` (also as read back from CSV;
    a table without the cross counts, from before they were kept, tells nothing); ``upper``: the pairs'
    :func:`cross_auc_upper`, where already computed."""
    if not {"cross_auc", "cross_n_with", "cross_n_without"} <= set(evidence.columns):
        return pd.Series(True, index=evidence.index)
    with_tag = pd.to_numeric(evidence["cross_n_with"], errors="coerce").fillna(0)
    upper = cross_auc_upper(evidence) if upper is None else upper  # NaN: every other-class image carries the tag
    return (with_tag < MIN_CROSS_SUPPORT) | upper.isna() | (upper >= MIN_CROSS_AUC)


def cross_auc_upper(evidence: pd.DataFrame) -> pd.Series:
    """The one-sided 95% upper bound of each pair's cross AUC (NaN where a side is empty)."""
    n_with, n_without = (pd.to_numeric(evidence[c], errors="coerce") for c in ("cross_n_with", "cross_n_without"))
    se = np.sqrt((n_with + n_without + 1) / (12 * n_with * n_without))
    return pd.to_numeric(evidence["cross_auc"], errors="coerce") + Z_95_ONE_SIDED * se


def is_associated(evidence: pd.DataFrame) -> pd.Series:
    """The pairs whose tag goes with the class strongly enough to be a shortcut (association q and effect size)."""
    q = pd.to_numeric(evidence["association_q"], errors="coerce")
    low = pd.to_numeric(evidence["log_odds_ci_low"], errors="coerce")
    return (q <= MAX_Q_VALUE) & (low >= np.log(MIN_ODDS_RATIO))


def unmeasured(evidence: pd.DataFrame) -> pd.Series:
    """The pairs no image carrying the tag (of the class or of other classes) could measure reliance on: no p-value
    and no such image (also as read back from CSV; a table from before the counts were kept counts none)."""
    counts = [pd.to_numeric(evidence[c], errors="coerce").fillna(0) for c in ("within_n_with", "cross_n_with")
              if c in evidence]
    seen = sum(counts) > 0 if counts else pd.Series(False, index=evidence.index)
    return pd.to_numeric(evidence["reliance_p"], errors="coerce").isna() & ~seen


def _reason(row, carries: bool, cross_upper: float, no_images: bool) -> str:
    if row.association_q > MAX_Q_VALUE or row.log_odds_ci_low <= 0:
        return f"not more frequent in the class than elsewhere (association q {row.association_q:.2g})"
    if row.log_odds_ci_low < np.log(MIN_ODDS_RATIO):
        return (f"more frequent in the class, but weakly (odds ratio at least {np.exp(row.log_odds_ci_low):.1f}, "
                f"a shortcut needs {MIN_ODDS_RATIO})")
    if no_images:
        return "no validation sample to measure the reference's reliance (with and without the tag)"
    if not row.biased and not row.decidable:
        return (f"cannot decide: too few images to measure the reference's reliance ({row.within_n_with:.0f} of the "
                f"class with it against {row.within_n_without:.0f} without, {row.cross_n_with:.0f} of other classes "
                f"with it; {MIN_SIDE} on a side are needed): treat it as a lead and collect more images")
    if not row.biased:
        return f"the reference does not lean on it (reliance q {row.reliance_q:.2g}, effect {row.score:+.2f})"
    found = f"associated (log odds {row.log_odds:.1f}) and relied on (effect {row.score:+.2f}, q {row.reliance_q:.2g})"
    if carries:
        return found
    return (f"{found} within the class only: other classes' images with it are pulled towards the class less than by "
            f"a cue used everywhere (cross AUC {row.cross_auc:.2f} on {row.cross_n_with:.0f} images, at most "
            f"{cross_upper:.2f} at its one-sided 95% bound, under {MIN_CROSS_AUC}): a co-object used beside the "
            "object, or a part of the object the judge called irrelevant; check its relevance decision")
