"""Incremental discovery: tag -> judge -> encode, paying only for images, tags and tag sets not seen before."""

from mavias.core.discovery.counting import CountingJudge
from mavias.core.discovery.run import DiscoveryCounts, Workspace, discover_partition, manifest_file, partition_name

__all__ = ["CountingJudge", "DiscoveryCounts", "Workspace", "discover_partition", "partition_name", "manifest_file"]
