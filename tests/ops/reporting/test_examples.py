"""Example images under each shortcut: which images a strip shows, their size, and what an unreadable file does."""

from __future__ import annotations

import io
from html import unescape
from pathlib import Path

import pandas as pd
from PIL import Image

from mavias.ops.nightly.config import NightlyConfig
from mavias.ops.nightly.report_context import _trust, validation_examples
from mavias.ops.reporting.examples import GAP, PER_SIDE, SIDE_GAP, THUMBNAIL, example_images, shortcut_examples
from mavias.ops.reporting.history import TOP_K
from mavias.ops.reporting.plots import render_plots
from mavias.ops.reporting.render import render_email, render_report
from mavias.storage.s3 import S3Settings
from tests.ops.reporting.test_report import fake_context, parse

COLOURS = {"red": (200, 30, 30), "blue": (30, 30, 200), "green": (30, 200, 30)}


def image(path: Path, colour: str, size: tuple[int, int] = (32, 32)) -> Path:
    Image.new("RGB", size, COLOURS[colour]).save(path)
    return path


def decode(png: bytes) -> Image.Image:
    picture = Image.open(io.BytesIO(png))
    picture.load()
    return picture


def biased(*pairs: tuple[str, str]) -> pd.DataFrame:
    rows = [{"class": name, "tag": tag, "rank": rank} for name, tags in pd.DataFrame(pairs).groupby(0)[1]
            for rank, tag in enumerate(tags, start=1)]
    return pd.DataFrame(rows)


def test_a_strip_shows_the_class_images_with_the_tag_then_other_classes_images(tmp_path):
    paths, labels, tags = [], [], []
    for i in range(6):  # six cats on red, only four shown; two dogs on red; dogs on blue never shown for 'red'
        paths.append(image(tmp_path / f"cat{i}.png", "red")), labels.append("cat"), tags.append(["red", "cat"])
    for i, colour in enumerate(["red", "red", "blue", "blue"]):
        paths.append(image(tmp_path / f"dog{i}.png", colour)), labels.append("dog"), tags.append([colour])
    paths.append(image(tmp_path / "cat-green.png", "green")), labels.append("cat"), tags.append(["green"])

    example = shortcut_examples(biased(("cat", "red")), labels, tags, paths)["cat"]["red"]

    assert (example.in_class, example.others) == (PER_SIDE, 2)
    strip = decode(example.png)
    starts = [i * (THUMBNAIL + GAP) for i in range(PER_SIDE)]
    starts += [starts[-1] + THUMBNAIL + SIDE_GAP + i * (THUMBNAIL + GAP) for i in range(2)]
    assert strip.size == (starts[-1] + THUMBNAIL, THUMBNAIL)
    for x in starts:  # every thumbnail is a red image, enlarged without smoothing
        assert strip.getpixel((x, 0)) == strip.getpixel((x + THUMBNAIL - 1, THUMBNAIL - 1)) == COLOURS["red"]
    assert strip.getpixel((starts[PER_SIDE] - 1, 0)) == (255, 255, 255)  # the gap between the two sides


def test_unreadable_images_are_left_out_and_a_shortcut_without_images_has_none(tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    paths = [broken, image(tmp_path / "ok.png", "blue"), tmp_path / "missing.png"]
    example = shortcut_examples(biased(("cat", "blue")), ["cat", "cat", "cat"], [["blue"]] * 3, paths)["cat"]["blue"]
    assert (example.in_class, example.others) == (1, 0)
    assert decode(example.png).size == (THUMBNAIL, THUMBNAIL)
    assert shortcut_examples(biased(("cat", "blue")), ["cat"], [["blue"]], [broken]) == {}


def test_large_images_are_shrunk_to_fit_and_only_the_shortcuts_shown_get_examples(tmp_path):
    big = image(tmp_path / "big.png", "green", size=(900, 300))
    tags = [f"t{k}" for k in range(TOP_K + 2)]
    ranked = biased(*[("cat", t) for t in tags]).sample(frac=1, random_state=0)  # rows in no particular order
    found = shortcut_examples(ranked, ["cat"], [tags], [big])
    assert sorted(found["cat"]) == sorted(tags[:TOP_K])  # the top ranks
    strip = decode(found["cat"]["t0"].png)
    assert strip.size == (THUMBNAIL, THUMBNAIL)
    assert strip.getpixel((THUMBNAIL // 2, THUMBNAIL // 2)) == COLOURS["green"]
    assert strip.getpixel((THUMBNAIL // 2, 0)) == (255, 255, 255)  # padded, not stretched
    assert len(example_images(found)) == 1  # the same images are one image


def test_past_the_byte_budget_each_class_first_shortcuts_keep_their_images(tmp_path):
    paths = [image(tmp_path / f"{name}.png", colour) for name, colour in (("a", "red"), ("b", "blue"), ("c", "green"))]
    labels, tags = ["cat", "dog", "dog"], [["x", "y"], ["u"], ["v"]]
    ranked = biased(("cat", "x"), ("cat", "y"), ("dog", "u"), ("dog", "v"))
    one = len(shortcut_examples(ranked, labels, tags, paths)["cat"]["x"].png)
    found = shortcut_examples(ranked, labels, tags, paths, max_bytes=2 * one + one // 2)
    assert {name: sorted(by_tag) for name, by_tag in found.items()} == {"cat": ["x", "y"], "dog": ["u"]}  # y: x's


def test_the_report_and_the_email_show_each_strip_once_under_its_shortcut(tmp_path):
    context = fake_context()
    first, second = context.biased_tags.query("`class` == 'bird'").sort_values("rank")["tag"].iloc[:2]
    paths = [image(tmp_path / "a.png", "red"), image(tmp_path / "b.png", "blue")]
    strips = shortcut_examples(biased(("bird", first), ("bird", second)), ["bird", "dog"],
                               [[first, second], [first, second]], paths)
    context = context.model_copy(update={"shortcut_examples": strips})

    html = render_report(context)
    assert len(parse(html).images) == 2 + 1  # the two plots, then the strip the two tags share
    text = " ".join(unescape(html).split())
    assert f'alt="validation images tagged {first}"' in text
    assert "carrying it: 1 of bird, then 1 of other classes" in text
    assert f"{second}</strong><br><span" in text and f"the same images as {first}" in text
    assert len(parse(render_report(context, {})).images) == 1  # plots left out, the strip embedded all the same
    email = render_email(context)
    assert set(email.images.values()) == set(example_images(strips).values()) | set(render_plots(context).values())
    assert all(f"cid:{cid}" in email.html for cid in email.images)


def test_a_night_takes_its_examples_from_the_validation_split_of_its_dataset(tmp_path):
    folder = tmp_path / "dataset"
    folder.mkdir()
    rows = [("v1", "cat", "val", "red"), ("v2", "dog", "val", "red"), ("t1", "cat", "train", "red")]
    manifest = pd.DataFrame([{"sample_id": sid, "label": label, "split": split,
                              "uri": str(image(folder / f"{sid}.png", colour))} for sid, label, split, colour in rows])
    manifest.to_parquet(folder / "manifest.parquet")
    pd.DataFrame({"sample_id": ["v1", "v2", "t1"], "tag": ["red"] * 3}).to_parquet(folder / "tags.parquet")

    example = validation_examples({"dataset": {"dir": str(tmp_path)}}, biased(("cat", "red")))["cat"]["red"]
    assert (example.in_class, example.others) == (1, 1)  # v1 and v2: t1 trained
    assert validation_examples({}, biased(("cat", "red"))) == {}  # no dataset tonight


def test_a_night_counts_and_shows_only_the_images_that_were_not_quarantined(tmp_path):
    folder = tmp_path / "dataset"
    folder.mkdir()
    rows = [("v1", "cat", "val", "red"), ("v2", "dog", "val", "red"), ("t1", "cat", "train", "red"),
            ("t2", "dog", "train", "blue")]
    manifest = pd.DataFrame([{"sample_id": sid, "label": label, "split": split,
                              "uri": str(image(folder / f"{sid}.png", colour))} for sid, label, split, colour in rows])
    manifest = pd.concat([manifest, pd.DataFrame([{"sample_id": sid, "label": "cat", "split": split, "uri": "gone.png"}
                                                  for sid, split in (("q1", "val"), ("q2", "train"), ("q3", "train"))])])
    manifest.to_parquet(folder / "manifest.parquet")
    pd.DataFrame({"sample_id": ["v1", "v2", "t1", "t2"], "tag": ["red", "red", "red", "blue"]}).to_parquet(
        folder / "tags.parquet")
    pd.DataFrame({"class": ["cat", "dog"], "tag": ["red", "blue"], "relevant": [False, True],
                  "source": ["judge", "judge"]}).to_parquet(folder / "relevance.parquet")
    pd.DataFrame({"sample_id": ["q1", "q2", "q3"], "uri": ["gone.png"] * 3, "reason": ["missing"] * 3}).to_csv(
        folder / "quarantine.csv", index=False)
    night = {"dataset": {"dir": str(tmp_path)}, "reference": {"dir": str(tmp_path / "reference")}}

    example = validation_examples(night, biased(("cat", "red")))["cat"]["red"]
    assert (example.in_class, example.others) == (1, 1)  # v1 and v2; q1 held back
    cfg = NightlyConfig(model_name="m", s3=S3Settings(bucket="b"), workspace=tmp_path / "ws")
    shares = [line.split(" of the training images")[0] for line in _trust(cfg, night) if "no irrelevant tag" in line]
    assert shares == ["50%"]  # t2 of t1 and t2: q2 and q3, held back, have no tags and did not train
