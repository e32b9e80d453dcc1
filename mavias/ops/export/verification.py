"""What a parity check of an exported graph found (:mod:`.parity` measures it): a plain record, read by the reports
without torch or ONNX Runtime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class VerificationResult:
    max_abs_diff: float
    argmax_equal: bool
    n: int
    providers: list[str]
    atol: float
    rtol: float = 0.0
    logit_scale: float = 0.0  # max |logit| of PyTorch on the images
    finite: bool = True  # every logit of both finite (a NaN or inf would slip through any difference)

    @property
    def tolerance(self) -> float:
        return self.atol + self.rtol * self.logit_scale

    @property
    def passed(self) -> bool:
        return self.finite and self.argmax_equal and self.max_abs_diff <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"passed": self.passed}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> VerificationResult:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: v for k, v in document.items() if k != "passed"})
