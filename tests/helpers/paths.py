"""Where things are, for the tests that run the repository's scripts, build its sources or
spawn a helper by path: computed once here from this file's place (tests/helpers/)."""
import os

HELPERS = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HELPERS)
ROOT = os.path.dirname(TESTS)
