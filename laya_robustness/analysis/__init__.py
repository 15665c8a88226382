"""Analyses beyond the gate's verdicts: the stability study's command, layerwise divergence, and the calibration
of the gate's false alarms and power."""
