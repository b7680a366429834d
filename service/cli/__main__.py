"""``python -m service.cli``: the ``aucstream`` command."""

import sys

from service.cli import main

if __name__ == "__main__":
    sys.exit(main())
