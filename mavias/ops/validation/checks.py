"""The outcome of a partition's validation: one :class:`CheckResult` per check, and the partition's verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pandas as pd

from mavias.core.manifest.quarantine import QUARANTINE_COLUMNS


@dataclass(frozen=True)
class CheckResult:
    name: str
    success: bool
    observed: Any = None
    threshold: Any = None
    details: str = ""
    source: Literal["great_expectations", "mavias"] = "great_expectations"
    blocking: bool = True  # a failed check that does not block (validation.keep_partial) is a warning


@dataclass
class ValidationResult:
    checks: list[CheckResult]
    quarantined: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=QUARANTINE_COLUMNS))
    rows: int = 0  # rows of the manifest

    @property
    def success(self) -> bool:
        """The partition can be trained on (its quarantined rows held back)."""
        return not self.failed

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.success and c.blocking]

    @property
    def warnings(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.success and not c.blocking]

    def summary(self) -> str:
        """One line for the report: why the partition failed, or that it passed and what it held back."""
        if not self.success:
            return "failed: " + "; ".join(f"{c.name} ({c.details or c.observed})" for c in self.failed)
        held = f"kept {self.rows - len(self.quarantined)} of {self.rows} image(s), held back {len(self.quarantined)}"
        if self.warnings:
            return f"passed as a partial partition ({held}): " + "; ".join(c.details for c in self.warnings)
        return f"passed {len(self.checks)} checks ({len(self.quarantined)} image(s) quarantined)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "summary": self.summary(),
            "failed": [c.name for c in self.failed],
            "warnings": [c.name for c in self.warnings],
            "rows": self.rows,
            "checks": [asdict(c) for c in self.checks],
            "quarantined": self.quarantined.astype(object).where(self.quarantined.notna(), None).to_dict("records"),
        }
