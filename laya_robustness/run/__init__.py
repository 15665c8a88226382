"""One gate run, free of pytest, in rooms. Here, the run and its outcome: ``gate_run`` (``GateRun``: scores and judges
each cell, ends itself with ``finish``), ``outcome`` (``RunOutcome``: what a run ends with, its exit status decided
once), ``scorers`` and ``planned`` (the run's models and where they score; the cells its checks will ask for),
``scope`` and ``judged`` (what a report covers; whether anything was judged), ``errors`` (usage and harness errors,
exit 4 and 3), ``files`` (atomic writes) and ``device_names``. The rooms: ``inputs/`` (what a run is given),
``pipeline/`` (a cell's variant rows, chunks, journal and invariance conditions, made and scored), ``executors/`` (where rows are scored, by name)
and ``outputs/`` (the data files it writes, their meta, the report folder's lock)."""
