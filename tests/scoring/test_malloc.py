"""glibc's malloc set to keep freed memory: large blocks are reused instead of being faulted in anew."""

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")

FAULTS = """
import resource, sys
import numpy as np
from laya_robustness.scoring.malloc import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(10):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = np.ones(16 << 20, np.float32)  # 64 MiB from malloc, every page written, then freed
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, *faults)
"""


def _faults(mode: str) -> tuple[str, list[int]]:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True).stdout
    kept, *faults = out.split()
    return kept, [int(f) for f in faults]


def test_freed_blocks_are_reused_instead_of_faulted_in_anew():
    """Ten 64 MiB blocks, each written and freed: by default every block faults its pages in again; kept,
    only the first does."""
    kept, faults_kept = _faults("keep")
    untouched, faults_default = _faults("default")
    assert (kept, untouched) == ("True", "None")
    assert min(faults_default) > 0 and faults_kept[0] > 0, (faults_default, faults_kept)
    assert sum(faults_kept[1:]) < faults_kept[0], faults_kept


RESIDENT = """
import sys
import numpy as np
from laya_robustness.scoring.malloc import give_back_freed_memory, keep_freed_memory


def resident_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024


assert keep_freed_memory()
before = resident_mb()
blocks = [np.ones(8 << 20, np.float32) for _ in range(8)]  # 8 x 32 MiB from malloc's heap, every page written
del blocks
kept = resident_mb()
given_back = give_back_freed_memory()
print(given_back, kept - before, resident_mb() - before)
"""


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/status")
def test_kept_memory_is_given_back_on_request():
    """256 MiB written and freed stays resident while malloc keeps it, and leaves when it is given back."""
    out = subprocess.run([sys.executable, "-c", RESIDENT], capture_output=True, text=True, check=True).stdout
    given_back, kept, after = out.split()
    assert given_back == "True"
    assert int(kept) > 200 and int(after) < 32, out
