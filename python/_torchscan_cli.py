"""The `torchscan` console script's launcher.

A help request (`torchscan --help`, `torchscan compare -h`) is answered from the option parsers
alone (`torchscan/cli/options.py`, loaded as a file: importing the `torchscan` package would
import torch, seconds before any help could print). Everything else runs `torchscan.cli.main`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _options() -> ModuleType | None:
    """torchscan/cli/options.py as a module of its own, without importing its package."""
    spec = importlib.util.find_spec("torchscan")  # a top-level package: found, not imported
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "cli" / "options.py"
        if path.is_file():
            file_spec = importlib.util.spec_from_file_location("_torchscan_cli_options", path)
            if file_spec is None or file_spec.loader is None:
                return None
            module = importlib.util.module_from_spec(file_spec)
            # dataclasses looks the module up by name while building the class.
            sys.modules[file_spec.name] = module
            file_spec.loader.exec_module(module)
            return module
    return None


def main() -> int:
    args = sys.argv[1:]
    options = _options()
    if options is not None and options.help_requested(args):
        parser, rest = options.subcommand_parser("torchscan", args)
        try:
            parser.parse_args(rest)
        except SystemExit as exit_:  # --help prints and exits 0; a usage error exits 2
            return exit_.code if isinstance(exit_.code, int) else 1
    from torchscan.cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
