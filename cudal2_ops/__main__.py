"""Entry point of `python -m cudal2_ops` (see cudal2_ops.cli)."""
import sys

from cudal2_ops.cli import main

sys.exit(main())
