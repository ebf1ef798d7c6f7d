"""The command line: flags and environment -> one frozen config, the commands."""
