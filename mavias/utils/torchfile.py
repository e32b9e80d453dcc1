"""What ``torch.load(..., weights_only=True)`` raises for a file that is damaged, of another kind, or holds code it
will not run: the errors a reader turns into one message saying which file and what to do. Its unpickler fails on
bytes of another kind in several ways (an empty stack, a missing key, undecodable text), not only UnpicklingError."""

from __future__ import annotations

import pickle
import zipfile

from mavias.utils.userfiles import short_reason

TORCH_LOAD_ERRORS = (OSError, RuntimeError, EOFError, ValueError, LookupError, pickle.UnpicklingError,
                     zipfile.BadZipFile)


def load_error_reason(error: BaseException) -> str:
    """What went wrong, in a few words: the message of a file that cannot be opened or does not fit (missing keys,
    sizes); for one that is not a checkpoint at all only that (torch's message then advises loading untrusted code)."""
    if isinstance(error, OSError | RuntimeError):
        return f"{type(error).__name__}: {short_reason(error)}"
    return f"{type(error).__name__}: not a checkpoint file"
