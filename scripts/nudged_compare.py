"""How ``compare`` judges small real changes: the embedded checkpoint against itself with every weight nudged by
Gaussian noise of ``--scale`` x its tensor's standard deviation (one checkpoint per ``--seeds``), each gated on the
embedded default and compared with the run of an unchanged copy (``python -m laya_robustness compare``). The copy,
not the embedded path, is the base: the embedded model at its own path is also probed through the embedded dual
encoder on the caption rows, a copy elsewhere is not, and compare refuses two runs of different rows.

    python scripts/nudged_compare.py --out /tmp/nudge --seeds 3 --scale 0.01

Prints, per nudged checkpoint, compare's exit status and the regressions it calls (with their p); the folders stay
in ``--out`` to compare again with another version of the command.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED = ROOT / "laya_fixtures" / "tiny-smolvlm"


def nudged(out: Path, seed: int, scale: float) -> Path:
    """A copy of the embedded checkpoint with every floating tensor plus N(0, (scale x its std)^2), seeded."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = out / f"nudged{seed}"
    if folder.exists():
        return folder
    shutil.copytree(EMBEDDED, folder)
    generator = torch.Generator().manual_seed(seed)
    for path in folder.glob("*.safetensors"):
        tensors = load_file(path)
        for name, t in tensors.items():
            if t.is_floating_point() and t.numel() > 1:
                noise = torch.randn(t.shape, generator=generator, dtype=torch.float32) * float(t.float().std())
                tensors[name] = (t.float() + scale * noise).to(t.dtype)
        save_file(tensors, path, metadata={"format": "pt"})
    return folder


def gated(model: Path, report_dir: Path) -> None:
    if not (report_dir / "summary.json").exists():
        import laya_robustness

        laya_robustness.run_gate(str(model), report_dir=report_dir, invariance=False, root=ROOT)


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--out", type=Path, required=True)
    args.add_argument("--seeds", type=int, default=3)
    args.add_argument("--scale", type=float, default=0.01)
    a = args.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    unchanged = a.out / "unchanged"  # the embedded weights at another path, gated as the nudged copies are
    if not unchanged.exists():
        shutil.copytree(EMBEDDED, unchanged)
    gated(unchanged, a.out / "base")
    for seed in range(a.seeds):
        gated(nudged(a.out, seed, a.scale), a.out / f"run{seed}")
        done = subprocess.run([sys.executable, "-m", "laya_robustness", "compare", str(a.out / "base"),
                               str(a.out / f"run{seed}")], capture_output=True, text=True)
        called = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("REGRESSION")]
        print(f"nudged{seed}: exit {done.returncode}, {len(called)} regression(s) called")
        print("\n".join(f"  {line}" for line in called))
        print(f"  {done.stdout.strip().splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
