"""From a manifest (+ relevance decisions + a text encoder) to training-ready splits with bias embeddings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from mavias.core.encode import EmbeddingStore, TextEncoder, bias_embeddings
from mavias.core.evaluate.metrics import group_key
from mavias.core.manifest import load_manifest, quarantine_undecodable, resolve_uri
from mavias.core.relevance import irrelevant_tags
from mavias.core.train.config import TrainConfig
from mavias.core.train.data import SplitData, attach_groups, image_split
from mavias.core.train.decoded import DecodedStore
from mavias.core.train.recipe import choose_image_settings
from mavias.core.train.transforms import split_transforms
from mavias.errors import UserError


@dataclass
class PreparedData:
    classes: list[str]
    splits: dict[str, SplitData]
    quarantined: pd.DataFrame
    prompts_encoded: int = 0
    image_notes: dict[str, str] = field(default_factory=dict)  # why the image settings were chosen (unset ones)
    config: TrainConfig | None = None  # the image settings chosen: an image split's transforms come from it

    def __getitem__(self, split: str) -> SplitData:
        if split not in self.splits:
            raise UserError(f"the manifest has no {split!r} split (it has: {', '.join(sorted(self.splits))})",
                            hint="name one of those splits")
        return self.splits[split]


class NoTagsError(UserError, ValueError):
    """Neither a tags table nor a manifest with its own tags."""

    def __init__(self) -> None:
        super().__init__("the manifest has no 'tags' column and no tags table was given: pass the tags that "
                         "`mavias discover` printed (--tags WORKSPACE/tags/PARTITION/tags.parquet), or import the "
                         "images with their tags (mavias data import imagefolder ROOT --tags tags.csv --out DATA)")


def sample_tags(manifest: pd.DataFrame, tags_table: pd.DataFrame | None) -> pd.Series:
    """Tags per sample: from a tagger's tags table when given, else the manifest's own ``tags`` column."""
    if tags_table is None:
        if "tags" not in manifest.columns:
            raise NoTagsError()
        return manifest["tags"]
    grouped = tags_table.groupby("sample_id")["tag"].agg(lambda t: sorted(set(t)))
    if len(grouped) and len(manifest) and not manifest["sample_id"].isin(grouped.index).any():
        raise UserError("no image of the manifest is in the tags table (their sample_ids differ)",
                        hint="pass the tags table written for this manifest's images (`mavias tag` or `mavias "
                        "discover` of this manifest)")
    return manifest["sample_id"].map(grouped).map(lambda t: t if isinstance(t, list) else [])


def prepare_image_data(
    manifest_path: str | Path,
    *,
    relevance: pd.DataFrame,
    encoder: TextEncoder | None,
    store_dir: str | Path | None,
    image_size: int | None = None,
    config: TrainConfig | None = None,
    tags_table: pd.DataFrame | None = None,
    group_attrs: list[str] | None = None,
    quarantine_csv: str | Path | None = None,
    progress: bool = True,
    decoded: DecodedStore | None = None,
) -> PreparedData:
    """Load, quarantine missing or undecodable images (per row, with a reason: the rest is used), derive irrelevant
    tags, embeddings and (optional) true groups.

    Images are preprocessed as ``config`` says (training transform for ``train``, evaluation transform elsewhere);
    without a config, plain Resize + CenterCrop to ``image_size``. With ``decoded``, images decoded before (for any
    dataset) are taken from its files instead of decoded again.
    """
    if config is None:
        if image_size is None:
            raise ValueError("pass the training config or an image_size")
        config = TrainConfig(image_size=image_size)
    manifest_path = Path(manifest_path)
    manifest = load_manifest(manifest_path, check_files=False)
    if tags_table is None and "tags" not in manifest.columns:
        raise NoTagsError()  # before any image is read
    held = decoded.held(resolve_uri(manifest_path.parent, uri) for uri in manifest["uri"]) if decoded else set()
    manifest, quarantined = quarantine_undecodable(manifest, manifest_path.parent, quarantine_csv, held)
    config, image_notes = choose_image_settings(config, manifest, manifest_path.parent)
    transforms = split_transforms(config)
    manifest["sample_tags"] = sample_tags(manifest, tags_table)
    embedded = None
    keep = config.mavias.keep_class_name_tags
    if encoder is None:
        manifest["irrelevant_tags"] = irrelevant_tags(manifest["label"], manifest["sample_tags"], relevance,
                                                      keep_class_names=keep)
    else:
        embedded = bias_embeddings(manifest["label"], manifest["sample_tags"], relevance, encoder,
                                   EmbeddingStore(store_dir), keep_class_names=keep)
        manifest["irrelevant_tags"] = embedded.irrelevant_tags
    classes = sorted(manifest.loc[manifest["split"] == "train", "label"].unique())
    if not classes:
        raise UserError(f"{manifest_path}: no usable training images")
    frames = dict(tuple(manifest.groupby("split", sort=True)))
    splits = {
        name: image_split(frame, manifest_path.parent, classes,
                          transforms.of(name), config.image_size,
                          random=name == "train" and transforms.augmented, plain=transforms.eval, progress=progress,
                          store=decoded)
        for name, frame in frames.items()
    }
    if embedded is not None:
        position = pd.Series(range(len(manifest)), index=manifest.index)
        for name, frame in frames.items():
            splits[name].embeddings = torch.from_numpy(embedded.vectors[position.loc[frame.index].to_numpy()])
    if group_attrs:
        attach_true_groups(splits, group_attrs)
    return PreparedData(classes, splits, quarantined, embedded.encoded if embedded else 0, image_notes, config)


def attach_true_groups(splits: dict[str, SplitData], group_attrs: list[str]) -> None:
    """Groups = (label, *attributes), with one group vocabulary across splits (GroupDRO, closed-set metrics)."""
    for name, split in splits.items():
        if missing := [a for a in group_attrs if a not in split.frame.columns]:
            attrs = sorted(c for c in split.frame.columns if c.startswith("attr_"))
            raise UserError(f"the {name} split has no column(s) {', '.join(missing)} for --group-attrs",
                            hint=f"name attr_* columns the manifest has ({', '.join(attrs) or 'it has none'})")
    names = {s: group_key(split.frame, ["label", *group_attrs]) for s, split in splits.items()}
    vocabulary = sorted(set().union(*(set(n) for n in names.values())))
    for s, split in splits.items():
        attach_groups(split, names[s], vocabulary)
