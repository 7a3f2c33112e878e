class CliError(Exception):
    """A problem with command-line input or the environment, reported as one line (exit status 2)."""
