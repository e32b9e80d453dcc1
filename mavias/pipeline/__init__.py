"""Nightly pipeline steps (storage, validation, gates, export, registry, report); import the sub-modules directly."""
