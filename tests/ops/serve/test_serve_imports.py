"""The model server's environment has no torch: what the server imports (mavias.ops.serve, mavias.ops.registry,
mavias.ops.export.session) must not pull torch or Airflow, and the serving image's COPY lines must bring every mavias
module the server needs. Checked in the serving virtualenv on exactly the files docker/Dockerfile.serve copies."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mavias.ops.serve.launch import serve_python

ROOT = Path(__file__).resolve().parents[3]
SERVED = ["mavias.ops.serve.__main__", "mavias.ops.serve.server", "mavias.ops.serve.model", "mavias.ops.serve.versions",
          "mavias.ops.registry", "mavias.ops.registry.model_card", "mavias.ops.export.session"]
PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torchvision", "airflow"})))
"""


def image_tree(dest: Path) -> Path:
    """The mavias files the serving image copies (``COPY <sources...> <target>``), laid out under ``dest``."""
    for line in (ROOT / "docker" / "Dockerfile.serve").read_text().splitlines():
        if not line.startswith("COPY mavias"):
            continue
        *sources, target = line.split()[1:]
        for source in map(Path, sources):
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, dest / target, dirs_exist_ok=True)
            else:
                (dest / target).mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / source, dest / target / source.name)
    return dest


def test_the_server_imports_without_torch_from_the_files_of_its_image(tmp_path: Path) -> None:
    python = serve_python()
    if python is None:
        pytest.fail("no serving environment: run `make serve-venv` (make test builds it)")
    tree = image_tree(tmp_path / "image")
    assert not (tree / "mavias" / "nightly").exists() and not (tree / "mavias" / "train").exists()
    done = subprocess.run([str(python), "-c", PROBE, *SERVED], cwd=tree, env={"PYTHONPATH": str(tree)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
