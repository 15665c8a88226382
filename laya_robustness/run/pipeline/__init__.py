"""Scoring a run's cells: the rows ready to score (``images``: the image store, ``variants``: each family's variant
rows and their images' lifetimes), the model each source loads (``models``), a cell's rows in chunks journaled as they
are scored (``chunks``, ``cells``, ``journal``) and the invariance conditions (``invariance``)."""
