"""tests/golden is a folder of scripts and data, not a package: make ``import golden`` work."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
