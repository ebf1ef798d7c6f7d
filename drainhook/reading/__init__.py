"""Where and how to read: targets, one HTTP read under its deadline, rounds, sources, discovery."""
