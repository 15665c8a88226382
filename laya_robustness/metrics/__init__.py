"""Metrics over prediction records: accuracy and flips, the cluster bootstrap, calibration."""
