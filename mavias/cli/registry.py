"""``mavias registry``: list versions, show production and history, promote, roll back, repair the pointer, and
point a KServe InferenceService at a version.

S3 settings come from ``--config`` (YAML) and ``MAVIAS_S3_*`` environment variables; credentials from those or
the standard AWS chain. Kubernetes access from ``--kubeconfig``, ``$KUBECONFIG``, ~/.kube/config or the pod's
service account.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from botocore.exceptions import BotoCoreError, ClientError

from mavias.errors import UserError
from mavias.ops.registry import ModelRegistry, PointerRecord, PromotionConflict, RegistryError
from mavias.ops.registry.kubernetes import (
    CONTAINER,
    InferenceServiceError,
    InferenceServiceRef,
    point_inference_service,
)
from mavias.storage.mistakes import storage_user_error
from mavias.storage.s3 import load_settings, make_s3_client, s3_uri

app = typer.Typer(help="Model registry: immutable versions, atomic production pointer, history, rollback.")

NameOption = Annotated[str, typer.Option("--name", "-n", envvar="MAVIAS_MODEL_NAME", help="Model name.")]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", envvar="MAVIAS_CONFIG", exists=True, dir_okay=False, help="YAML with S3 settings."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the history as JSON.")]
InferenceServiceOption = Annotated[str | None, typer.Option(
    "--inference-service", "-i", envvar="MAVIAS_INFERENCE_SERVICE", metavar="NAMESPACE/NAME",
    help="KServe InferenceService to point at the version (its predictor container's STORAGE_URI).")]
ContainerOption = Annotated[str, typer.Option("--container", help="The InferenceService's predictor container.")]
KubeconfigOption = Annotated[Path | None, typer.Option(
    "--kubeconfig", envvar="KUBECONFIG", help="Default: ~/.kube/config, else the pod's service account.")]
RetryOption = Annotated[float, typer.Option("--retry-seconds", min=0, help="How long to retry an unreachable API.")]


def _registry(name: str, config: Path | None) -> ModelRegistry:
    settings = load_settings(config)
    return ModelRegistry(make_s3_client(settings), settings, name)


@contextmanager
def _exit_on_registry_error() -> Iterator[None]:
    try:
        yield
    except RegistryError as err:
        if isinstance(err, UserError):
            raise  # one line and exit status 2, as every user mistake
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    except (BotoCoreError, ClientError) as err:
        mistake = storage_user_error(err)
        if mistake is None:
            raise
        raise mistake from err


def _describe(record: PointerRecord) -> str:
    when = f"{record.at:%Y-%m-%d %H:%M:%S %Z}"
    return f"#{record.seq} {record.action:<8} {record.version}  (from {record.previous_version}, {when} by {record.by})"


@app.command("list")
def list_versions(name: NameOption, config: ConfigOption = None) -> None:
    """Published versions; production is marked with '*'."""
    with _exit_on_registry_error():
        registry = _registry(name, config)
        state = registry.pointer_state()  # a corrupt pointer: the versions to choose from are listed all the same
        current = None if state.problem or not state.history else state.history[-1]
        versions = registry.versions()
    if state.problem:
        typer.echo(f"warning: production is unknown, the pointer is corrupt ({state.problem}); choose one of these: "
                   f"mavias registry repair --name {name} --version VERSION", err=True)
    if not versions:
        typer.echo(f"no published version of {name!r} under {s3_uri(registry.settings, registry.prefix)}: check "
                   "--name (the model_name the nightly publishes under)", err=True)
    for version in versions:
        typer.echo(f"{'*' if current and current.version == version else ' '} {version}")


@app.command()
def show(name: NameOption, config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Production version and the full promotion history (or what is wrong with the pointer, and how to fix it)."""
    with _exit_on_registry_error():
        registry = _registry(name, config)
        state = registry.pointer_state()
        if state.problem is not None:
            versions = registry.versions()
            typer.echo(f"production: unknown, the pointer {registry.pointer_key} is corrupt: {state.problem}")
            typer.echo(f"published versions: {', '.join(versions) or '(none)'}")
            typer.echo(f"to fix: mavias registry repair --name {name} [--version V] (keeps the readable history, "
                       "then promotes V or the newest published version whose gates passed)")
            raise typer.Exit(1)
        history = state.history
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in history], indent=2))
        return
    typer.echo(f"production: {history[-1].version if history else '(none)'}")
    for record in history:
        typer.echo(_describe(record))


@app.command()
def promote(version: str, name: NameOption, config: ConfigOption = None) -> None:
    """Make VERSION production (fails, writing nothing, if production changes concurrently); VERSION already in
    production is left as it is, so a repeated promotion succeeds."""
    with _exit_on_registry_error():
        registry = _registry(name, config)
        current = registry.production()
        if current is not None and current.version == version:
            registry.require_published(version)
            typer.echo(f"production: {version} (already; nothing changed)")
            return
        if not registry.promote(version, current.etag if current else None):
            raise PromotionConflict("production changed concurrently; nothing written")
    typer.echo(f"production: {version}")


@app.command()
def rollback(
    name: NameOption,
    config: ConfigOption = None,
    inference_service: InferenceServiceOption = None,
    container: ContainerOption = CONTAINER,
    kubeconfig: KubeconfigOption = None,
    retry_seconds: RetryOption = 30.0,
) -> None:
    """Restore the version that was production before the current one (and point --inference-service at it)."""
    target = InferenceServiceRef.parse(inference_service, container) if inference_service else None
    with _exit_on_registry_error():
        registry = _registry(name, config)
        record = registry.rollback()
    typer.echo(f"production: {record.version} (rolled back from {record.previous_version})")
    if target is not None:
        try:
            _point(target, registry.version_uri(record.version), kubeconfig, retry_seconds)
        except InferenceServiceError as err:
            raise UserError(f"{err}. The registry is rolled back; to retry the serving side: "
                            f"{target.point_command(name, record.version)}") from None


@app.command()
def point(
    name: NameOption,
    config: ConfigOption = None,
    inference_service: InferenceServiceOption = None,
    version: Annotated[str | None, typer.Option("--version", help="A published version (default: production).")] = None,
    container: ContainerOption = CONTAINER,
    kubeconfig: KubeconfigOption = None,
    retry_seconds: RetryOption = 30.0,
) -> None:
    """Point a KServe InferenceService at a version's folder, so KServe rolls out a revision serving it."""
    if inference_service is None:
        raise UserError("which InferenceService? pass --inference-service NAMESPACE/NAME (or set "
                        "MAVIAS_INFERENCE_SERVICE)")
    target = InferenceServiceRef.parse(inference_service, container)
    with _exit_on_registry_error():
        registry = _registry(name, config)
        if version is None:
            production = registry.production()
            if production is None:
                raise UserError(f"model {name} has no production version yet; pass --version or promote one first")
            version = production.version
        else:
            registry.require_published(version)
    _point(target, registry.version_uri(version), kubeconfig, retry_seconds)


def _point(target: InferenceServiceRef, uri: str, kubeconfig: Path | None, retry_s: float) -> None:
    point_inference_service(target, uri, retry_s=retry_s, kubeconfig=kubeconfig)
    typer.echo(f"InferenceService {target} now serves {uri}")


@app.command()
def repair(
    name: NameOption,
    config: ConfigOption = None,
    version: Annotated[str | None, typer.Option("--version", help="Make this published version production.")] = None,
) -> None:
    """Rebuild a corrupt production pointer from its readable records and the published versions."""
    with _exit_on_registry_error():
        record = _registry(name, config).repair(version)
    typer.echo(f"production: {record.version if record else '(none)'}")
