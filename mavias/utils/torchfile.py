"""What ``torch.load(..., weights_only=True)`` raises for a file that is damaged, of another kind, or holds code it
will not run: the errors a reader turns into one message saying which file and what to do."""

from __future__ import annotations

import pickle
import zipfile

TORCH_LOAD_ERRORS = (OSError, RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile)
