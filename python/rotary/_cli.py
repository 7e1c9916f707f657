# Console entry point `rotary` (pyproject [project.scripts]): runs the C++ `rotary` program shipped in the wheel.
"""Start the ``rotary`` command-line program that the wheel ships in ``rotary/_bin``.

The program is the same C++ executable that a CMake build installs; this launcher only finds it, tells it
which Python to use for ``rotary report``'s plots (this interpreter, unless ``ROTARY_PYTHON`` is set) and
replaces the current process with it, so exit codes and signals are the program's own.
"""

import os
import sys


def executable() -> str:
    """Path of the shipped ``rotary`` program."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "rotary")


def main() -> None:
    exe = executable()
    if not os.access(exe, os.X_OK):
        sys.stderr.write(
            f"rotary: the command-line program is missing from this installation ({exe}); "
            "reinstall the package (pip install --force-reinstall rotary)\n")
        sys.exit(1)
    os.environ.setdefault("ROTARY_PYTHON", sys.executable)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
