"""Persistent judge decisions and the one function that turns (class, tags) into a relevance table.

A decision is keyed by (judge id incl. model, prompt version, class, tag): a tag is judged once per class, ever,
unless the judge's prompt version changes. The store is one SQLite file in WAL mode, safe for concurrent runs.
"""

from __future__ import annotations

import random
import sqlite3
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential

from mavias.core.judging.base import BATCH_SIZE, ReadsClassSet, RelevanceJudge, batches
from mavias.core.judging.guarded import decide_batch
from mavias.core.judging.names import CLASS_NAME_SOURCE
from mavias.core.judging.review import REVIEW_SOURCE, ReviewedDecisions
from mavias.core.relevance import RELEVANCE_COLUMNS, names_class, validate_relevance
from mavias.errors import UserError

SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    judge_id TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    class TEXT NOT NULL,
    tag TEXT NOT NULL,
    relevant INTEGER NOT NULL,
    decided_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (judge_id, prompt_version, class, tag)
)
"""
INSERT = "INSERT OR REPLACE INTO decisions (judge_id, prompt_version, class, tag, relevant) VALUES (?, ?, ?, ?, ?)"
# SQLite's words for a file that is not a database, a folder, or a place this user cannot write
NOT_A_CACHE = ("file is not a database", "unable to open database file", "readonly database")
LOOKUP_CHUNK = 500  # stays far below SQLite's limit on query parameters


def _unusable(path: str | Path | None, error: sqlite3.DatabaseError) -> Exception:
    """The user's mistake when ``path`` is not a cache this user can use; else ``error`` itself (locked past the
    retries, an I/O error: not the user's file)."""
    if path is None or not any(words in str(error) for words in NOT_A_CACHE):
        return error
    return UserError(f"judge cache {path} cannot be used ({error})",
                     hint="pass --cache a new file in a folder you can write (or --no-cache); the cache is a SQLite "
                          "file that mavias creates")


class DecisionCache:
    """Judge decisions on disk (or in memory when ``path`` is None)."""

    def __init__(self, path: str | Path | None = None):
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(path) if path is not None else ":memory:", timeout=60)
        except sqlite3.DatabaseError as error:
            raise _unusable(path, error) from None
        try:
            self._initialise(wal=path is not None)
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise _unusable(path, error) from None

    @retry(
        retry=retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError) and "locked" in str(e)),
        wait=wait_exponential(multiplier=0.05, max=2),
        stop=stop_after_delay(60),
        reraise=True,
    )
    def _initialise(self, *, wal: bool) -> None:
        # Switching to WAL takes an exclusive lock and SQLite does not wait for it (no busy handler), so
        # processes opening a new cache file together can see "database is locked": retry with backoff.
        if wal:
            self._db.execute("PRAGMA journal_mode=WAL")
        with self._db:
            self._db.execute(SCHEMA)

    def lookup(self, judge: RelevanceJudge, class_name: str, tags: list[str]) -> dict[str, bool]:
        found: dict[str, bool] = {}
        for chunk in batches(tags, LOOKUP_CHUNK):
            marks = ",".join("?" * len(chunk))
            query = (
                "SELECT tag, relevant FROM decisions WHERE judge_id = ? AND prompt_version = ? AND class = ? "
                f"AND tag IN ({marks})"
            )
            with closing(self._db.execute(query, [judge.judge_id, judge.prompt_version, class_name, *chunk])) as rows:
                found.update((tag, bool(relevant)) for tag, relevant in rows)
        return found

    def store(self, judge: RelevanceJudge, class_name: str, decisions: Mapping[str, bool]) -> None:
        rows = [(judge.judge_id, judge.prompt_version, class_name, tag, int(v)) for tag, v in decisions.items()]
        with self._db:  # one transaction: a batch is stored whole or not at all
            self._db.executemany(INSERT, rows)

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> DecisionCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class DecisionTally:
    """Per class, how many decisions each source made (:data:`~mavias.core.judging.guarded.DecisionSource`) and how many
    batches the configured judge answered."""

    sources: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    calls: Counter[str] = field(default_factory=Counter)

    def total(self, source: str) -> int:
        return sum(counts[source] for counts in self.sources.values())

    def by_class(self) -> dict[str, dict[str, int]]:
        return {name: {source: n for source, n in sorted(counts.items()) if n}
                for name, counts in sorted(self.sources.items())}


def _shuffled(tags: list[str], class_name: str) -> list[str]:
    """``tags`` in an order fixed by the class, so batches mix the vocabulary and a rerun asks the same batches."""
    order = list(tags)
    random.Random(zlib.crc32(class_name.encode())).shuffle(order)
    return order


def decide(
    judge: RelevanceJudge,
    class_name: str,
    tags: Iterable[str],
    cache: DecisionCache | None = None,
    review: ReviewedDecisions | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[int], None] | None = None,
    tally: DecisionTally | None = None,
) -> pd.DataFrame:
    """The relevance table of one class: reviewed verdicts, else the class's own name relevant
    (:mod:`~mavias.core.judging.names`), else cached decisions, else the judge's.

    Only tags without a reviewed or cached decision reach the judge, in batches of ``batch_size`` (shuffled by a
    seed of the class); each batch is cached under the judge that decided it as soon as it is decided, so an
    interrupted run loses at most one batch. ``on_batch`` is called with the size of every judged batch (for
    progress bars); ``tally`` counts who decided what.
    """
    tally = tally if tally is not None else DecisionTally()
    unique = sorted({tag.strip() for tag in tags if tag and tag.strip()})
    reviewed = review.verdicts(class_name, unique) if review is not None else {}
    named = [tag for tag in unique if tag not in reviewed and names_class(tag, class_name)]
    to_decide = [tag for tag in unique if tag not in reviewed and tag not in named]
    decided = cache.lookup(judge, class_name, to_decide) if cache is not None else {}
    deciders = dict.fromkeys(decided, judge.judge_id)
    judge.stats.cache_hits += len(decided)
    tally.sources[class_name].update({"cache": len(decided), "review": len(reviewed), "name": len(named)})
    for batch in batches(_shuffled([tag for tag in to_decide if tag not in decided], class_name), batch_size):
        parts = decide_batch(judge, class_name, batch)
        tally.calls[class_name] += any(part.source == "judge" for part in parts)
        for part in parts:
            verdicts = {tag: tag in part.relevant for tag in part.tags}
            if cache is not None and part.cache:
                cache.store(part.judge, class_name, verdicts)
            decided.update(verdicts)
            deciders.update(dict.fromkeys(part.tags, part.judge.judge_id))
            tally.sources[class_name][part.source] += len(part.tags)
        if on_batch:
            on_batch(len(batch))
    rows = [(class_name, tag, decided[tag], deciders[tag]) for tag in to_decide]
    rows += [(class_name, tag, verdict, REVIEW_SOURCE) for tag, verdict in reviewed.items()]
    rows += [(class_name, tag, True, CLASS_NAME_SOURCE) for tag in named]
    table = pd.DataFrame(rows, columns=RELEVANCE_COLUMNS).sort_values("tag", kind="stable")
    return validate_relevance(table)


def decide_all(
    judge: RelevanceJudge,
    tags_by_class: Mapping[str, Iterable[str]],
    cache: DecisionCache | None = None,
    review: ReviewedDecisions | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[int], None] | None = None,
    tally: DecisionTally | None = None,
    classes: Iterable[str] = (),
) -> pd.DataFrame:
    """:func:`decide` for every class, in sorted class order, as one relevance table; a judge that reads classes
    together is first given them and ``classes`` (the dataset's others, e.g. of earlier partitions)."""
    if isinstance(judge, ReadsClassSet):
        judge.read_classes(sorted({*tags_by_class, *classes}))
    tables = [
        decide(judge, name, tags_by_class[name], cache, review, batch_size=batch_size, on_batch=on_batch, tally=tally)
        for name in sorted(tags_by_class)
    ]
    if not tables:
        return validate_relevance(pd.DataFrame(columns=RELEVANCE_COLUMNS))
    return validate_relevance(pd.concat(tables, ignore_index=True))
