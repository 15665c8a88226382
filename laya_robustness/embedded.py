"""Where the embedded default lives, relative to the project root: its rows, checkpoints, captions and known
limitations (``laya_fixtures/``; how they are made is ``laya_robustness.fixtures``)."""

from __future__ import annotations

EMBEDDED_DATA, EMBEDDED_MODEL = "laya_fixtures/rows", "laya_fixtures/tiny-smolvlm"
EMBEDDED_LIMITATIONS = "laya_fixtures/limitations.toml"
EMBEDDED_CAPTIONS, EMBEDDED_DUAL_MODEL = "laya_fixtures/captions", "laya_fixtures/tiny-clip"
