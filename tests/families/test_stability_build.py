"""Every stability family on all 1,200 embedded fixture rows: the expected number of rows, and the build time.

Run with ``-s`` to see the timings (CPU seconds of this process, so a busy machine does not inflate them).
"""

import time

import pytest

from laya_robustness.families import build_variants, families_in

#: rows per source row on the fixture sets: every visual variant applies to a 64 px image, two rules
#: rephrase every fixture question, and five built-in languages translate it
PER_ROW = {"shift": 8, "pad_crop": 8, "scale": 1, "scale_pad": 2, "rotation": 2, "rotation_sweep": 11,
           "overlay": 6, "rephrase": 2, "language": 5}


def test_the_stability_block_is_these_families():
    assert {f.name for f in families_in("stability")} == set(PER_ROW)


@pytest.mark.parametrize("family", list(PER_ROW))
def test_build_on_every_fixture_row(fixture_rows, family):
    sources = sum(len(rows) for rows in fixture_rows.values())
    start = time.process_time()
    built = [v for rows in fixture_rows.values() for v in build_variants(family, rows, 0)]
    seconds = time.process_time() - start
    assert sources == 1200 and len(built) == PER_ROW[family] * sources
    print(f"{family}: {len(built)} rows from {sources} in {seconds:.2f} CPU s ({1e3 * seconds / sources:.2f} ms per source row)")
