"""``python -m broker`` runs the CLI."""

import sys

from broker.cli import main

sys.exit(main())
