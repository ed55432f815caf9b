"""The command line every end-to-end test script shares: `script.py --ptrain PATH [unittest args]`.

    if __name__ == "__main__":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import test_script_main
        test_script_main.run(sys.modules[__name__])
"""
import argparse
import os
import sys
import unittest


def run(module, *paths):
    """Sets module.PTRAIN (and module.<NAME> for each extra `--name` path option) to the absolute
    path given on the command line, then runs the module's tests with the remaining arguments."""
    parser = argparse.ArgumentParser()
    for name in ("ptrain", *paths):
        parser.add_argument(f"--{name}", required=True)
    args, rest = parser.parse_known_args()
    for name in ("ptrain", *paths):
        setattr(module, name.upper(), os.path.abspath(getattr(args, name)))
    unittest.main(module=module, argv=[sys.argv[0], *rest])
