"""`python -m torchscan`: the same command line as the `torchscan` console script."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m torchscan"))
