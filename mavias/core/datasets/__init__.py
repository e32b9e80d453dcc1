"""Dataset importers: a folder (or S3 prefix) in a known layout → a validated manifest, quarantine and ``dataset.json``.

One module per layout, each returning an :class:`ImportResult` built by :func:`build_import`; see ``mavias data import``.
"""

from mavias.core.datasets.base import ImportResult, build_import, write_import
from mavias.core.datasets.celeba import import_celeba
from mavias.core.datasets.imagefolder import SplitOptions, import_imagefolder
from mavias.core.datasets.imagenet9 import import_imagenet9
from mavias.core.datasets.s3 import import_s3, settings_for
from mavias.core.datasets.urbancars import import_urbancars
from mavias.core.datasets.waterbirds import import_waterbirds

__all__ = [
    "ImportResult",
    "SplitOptions",
    "build_import",
    "import_celeba",
    "import_imagefolder",
    "import_imagenet9",
    "import_s3",
    "import_urbancars",
    "import_waterbirds",
    "settings_for",
    "write_import",
]
