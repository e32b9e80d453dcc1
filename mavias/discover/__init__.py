"""Incremental discovery: tag -> judge -> encode, paying only for images, tags and tag sets not seen before."""

from mavias.discover.counting import CountingJudge
from mavias.discover.run import DiscoveryCounts, Workspace, discover_partition, partition_name, resolve_manifest

__all__ = ["CountingJudge", "DiscoveryCounts", "Workspace", "discover_partition", "partition_name", "resolve_manifest"]
