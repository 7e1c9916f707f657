"""docs/api.md is what scripts/gen_api_doc.py generates from the headers and the Python sources/stubs."""
import subprocess
import sys

from conftest import REPO_ROOT


def test_api_reference_is_current():
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gen_api_doc.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n(run: python3 scripts/gen_api_doc.py)"
