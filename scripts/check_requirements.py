# Exit 0 when every requirement line in the given file is installed at a matching version (used to skip pip).
import re
import sys
from importlib import metadata

try:
    from packaging.requirements import Requirement
except Exception:  # packaging missing: fall back to name-only checks
    Requirement = None


def main(path: str) -> int:
    for raw in open(path, encoding="utf-8"):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if Requirement is not None:
            req = Requirement(line)
            try:
                version = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                return 1
            if req.specifier and not req.specifier.contains(version, prereleases=True):
                return 1
        else:
            name = re.split(r"[<>=!~\[ ]", line, 1)[0]
            try:
                metadata.version(name)
            except metadata.PackageNotFoundError:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
