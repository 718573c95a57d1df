"""``python -m portal.tensorboard.serve``: ``portal.session.tensorboard.serve``,
for servers started before the move (see ``portal/tensorboard/__init__.py``)."""

import sys

from portal.session.tensorboard.serve import main

if __name__ == "__main__":
    sys.exit(main())
