"""`python -m archlab ...` (also what `torchrun -m archlab train ...` runs)."""

import sys

from archlab.cli import main

sys.exit(main())
