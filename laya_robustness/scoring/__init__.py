"""Scorers turn rows into one logit per option (label order): the contract, the Hugging Face scorer and its
adapters, dual encoders, plug-ins; ``load_scorer`` picks one and checks it."""

from __future__ import annotations

from laya_robustness.scoring.base import (
                                          ModelLoadError,
                                          Scorer,
                                          ScorerContractError,
                                          ScoringError,
                                          UnsupportedArchitecture,
                                          check_scorer,
)
from laya_robustness.scoring.factory import load_scorer

__all__ = ["ModelLoadError", "Scorer", "ScorerContractError", "ScoringError", "UnsupportedArchitecture",
           "check_scorer", "load_scorer"]
