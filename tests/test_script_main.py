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
    main(module, rest)


SKIPPED = 77  # ctest's SKIP_RETURN_CODE for every script test (tests/CMakeLists.txt)


def main(module, args):
    """Runs the module's tests with unittest's arguments `args` and exits: 1 when one failed, 77 when
    none could run here (every test skipped itself), so that ctest lists the script as skipped
    rather than passed; 0 otherwise."""
    result = unittest.main(module=module, argv=[sys.argv[0], *args], exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        print(f"every test skipped itself: exit {SKIPPED} (skipped)", file=sys.stderr)
        sys.exit(SKIPPED)
    sys.exit(0)
