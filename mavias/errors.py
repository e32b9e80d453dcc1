"""The one exception type for mistakes a user can fix.

The CLI prints its message (which must say how to fix the mistake) without a traceback and exits with status 2;
``--debug`` shows the traceback. Library errors that are user mistakes subclass it.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix: wrong path, bad config value, unsupported file type, missing column…"""
