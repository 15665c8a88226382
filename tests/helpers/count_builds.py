"""A pytest plugin for gate runs: counts the variant builds of each family made in the pytest process (the front
end; a Ray actor's builds are not counted) and writes them as JSON to the file named by LAYA_BUILDS_FILE."""

import json
import os
from collections import Counter

from laya_robustness.run.pipeline import variant_rows

builds: Counter = Counter()
_build_variants = variant_rows.build_variants


def counted(name, rows, seed):
    builds[name] += len(rows)
    return _build_variants(name, rows, seed)


variant_rows.build_variants = counted


def pytest_unconfigure(config):
    with open(os.environ["LAYA_BUILDS_FILE"], "w") as fh:
        json.dump(builds, fh)
