"""The gate's verdicts, free of pytest: the limits schema, one declaration per check, judgement on intervals,
failure explanations, a cell's verdict, and the limits of a run."""
