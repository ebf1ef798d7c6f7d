"""What an engine's body means: the gauge table, the scanners, a read's verdict."""
