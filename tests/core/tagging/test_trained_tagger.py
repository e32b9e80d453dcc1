"""The trained tagger learns what it sees, is deterministic per seed, scores itself, and refuses a checkpoint of
another vocabulary with one readable line."""

import pandas as pd
import pytest
import torch

from mavias.core.synthetic.shapes import ShapesConfig, tagging_samples, vocabulary
from mavias.core.tagging.base import TagBatch
from mavias.core.tagging.trained import (
    TaggerCheckpointError,
    TaggerTraining,
    TrainedTagger,
    tag_quality,
    train_tagger,
)

CFG = ShapesConfig(n_classes=3, image_size=24)
SETTINGS = TaggerTraining(image_size=24, width=8, epochs=6)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    images, tags = tagging_samples(CFG, 600, 0)
    out = tmp_path_factory.mktemp("tagger")
    first = train_tagger(images, tags, vocabulary(CFG), SETTINGS, out / "a.pt")
    second = train_tagger(images, tags, vocabulary(CFG), SETTINGS, out / "b.pt")
    return TrainedTagger(first), TrainedTagger(second)


def test_it_learns_colours_from_pixels_better_than_chance(trained):
    tagger, _ = trained
    images, truth = tagging_samples(CFG, 300, 1)
    predicted = [[word for word, _ in scored] for scored in tagger.tag_images(images)]
    quality = tag_quality(predicted, truth, vocabulary(CFG)).set_index("tag")
    colours = quality.loc[["red", "blue", "yellow"]]
    assert (colours["support"] > 50).all()
    assert colours["f1"].mean() > 0.6  # a colour is a third of the images: chance F1 would be about 0.33
    scores = [score for scored in tagger.tag_images(images[:5]) for _, score in scored]
    assert all(SETTINGS.threshold <= score <= 1 for score in scores)


def test_training_is_deterministic_and_the_id_names_the_weights(trained):
    first, second = trained
    assert first.tagger_id == second.tagger_id
    images, _ = tagging_samples(CFG, 4, 2)
    pixels = torch.stack([first.preprocess(image) for image in images])
    batch = TagBatch(pd.DataFrame({"sample_id": list("abcd")}), pixels)
    assert first.tag(batch) == first.tag_images(images)


def test_quality_counts_precision_and_recall_per_tag():
    table = tag_quality([["a", "b"], ["a"], []], [["a"], ["a", "c"], ["c"]], ["a", "b", "c"]).set_index("tag")
    assert table.loc["a", ["support", "precision", "recall", "f1"]].tolist() == [2, 1.0, 1.0, 1.0]
    assert table.loc["b", "precision"] == 0.0 and table.loc["b", "support"] == 0
    assert table.loc["c", "recall"] == 0.0 and pd.isna(table.loc["c", "precision"])


def test_a_checkpoint_of_another_vocabulary_or_no_checkpoint_is_one_line(tmp_path):
    other = ["circle", "square", "zebra"]
    checkpoint = tmp_path / "t.pt"
    images, tags = tagging_samples(CFG, 20, 0)
    train_tagger(images, tags, vocabulary(CFG), SETTINGS, checkpoint)
    with pytest.raises(TaggerCheckpointError, match="tags another vocabulary .*zebra"):
        TrainedTagger(checkpoint, vocabulary=other)
    fewer = vocabulary(CFG)[1:]  # the checkpoint has a word more: named too, not "it lacks []"
    with pytest.raises(TaggerCheckpointError, match=rf"lacks \[\], and has \[{vocabulary(CFG)[0]!r}\] besides"):
        TrainedTagger(checkpoint, vocabulary=fewer)
    state = torch.load(checkpoint, weights_only=True)
    torch.save({**state, "settings": {**state["settings"], "renamed_setting": 1}}, tmp_path / "newer.pt")
    with pytest.raises(TaggerCheckpointError, match="another version of the tagger training"):
        TrainedTagger(tmp_path / "newer.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(TaggerCheckpointError, match="cannot be read as a tagger checkpoint"):
        TrainedTagger(tmp_path / "junk.pt")
