"""`python -m controller.sync`: see controller.sync.cli."""

import sys

from controller.sync.cli import main

sys.exit(main())
