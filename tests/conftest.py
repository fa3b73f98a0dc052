import sys
from pathlib import Path

# The integration tests import their shared models as a plain module.
sys.path.insert(0, str(Path(__file__).parent))
