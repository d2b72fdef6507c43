import os
import sys

# tests import helpers such as fake_training.py from this folder
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
