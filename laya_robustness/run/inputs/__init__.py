"""What a run is given: its options declared, parsed and validated (``options``), its rows, captions, limits and
--baseline read once (``run_inputs``), and their fingerprints (``fingerprints``)."""
