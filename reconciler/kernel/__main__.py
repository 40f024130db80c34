"""``python -m <kernel package>``: the kernel's entry point (``entry.main``). Trusted harness.

One JSON request on stdin, one JSON outcome on stdout (docs/kernel-entry.md).
"""

import sys

from .entry import main

sys.exit(main())
