"""Lets this folder's test files share one op table (`autograd_op_table.py`)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
