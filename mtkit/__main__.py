import sys

from mtkit.cli import main

sys.exit(main())
