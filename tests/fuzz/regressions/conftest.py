import sys
from pathlib import Path

# The fuzzer's modules (one folder up) are imported as plain modules.
sys.path.insert(0, str(Path(__file__).parent.parent))
