"""docs/api.md is what scripts/gen_api_doc.py generates from the headers and the Python sources/stubs."""
import subprocess
import sys

from conftest import REPO_ROOT


def test_api_reference_is_current():
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gen_api_doc.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n(run: python3 scripts/gen_api_doc.py)"


def test_every_exported_function_and_class_has_its_entry():
    """Every function or class in rotary.__all__ / rotary.torch.__all__ (the installed package's, so re-exports
    and `__all__ +=` additions count) is described in docs/api.md by its signature or as a class, not left as a
    bare name."""
    import inspect

    import rotary
    text = (REPO_ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    modules = [rotary]
    try:
        import rotary.torch as rt
        modules.append(rt)
    except ImportError:
        pass
    bare = []
    for module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                entry = f"#### class `{name}`"
            elif callable(obj):
                entry = f"#### `{name}("
            else:
                continue
            if entry not in text:
                bare.append(f"{module.__name__}.{name}")
    assert not bare, f"docs/api.md has no entry for {bare} (run: python3 scripts/gen_api_doc.py)"
