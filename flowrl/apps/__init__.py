"""What users run around training: the command line, inference and export, Tune sweeps
and plots."""
