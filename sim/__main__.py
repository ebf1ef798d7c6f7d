"""`python -m sim` (scripts/demo): the embedded default, the demo (sim/demo.py)."""

import sys

from sim.demo import run_demo

sys.exit(run_demo())
