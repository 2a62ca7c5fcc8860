"""``python -m specdec``: the command line (``specdec.cli.main``). Tests: tests/test_cli.py."""

import sys

from .cli import main

sys.exit(main())
