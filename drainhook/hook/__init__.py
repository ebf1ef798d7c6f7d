"""The hook's run: the drain loop, the stall watch, signals, the log, the termination message."""
