import sys
from pathlib import Path

# The sweep's modules are imported as plain modules by its tests and by run.py.
sys.path.insert(0, str(Path(__file__).parent))
