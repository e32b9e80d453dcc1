"""What the nightly pipeline and the model server share: S3 storage, the model registry, the model card.

- :mod:`mavias.storage.s3`: S3 settings, client, retries of transient faults, object transfers;
- :mod:`mavias.ops.registry.model_registry`: immutable versions, the production pointer (conditional writes), history;
- :mod:`mavias.ops.registry.pointer`: the pointer's document, validated whenever it is read;
- :mod:`mavias.ops.registry.model_card`: the card published with every version (file name, checksums, lineage);
- :mod:`mavias.ops.registry.kubernetes`: pointing a KServe InferenceService at a version.

Nothing here imports torch: the model server imports this package.
"""

from mavias.ops.registry.model_registry import (
    CorruptPointer,
    ModelRegistry,
    PromotionConflict,
    RegistryError,
    VersionExists,
    VersionNotFound,
)
from mavias.ops.registry.pointer import PointerRecord

__all__ = [
    "CorruptPointer",
    "ModelRegistry",
    "PointerRecord",
    "PromotionConflict",
    "RegistryError",
    "VersionExists",
    "VersionNotFound",
]
