"""One gate run's data flow, free of pytest: its inputs, models, the scoring loop and its journal, invariance
conditions, fingerprints, atomic report files and meta."""
