"""Data folders made from the embedded fixture rows, for tests that need real rows and images on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers.paths import FIXTURE_ROWS


def first_rows(root: Path, datasets, n: int) -> Path:
    """``root`` holding the first ``n`` rows of each fixture set in ``datasets``, with their images."""
    root.mkdir(parents=True, exist_ok=True)
    for name in datasets:
        lines = (FIXTURE_ROWS / f"{name}.jsonl").read_text().splitlines()[:n]
        (root / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        for line in lines:
            for image in json.loads(line)["images"]:
                (root / image).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(FIXTURE_ROWS / image, root / image)
    return root
