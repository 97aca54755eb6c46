import sys

from coevolve.cli import main

sys.exit(main())
