import json
import re
from collections import Counter

import pandas as pd
from typer.testing import CliRunner

from mavias.cli import discover as discover_cli
from mavias.core import encode
from mavias.core.discovery import DiscoveryCounts, Workspace, discover_partition
from mavias.core.encode import EmbeddingStore, bias_prompt
from mavias.core.manifest import save_manifest
from mavias.core.relevance import irrelevant_tags, load_relevance, names_class
from mavias.core.tagging import ManifestTagger
from mavias.core.tagging.base import read_tags
from mavias.core.tagging.shards import samples_digest


def _partition(df: pd.DataFrame, folder) -> pd.DataFrame:
    save_manifest(df, folder / "manifest.parquet")
    return df


def _pairs(df: pd.DataFrame) -> set[tuple[str, str]]:
    return {(label, tag) for label, tags in zip(df["label"], df["tags"]) for tag in tags}


def _judged(df: pd.DataFrame) -> set[tuple[str, str]]:
    """The pairs a judge decides: all but a class's own name (relevant by rule)."""
    return {(label, tag) for label, tag in _pairs(df) if not names_class(tag, label)}


def _judged_per_class(df: pd.DataFrame) -> dict[str, int]:
    return dict(Counter(label for label, _ in _judged(df)))


def _prompts(df: pd.DataFrame, relevance: pd.DataFrame) -> set[str]:
    return {bias_prompt(tags) for tags in irrelevant_tags(df["label"], df["tags"], relevance)}


def test_a_partition_costs_only_what_is_new_and_a_rerun_costs_nothing(scenes, offline_judge, minilm_encoder, tmp_path):
    first = _partition(scenes.iloc[:24], tmp_path / "day1")
    second = _partition(scenes.iloc[16:], tmp_path / "day2")  # 8 images seen on day 1, 18 new ones
    ws = tmp_path / "workspace"

    def run(folder) -> DiscoveryCounts:
        return discover_partition(folder, ws, ManifestTagger(), offline_judge, minilm_encoder, num_shards=3, progress=False)

    day1, day2, day2_again = run(tmp_path / "day1"), run(tmp_path / "day2"), run(tmp_path / "day2")

    tables = [load_relevance(ws / "partitions" / day / "relevance.parquet") for day in ("day1", "day2")]
    relevance = pd.concat(tables).drop_duplicates(["class", "tag"])
    new_pairs = _judged(second) - _judged(first)
    assert (day1.images_tagged, day1.images_reused) == (24, 0)
    assert day1.llm_requests_per_class == {label: 1 for label in first["label"].unique()}  # < 100 tags per class
    assert (day1.tags_judged, day1.prompts_encoded) == (len(_judged(first)), len(_prompts(first, relevance)))
    named = {label: {"name": 1} for label in first["label"].unique()}  # each class's images carry its own name
    assert {label: {"name": counts["name"]} for label, counts in day1.decisions_per_class.items()} == named
    assert (day2.images_tagged, day2.images_reused) == (18, 8)
    assert day2.llm_requests_per_class == {label: 1 for label in sorted({label for label, _ in new_pairs})}
    assert day2.tags_judged == len(new_pairs)
    assert day2.prompts_encoded == len(_prompts(second, relevance) - _prompts(first, relevance))
    assert day2.distinct_prompts == len(_prompts(second, relevance))
    cached = {label: {"cache": n, "name": 1} for label, n in _judged_per_class(second).items()}
    assert day2_again == DiscoveryCounts(images=26, images_reused=0, distinct_prompts=day2.distinct_prompts,
                                         decisions_per_class=cached)  # every decision from the cache, none asked
    store = EmbeddingStore(Workspace(ws).embeddings(minilm_encoder.encoder_id))  # what training will find there
    assert len(store) == len(_prompts(first, relevance) | _prompts(second, relevance))


def test_tags_a_delivery_corrects_are_read_again_and_another_partition_s_tags_for_an_image_are_not_reused(
        scenes, offline_judge, minilm_encoder, tmp_path):
    ws = tmp_path / "workspace"

    def tags_of(folder) -> dict[str, set[str]]:
        discover_partition(folder, ws, ManifestTagger(), offline_judge, minilm_encoder, num_shards=3, progress=False)
        table = read_tags(ws / "tags" / folder.name / "tags.parquet")
        return {sid: set(rows) for sid, rows in table.groupby("sample_id")["tag"]}

    day1 = _partition(scenes.iloc[:12], tmp_path / "day1")
    tags_of(tmp_path / "day1")
    corrected = day1.assign(tags=[[*tags, "corrected"] for tags in day1["tags"]])
    _partition(corrected, tmp_path / "day1")  # the same images delivered again under the name, their tags corrected
    assert all("corrected" in tags for tags in tags_of(tmp_path / "day1").values())
    record = json.loads((ws / "partitions" / "day1" / "discovery.json").read_text())
    assert record["samples"] == samples_digest(corrected) != samples_digest(day1)  # a night discovers it again
    other = _partition(day1.assign(tags=[["other"]] * len(day1)), tmp_path / "day2")  # the same images, other tags
    assert tags_of(tmp_path / "day2") == {sid: {"other"} for sid in other["sample_id"]}


def test_cli_prints_the_counts_of_a_rerun(scenes, offline_judge, minilm_encoder, tmp_path, monkeypatch):
    _partition(scenes.iloc[:6], tmp_path / "night")
    monkeypatch.setattr(discover_cli, "make_judge", lambda kind, **_: offline_judge)
    monkeypatch.setattr(encode, "make_encoder", lambda kind, **_: minilm_encoder)  # imported by the command's body
    args = ["--partition", str(tmp_path / "night"), "--workspace", str(tmp_path / "ws"), "--num-shards", "2"]

    outputs = [CliRunner().invoke(discover_cli.app, args) for _ in range(2)]

    assert all(result.exit_code == 0 for result in outputs), outputs[0].output
    counts = [dict(re.findall(r"│ ([a-z_]+)\s+│\s+(\d+) │", result.output)) for result in outputs]
    assert counts[0]["images_tagged"] == "6" and int(counts[0]["llm_requests"]) > 0
    assert (counts[1]["images_tagged"], counts[1]["llm_requests"], counts[1]["prompts_encoded"]) == ("0", "0", "0")


def test_a_partition_of_few_classes_is_read_with_the_workspace_s_other_classes(scenes, minilm_encoder, tmp_path):
    from mavias.core.judging.offline import OfflineJudge

    figures = ["circle", "triangle", "square", "star"]
    _partition(scenes.iloc[:8].assign(label=figures * 2, tags=[["corner"]] * 8), tmp_path / "day1")
    _partition(scenes.iloc[8:10].assign(label="star", tags=[["point"]] * 2), tmp_path / "day2")  # one class alone
    judge, ws = OfflineJudge(encoder=minilm_encoder), tmp_path / "workspace"
    for day in ("day1", "day2"):
        discover_partition(tmp_path / day, ws, ManifestTagger(), judge, minilm_encoder, num_shards=1, progress=False)
    assert Workspace(ws).judged_classes() == set(figures)
    day2 = load_relevance(ws / "partitions" / "day2" / "relevance.parquet")
    assert day2.set_index("tag").loc["point", "relevant"]  # the figure's point, as on day 1; alone, "star" is the sun


def test_a_partition_whose_every_image_is_missing_says_so(scenes, offline_judge, minilm_encoder, tmp_path):
    """Nothing to judge or encode: one readable error, not a crash of the empty embedding store."""
    import pytest

    from mavias.core.discovery import NothingToDiscover
    from mavias.core.encode.openclip import OpenClip
    from mavias.core.tagging.openclip import OpenClipTagger

    tagger = OpenClipTagger(vocabulary=["grass", "sky"], cache_dir=tmp_path / "cache",
                            clip=OpenClip("ViT-S-32", None, device="cpu"))  # it reads the images, unlike the manifest's
    _partition(scenes.iloc[:4].drop(columns="tags").assign(uri=[str(tmp_path / f"gone{i}.png") for i in range(4)]),
               tmp_path / "day1")
    with pytest.raises(NothingToDiscover, match="every one of the 4 image"):
        discover_partition(tmp_path / "day1", tmp_path / "ws", tagger, offline_judge, minilm_encoder, num_shards=1,
                           progress=False)


def test_no_sample_embeds_to_an_empty_matrix_of_the_encoders_width(minilm_encoder, tmp_path):
    embedded = encode.bias_embeddings(pd.Series([], dtype=str), pd.Series([], dtype=object),
                                      pd.DataFrame(columns=["class", "tag", "relevant", "source"]), minilm_encoder,
                                      EmbeddingStore(tmp_path / "store"))
    assert embedded.vectors.shape == (0, minilm_encoder.dim) and embedded.encoded == 0
