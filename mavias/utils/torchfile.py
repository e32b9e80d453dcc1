"""What ``torch.load(..., weights_only=True)`` raises for a file that is damaged, of another kind, or holds code it
will not run: the errors a reader turns into one message saying which file and what to do."""

from __future__ import annotations

import pickle
import zipfile

TORCH_LOAD_ERRORS = (OSError, RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile)


def load_error_reason(error: BaseException) -> str:
    """What went wrong, in a few words: the kind of error for a file that is not a checkpoint at all (torch's own
    message then advises loading untrusted code), the message too for one that does not fit (missing keys, sizes)."""
    if isinstance(error, pickle.UnpicklingError | EOFError | zipfile.BadZipFile):
        return f"{type(error).__name__}: not a checkpoint file"
    return f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
