"""Incremental discovery: tag -> judge -> encode, paying only for images, tags and tag sets not seen before."""

from mavias.core.discovery.run import (
    DiscoveryCounts,
    NothingToDiscover,
    Workspace,
    discover_partition,
    manifest_file,
    partition_name,
)

__all__ = ["DiscoveryCounts", "NothingToDiscover", "Workspace", "discover_partition", "partition_name", "manifest_file"]
