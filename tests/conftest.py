import os
import sys

# test helper modules (zoo.py, tilelang_quickstart.py) live next to the tests
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
