"""The audit's steps, each on the library's own stage functions: import (and validate), discover (tag, judge,
encode), the ERM reference and its biased tags B', MAVias, the evaluation with the quality gates, the ONNX export.
Each returns the path it wrote; :class:`Audit` carries what later steps need."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mavias.core.datasets.base import check_out_dir, write_import
from mavias.core.datasets.detect import import_path
from mavias.core.datasets.sidecar import attach_tags
from mavias.core.discovery import DiscoveryCounts, Workspace, discover_partition
from mavias.core.encode import make_encoder
from mavias.core.judging.factory import make_judge
from mavias.core.judging.review import ReviewedDecisions, load_review, tags_of_classes
from mavias.core.manifest import DatasetInfo, load_manifest, read_dataset_info, small_class_warnings
from mavias.core.manifest.checks import evaluation_split, require_evaluable, require_trainable
from mavias.core.protocol import (
    Reference,
    empty_reason,
    evaluate_checkpoint,
    train_method,
    train_reference,
    write_run_evaluation,
)
from mavias.core.relevance import load_relevance
from mavias.core.tagging.base import Tagger, random_weights, read_tags, tagging_warnings
from mavias.core.tagging.factory import make_tagger
from mavias.core.train.config import TrainConfig, load_config
from mavias.core.train.prepare import PreparedData, prepare_image_data
from mavias.core.train.trainer import TrainResult
from mavias.errors import UserError
from mavias.ops.audit.options import PARTITION, AuditOptions, AuditPaths, AuditState
from mavias.ops.export.version import export_checkpoint
from mavias.ops.gates import DEFAULT_GATES_PATH, GateReport, evaluate_gates, load_gate_config
from mavias.ops.validation.partition import validate_manifest_file
from mavias.utils.atomic import write_json

RANDOM_TAGS_REFUSED = ("tagging with random weights (--pretrained none) makes tags that are noise, and an audit built "
                       "on them finds nothing real: bring your own tags (--tags tags.csv), use pretrained weights "
                       "(--weights-dir DIR or --allow-download), or pass --allow-random-tags to run it anyway")


@dataclass
class Audit:
    options: AuditOptions
    paths: AuditPaths
    state: AuditState
    config: TrainConfig
    review: ReviewedDecisions | None = None  # read once, before any work
    counts: DiscoveryCounts | None = None
    data: PreparedData | None = None
    reference: Reference | None = None
    candidate: TrainResult | None = None
    evaluations: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> evaluate_checkpoint result
    gates: GateReport | None = None
    card: dict[str, Any] | None = None

    @property
    def workspace(self) -> Workspace:
        return Workspace(self.paths.workspace)

    @property
    def tags_are_noise(self) -> bool:
        return bool(self.state.document.get("tags_are_noise"))

    def warnings(self) -> list[str]:
        """Every step's warnings so far, in step order."""
        return [w for record in self.state.document["done"].values() for w in record.get("warnings", [])]


def begin(options: AuditOptions) -> Audit:
    """Check what can be checked before any work, and open (or resume) the audit folder."""
    if not options.path.exists():
        raise UserError(f"{options.path} does not exist; pass a folder of images (one sub-folder per class), a "
                        "published dataset's folder or a manifest")
    check_out_dir(options.out, options.path if options.path.is_dir() else None)
    folder_without_tags = options.tags is None and options.path.is_dir()  # (a manifest may have a tags column)
    if folder_without_tags and options.tagger.random_weights and not options.allow_random_tags:
        raise UserError(RANDOM_TAGS_REFUSED)
    config = load_config(options.config, preset=options.preset, overrides=options.overrides)
    review = load_review(options.review) if options.review is not None else None  # unreadable: stops here
    load_gate_config(options.gates or DEFAULT_GATES_PATH)  # likewise, not after the trainings
    paths = AuditPaths(options.out)
    state = AuditState(paths, options.inputs())
    state.follow_review(options.review_digest(), paths)
    return Audit(options, paths, state, config, review)


def import_data(audit: Audit) -> Path:
    """The data as a manifest (with the sidecar's tags), validated (Great Expectations) for the report."""
    paths, warnings = audit.paths, []
    if audit.state.done("import") is None:
        result, base = import_path(audit.options.path, audit.options.layout, progress=audit.options.progress)
        if audit.options.tags is not None:
            result, warnings = attach_tags(result, audit.options.tags, base)
        write_import(result, paths.data)
        manifest = load_manifest(paths.manifest, check_files=False)
        require_trainable(manifest, audit.options.path)  # before the tagging and the trainings, not after
        info = read_dataset_info(paths.manifest)
        require_evaluable(manifest, info, audit.options.path)
        _require_gated_groups(audit.options, info)
        validation = validate_manifest_file(paths.manifest, known_classes=set(manifest["label"]))
        write_json(paths.validation, validation.to_dict())
        audit.state.finish("import", {"warnings": warnings + small_class_warnings(manifest)})
    return paths.manifest


def _require_gated_groups(options: AuditOptions, info: DatasetInfo | None) -> None:
    """Gates on the closed-set worst group need the data's group attributes: refused before any training."""
    if options.gates is not None and load_gate_config(options.gates).wg_source == "closed_set" and not (
            info and info.group_attrs):
        raise UserError(f"{options.gates} gates on the closed-set worst group, which needs group attributes, and "
                        f"{options.path} has none", hint="set wg_source: open_set in that file (the label-free worst "
                                                         "group), or audit a dataset whose layout names its groups")


def _tagger(audit: Audit, has_tags: bool) -> Tagger:
    settings = audit.options.tagger
    if not has_tags and settings.random_weights and not audit.options.allow_random_tags:
        raise UserError(RANDOM_TAGS_REFUSED)
    return make_tagger(replace(settings, kind="manifest" if has_tags else "openclip", device=audit.options.device))


def discover(audit: Audit) -> Path:
    """Tag (the data's own tags, else OpenCLIP), judge (a reviewed decision wins) and encode: the relevance
    decisions."""
    relevance = audit.workspace.relevance(PARTITION)
    done = audit.state.done("discover")
    if done is not None:
        audit.counts = DiscoveryCounts(**done["counts"])
        return relevance
    manifest = load_manifest(audit.paths.manifest, check_files=False)
    tagger = _tagger(audit, "tags" in manifest.columns)
    judge = make_judge(audit.options.judge)
    encoder = make_encoder(audit.config.encoder, device=audit.options.device)
    audit.counts = discover_partition(audit.paths.data, audit.paths.workspace, tagger, judge, encoder, name=PARTITION,
                                      review=audit.review, progress=audit.options.progress)
    tags = read_tags(audit.workspace.tags_table(PARTITION))
    warnings = tagging_warnings(tagger, tags, audit.counts.images - audit.counts.images_quarantined)
    if "tags" in manifest.columns and audit.options.tagger.vocabulary is not None:
        warnings.append(f"--vocabulary {audit.options.tagger.vocabulary} was not used: the images' tags come with "
                        "the data (its tags column or sidecar), so no tagger ran")
    if audit.review is not None:
        warnings += audit.review.unmatched(tags_of_classes(load_relevance(relevance), manifest["label"]))
    audit.state.record(tags_are_noise=random_weights(tagger))
    audit.state.finish("discover", {"counts": asdict(audit.counts), "warnings": warnings})
    return relevance


def prepare(audit: Audit) -> PreparedData:
    """The images decoded and embedded, once for both trainings and the evaluation."""
    if audit.data is None:
        encoder = make_encoder(audit.config.encoder, device=audit.options.device)
        dataset = read_dataset_info(audit.paths.manifest)
        audit.data = prepare_image_data(
            audit.paths.manifest, relevance=load_relevance(audit.workspace.relevance(PARTITION)),
            tags_table=read_tags(audit.workspace.tags_table(PARTITION)), encoder=encoder,
            store_dir=audit.workspace.embeddings(encoder.encoder_id), config=audit.config,
            group_attrs=dataset.group_attrs if dataset else None,
            quarantine_csv=audit.paths.data / "quarantine-training.csv", progress=audit.options.progress)
    return audit.data


def reference(audit: Audit) -> Path:
    """The ERM reference and its biased tags B' (``biased_tags.csv``, ``shortcut_evidence.csv`` beside it)."""
    audit.reference = train_reference(prepare(audit), audit.config, audit.paths.reference,
                                      tag_min_support=audit.options.min_support, progress=audit.options.progress)
    return audit.paths.reference


def mavias(audit: Audit) -> Path:
    cfg = audit.config.model_copy(update={"method": "mavias"})
    audit.candidate = train_method(prepare(audit), cfg, audit.paths.mavias, audit.reference,
                                   progress=audit.options.progress)
    return audit.paths.mavias


def candidate_checkpoint(audit: Audit) -> Path:
    return audit.candidate.checkpoint(audit.config.selection)


def evaluate(audit: Audit) -> Path:
    """MAVias and the ERM reference on the test split (or the dataset's first evaluation split), then the gates."""
    data, dataset = prepare(audit), read_dataset_info(audit.paths.manifest)
    split = evaluation_split(data.splits, dataset) or "test"  # the import checked that one exists
    attrs = (dataset.group_attrs if dataset else []) or None
    for role, checkpoint in (("mavias", candidate_checkpoint(audit)), ("reference", audit.reference.checkpoint)):
        result = evaluate_checkpoint(data, checkpoint, audit.reference, split=split, closed_set_attrs=attrs,
                                     dataset=dataset, min_support=audit.options.min_support)
        write_run_evaluation(audit.paths.evaluation(role), result)
        audit.evaluations[role] = result
    config = load_gate_config(audit.options.gates or DEFAULT_GATES_PATH)
    if audit.options.gates is None and config.min_group_support is not None:  # a gates file's own threshold stands
        config = config.model_copy(update={"min_group_support": audit.options.min_support})
    metrics = {role: json.loads((audit.paths.evaluation(role) / "metrics.json").read_text())
               for role in audit.evaluations}
    audit.gates = evaluate_gates(metrics["mavias"], metrics["reference"], None, config)
    write_json(audit.paths.evaluation("mavias") / "gates.json", audit.gates.to_dict())
    return audit.paths.evaluation("mavias")


def export(audit: Audit, name: str, version: str) -> Path:
    """The MAVias main model as verified ONNX with its model card (metrics and gates included)."""
    metrics = json.loads((audit.paths.evaluation("mavias") / "metrics.json").read_text())
    audit.card = export_checkpoint(candidate_checkpoint(audit), audit.paths.model, name=name, version=version,
                                   evaluation=metrics, gates=audit.gates)
    return audit.paths.model


def biased_tags_reason(audit: Audit) -> str | None:
    return empty_reason(audit.reference, prepare(audit), min_support=audit.options.min_support)
