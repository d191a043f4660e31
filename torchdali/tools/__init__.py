"""Command-line tools (index writers for the readers), each runnable as `python -m torchdali.tools.<name>`."""
