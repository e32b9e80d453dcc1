"""Group metrics over a predictions table (paper §Evaluation Protocol).

A predictions table has at least ``label`` and ``pred`` (int class indices); a row is correct when they are equal.
Groups are given either as the name of a column of the table or as a Series with the table's index; a group's
name is ``str(value)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_SUPPORT = 20
GROUP_SEPARATOR = "|"
ATTRIBUTE_PREFIX = "attr_"
GROUP_TABLE_COLUMNS = ["group", "n", "correct", "accuracy", "train_proportion", "small"]

Groups = str | pd.Series


@dataclass(frozen=True)
class WorstGroup:
    group: str
    accuracy: float
    ci_low: float
    ci_high: float
    n: int
    small: bool


def require_columns(df: pd.DataFrame, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise KeyError(f"missing column(s) {missing}; the table has {list(df.columns)}")


def correctness(pred: pd.DataFrame) -> pd.Series:
    """Boolean Series, True where ``pred == label``."""
    require_columns(pred, ["label", "pred"])
    if pred.empty:
        raise ValueError("the predictions table is empty")
    return (pred["label"] == pred["pred"]).rename("correct")


def accuracy(pred: pd.DataFrame) -> float:
    return float(correctness(pred).mean())


def format_group_key(values: Sequence[object], columns: Sequence[str]) -> str:
    """``"<v0>|<name1>=<v1>|..."``: the first value bare, then ``name=value`` per further column.

    ``name`` is the column name without the manifest's ``attr_`` prefix, values are ``str(value)``;
    e.g. columns ``["class", "attr_bg", "attr_co"]`` and values ``("car", "street", "cow")`` give
    ``"car|bg=street|co=cow"``.
    """
    head, *rest = values
    names = [column.removeprefix(ATTRIBUTE_PREFIX) for column in columns[1:]]
    named = (f"{name}={value}" for name, value in zip(names, rest, strict=True))
    return GROUP_SEPARATOR.join([str(head), *named])


def group_key(df: pd.DataFrame, cols: Sequence[str]) -> pd.Series:
    """Composite group name per row in the :func:`format_group_key` format; missing values raise."""
    cols = list(cols)
    if not cols:
        raise ValueError("group_key needs at least one column")
    require_columns(df, cols)
    if df[cols].isna().any().any():
        raise ValueError(f"missing values in group column(s) {cols}")
    keys = [format_group_key(row, cols) for row in zip(*(df[c] for c in cols))]
    return pd.Series(keys, index=df.index, name="group", dtype=object)


def _group_names(pred: pd.DataFrame, group_col: Groups) -> pd.Series:
    if isinstance(group_col, pd.Series):
        if not group_col.index.equals(pred.index):
            raise ValueError("a group Series must have the same index as the predictions table")
        groups = group_col
    else:
        require_columns(pred, [group_col])
        groups = pred[group_col]
    if groups.isna().any():
        raise ValueError("missing group values")
    return groups.astype(str)


def _normalised_weights(groups: pd.Series, train_proportions: Mapping[str, float]) -> np.ndarray:
    """Training weights of ``groups`` renormalised to sum to 1 over them (proportions or counts both work)."""
    missing = sorted(set(groups) - set(train_proportions))
    if missing:
        raise ValueError(f"no training proportion for group(s) {missing}")
    weights = np.array([float(train_proportions[g]) for g in groups])
    if (weights < 0).any() or weights.sum() <= 0:
        raise ValueError("training proportions must be non-negative with a positive sum over the groups present")
    return weights / weights.sum()


def group_table(
    pred: pd.DataFrame,
    group_col: Groups,
    *,
    train_proportions: Mapping[str, float] | None = None,
    min_support: int = MIN_SUPPORT,
) -> pd.DataFrame:
    """One row per group (sorted by name): n, correct, accuracy, train_proportion, small (= n < min_support).

    ``train_proportion`` is renormalised over the groups present (NaN when no proportions are given); small groups
    are flagged, never dropped.
    """
    frame = pd.DataFrame({"group": _group_names(pred, group_col), "correct": correctness(pred)})
    table = frame.groupby("group", sort=True)["correct"].agg(n="size", correct="sum").reset_index()
    table["correct"] = table["correct"].astype(int)
    table["accuracy"] = table["correct"] / table["n"]
    table["train_proportion"] = (
        np.nan if train_proportions is None else _normalised_weights(table["group"], train_proportions)
    )
    table["small"] = table["n"] < min_support
    return table[GROUP_TABLE_COLUMNS]


def worst_first(table: pd.DataFrame) -> pd.DataFrame:
    """Groups from the least accurate; of groups tied, the largest first (its size says how sure the minimum is),
    then by name."""
    return table.sort_values(["accuracy", "n", "group"], ascending=[True, False, True])


def worst_group(
    pred: pd.DataFrame,
    group_col: Groups,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    min_support: int = MIN_SUPPORT,
    include_small: bool = True,
) -> WorstGroup:
    """Worst-group accuracy (min over groups; the first of :func:`worst_first` names it) with a 95% percentile
    bootstrap interval.

    Each replicate resamples every group within itself (stratified, with replacement) and takes the minimum group
    accuracy. Groups with n < min_support take part in the minimum unless ``include_small=False``; the result
    says whether the worst group is small. The percentile interval of a minimum is biased low when several groups
    are close to the worst one.
    """
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    table = group_table(pred, group_col, min_support=min_support)
    candidates = table if include_small else table[~table["small"]]
    if candidates.empty:
        raise ValueError(f"every group has fewer than min_support={min_support} samples")
    worst = worst_first(candidates).iloc[0]
    # Drawing n_g rows with replacement from a group with accuracy a_g yields Binomial(n_g, a_g) correct rows.
    sizes = candidates["n"].to_numpy()
    rng = np.random.default_rng(seed)
    replicates = rng.binomial(sizes, candidates["accuracy"].to_numpy(), size=(n_boot, len(sizes)))
    ci_low, ci_high = np.percentile((replicates / sizes).min(axis=1), [2.5, 97.5])
    return WorstGroup(
        group=str(worst["group"]),
        accuracy=float(worst["accuracy"]),
        ci_low=float(ci_low),
        ci_high=float(ci_high),
        n=int(worst["n"]),
        small=bool(worst["small"]),
    )


def average_accuracy(
    pred: pd.DataFrame, group_col: Groups, train_proportions: Mapping[str, float] | None = None
) -> dict[str, float | None]:
    """``unweighted``: mean of group accuracies; ``weighted``: weighted by training group proportions renormalised
    over the groups present (Waterbirds convention), None without proportions."""
    table = group_table(pred, group_col, train_proportions=train_proportions)
    weighted = None if train_proportions is None else float((table["accuracy"] * table["train_proportion"]).sum())
    return {"unweighted": float(table["accuracy"].mean()), "weighted": weighted}
