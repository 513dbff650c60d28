import sys
from pathlib import Path

# helpers.py sits next to the tests (importlib import mode: put this folder on the path).
sys.path.insert(0, str(Path(__file__).parent))
