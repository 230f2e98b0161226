"""``python -m hwgen.cli``."""

import sys

from hwgen.cli import main

sys.exit(main())
