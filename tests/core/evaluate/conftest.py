from collections.abc import Callable

import pandas as pd
import pytest

Block = tuple[int, int, dict]  # (n rows, n correct, extra column values)


def _predictions(*blocks: Block) -> pd.DataFrame:
    """Rows block by block; in a block the first ``n_correct`` rows are predicted right, the others wrong."""
    rows = []
    for n, n_correct, values in blocks:
        label = values.get("label", 0)
        rows += [{**values, "label": label, "pred": label if i < n_correct else label + 1} for i in range(n)]
    frame = pd.DataFrame(rows)
    return frame.assign(sample_id=[f"s{i:05d}" for i in range(len(frame))])


@pytest.fixture
def predictions() -> Callable[..., pd.DataFrame]:
    return _predictions
