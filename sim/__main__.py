"""`python -m sim` (scripts/demo): the embedded default, the demo (sim/demo.py);
with `--serve [--port P] [--control FILE]`, the engine driven by hand (sim/serve.py)."""

import sys
from pathlib import Path

import click

from sim.demo import run_demo


@click.command()
@click.option("--serve", is_flag=True, help="Serve the engine until Ctrl-C, driven by hand.")
@click.option("--port", type=int, default=8000, show_default=True, help="With --serve.")
@click.option("--control", type=click.Path(path_type=Path), help="With --serve: a command file.")
def main(serve: bool, port: int, control: Path | None) -> int:
    """The demo: a simulated vLLM drained by the hook; or, with --serve, the engine alone."""
    if not serve:
        return run_demo()
    from sim.serve import serve as serving

    return serving(port, control, lambda line: click.echo(line, err=True))


try:
    code = main.main(standalone_mode=False)
except click.ClickException as exc:  # a usage error: its line, exit 2
    exc.show()
    code = exc.exit_code
sys.exit(code or 0)
