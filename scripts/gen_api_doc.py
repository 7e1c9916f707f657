#!/usr/bin/env python3
# Generates docs/api.md, the API reference, from include/rotary/*.h and the Python package's __all__ (sources + .pyi stubs).
"""Write (or, with --check, verify) docs/api.md.

C/C++: for every public header, its role line and each documented declaration in order: the `///` comment
block, the declaration (inline bodies replaced by `;`), and members with their `///<` comments.
Python: for every name in rotary.__all__ and rotary.torch.__all__ (with the `__all__ += module.__all__` additions),
its signature and docstring, read with `ast` from the module, the package files it imports the name from
(python/rotary/*.py) and python/rotary/_rotary.pyi (nothing is imported, so no build is needed).

    python3 scripts/gen_api_doc.py          # rewrite docs/api.md
    python3 scripts/gen_api_doc.py --check  # exit 1 if docs/api.md is not what this script writes
"""
from __future__ import annotations

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"
HEADER_ORDER = ["rotary.h", "spec.h", "config.h", "freqs.h", "types.h", "apply.h", "table.h", "multimodal.h",
                "context_parallel.h", "convert.h", "ggml.h", "onnx.h", "prologue.h", "npy.h", "rotary_c.h", "api.h", "version.h"]


def _skip_body(lines: list[str], i: int, opened: int) -> int:
    """Index after the brace that closes a body opened `opened` levels deep before lines[i]."""
    depth = opened
    while depth and i < len(lines):
        depth += lines[i].count("{") - lines[i].count("}")
        i += 1
    return i


def header_entities(text: str) -> list[str]:
    """The declarations of a header's namespace scope, each as a block of lines: documented free declarations
    (their `///` comment, signature; inline bodies become `;`) and whole types (every member line, inline
    method bodies collapsed). Undocumented free functions and preprocessor lines are left out."""
    lines = text.splitlines()
    blocks: list[str] = []
    comment: list[str] = []
    i = 0
    type_open = re.compile(r"^\s*(struct|class|enum|union)\b[^;]*\{\s*(//.*)?$")
    while i < len(lines):
        line = lines[i].rstrip()
        s = line.strip()
        i += 1
        if s.startswith("///"):
            comment.append(line)
            continue
        if not s or s.startswith("#") or s.startswith("namespace") or s.startswith("}  // namespace") or \
                s.startswith('extern "C"') or s == "}" or (s.startswith("//") and not s.startswith("///")):
            if not s.startswith("//"):
                comment = []
            continue
        decl = [line]
        while not re.search(r"[;{]\s*(//.*)?$", decl[-1]) and i < len(lines):
            decl.append(lines[i].rstrip())
            i += 1
        if type_open.match(decl[0]) or type_open.match(decl[-1]):
            body = []
            while i < len(lines):
                m = lines[i].rstrip()
                i += 1
                if re.match(r"^\s*\};", m) and (len(m) - len(m.lstrip())) <= (len(line) - len(line.lstrip())):
                    body.append(m)
                    break
                if not m.strip():
                    continue
                if m.rstrip().endswith("{") and not type_open.match(m):
                    body.append(m[: m.rindex("{")].rstrip() + ";")
                    i = _skip_body(lines, i, 1)
                    continue
                body.append(m)
            blocks.append("\n".join(comment + decl + body))
        elif decl[-1].rstrip().endswith("{"):
            decl[-1] = decl[-1][: decl[-1].rindex("{")].rstrip() + ";"
            i = _skip_body(lines, i, 1)
            if comment:
                blocks.append("\n".join(comment + decl))
        elif comment or "ROTARY_API" in decl[0] or s.startswith("using ") or s.startswith("typedef"):
            blocks.append("\n".join(comment + decl))
        comment = []
    return blocks


def cpp_section() -> str:
    inc = ROOT / "include" / "rotary"
    names = [n for n in HEADER_ORDER if (inc / n).exists()] + sorted(
        p.name for p in inc.glob("*.h") if p.name not in HEADER_ORDER)
    out = ["## C++ and C headers (`include/rotary/`)", ""]
    for name in names:
        text = (inc / name).read_text(encoding="utf-8")
        role = text.splitlines()[0].strip().lstrip("/* ").rstrip("*/ ").strip()
        out += [f"### `rotary/{name}`", "", role, ""]
        if name == "rotary_c.h":  # the C ABI, documented in /* */ comments: every line but the preprocessor's
            body = [l.rstrip() for l in text.splitlines()[1:]
                    if not l.startswith("#") and l.strip() not in ('extern "C" {', "}")]
            blocks = ["\n".join(body).strip()]
        else:
            blocks = header_entities(text)
        if blocks:
            out += ["```cpp" if name != "rotary_c.h" else "```c", "\n\n".join(blocks), "```", ""]
    return "\n".join(out)


def _signature(fn: ast.FunctionDef) -> str:
    args = ast.unparse(fn.args)
    ret = f" -> {ast.unparse(fn.returns)}" if fn.returns else ""
    return f"{fn.name}({args}){ret}"


def _doc(node) -> str:
    d = ast.get_docstring(node) or ""
    return d.strip()


def python_defs(files: list[str]) -> dict[str, ast.AST]:
    """The top-level defs/classes of the given package files, by name; an earlier file wins."""
    defs: dict[str, ast.AST] = {}
    pkg = ROOT / "python" / "rotary"
    for f in files:
        tree = ast.parse((pkg / f).read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defs.setdefault(node.name, node)
    return defs


def _package_file(module: str | None, level: int) -> pathlib.Path | None:
    """The package file an import names (`from .x import`, `from rotary.x import`, `from . import x`), or None."""
    pkg = ROOT / "python" / "rotary"
    if level == 1 and module:
        name = module
    elif level == 0 and module and module.startswith("rotary."):
        name = module[len("rotary."):]
    else:
        return None
    path = pkg / f"{name}.py"
    return path if path.exists() else None


def _module_aliases(tree: ast.Module) -> dict[str, pathlib.Path]:
    """Names bound to package modules by `from . import x [as y]` / `import rotary.x as y`."""
    pkg = ROOT / "python" / "rotary"
    aliases: dict[str, pathlib.Path] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            for a in node.names:
                if (pkg / f"{a.name}.py").exists():
                    aliases[a.asname or a.name] = pkg / f"{a.name}.py"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "rotary":
            for a in node.names:
                if (pkg / f"{a.name}.py").exists():
                    aliases[a.asname or a.name] = pkg / f"{a.name}.py"
    return aliases


def module_all(path: pathlib.Path) -> list[str]:
    """A module's __all__: its literal lists, and `__all__ += other.__all__` of the package modules it imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases = _module_aliases(tree)
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if not (isinstance(target, ast.Name) and target.id == "__all__"):
                continue
            if isinstance(node.value, (ast.List, ast.Tuple)):
                names += [ast.literal_eval(e) for e in node.value.elts]
            elif (isinstance(node.value, ast.Attribute) and node.value.attr == "__all__"
                  and isinstance(node.value.value, ast.Name) and node.value.value.id in aliases):
                names += module_all(aliases[node.value.value.id])
    return list(dict.fromkeys(names))


def resolve_def(name: str, path: pathlib.Path, seen: frozenset = frozenset()):
    """The def or class a module's name refers to: defined in the module, or followed through its
    `from .x import name [as alias]` / `from .x import *` imports of package modules; None for constants and
    outside names."""
    if path in seen or not path.exists():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            source = _package_file(node.module, node.level)
            for a in node.names:
                if source is not None and (a.asname or a.name) == name:
                    return resolve_def(a.name, source, seen | {path})
                if source is not None and a.name == "*" and name in module_all(source):
                    return resolve_def(name, source, seen | {path})
    return None


def describe(name: str, node) -> list[str]:
    out = []
    if isinstance(node, ast.ClassDef):
        out += [f"#### class `{name}`", "", _doc(node), ""]
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and (not item.name.startswith("_") or item.name == "__init__"):
                deco = [ast.unparse(d) for d in item.decorator_list]
                kind = "property " if "property" in deco else "staticmethod " if "staticmethod" in deco else ""
                sig = item.name if kind == "property " else _signature(item)
                if kind == "property " and item.returns is not None:
                    sig += f": {ast.unparse(item.returns)}"
                doc = _doc(item)
                out.append(f"- {kind}`{sig}`" + (f" — {doc.splitlines()[0]}" if doc else ""))
        out.append("")
    else:
        out += [f"#### `{_signature(node)}`", "", _doc(node), ""]
    return out


def python_section() -> str:
    pkg = ROOT / "python" / "rotary"
    out = ["## Python (`import rotary`, `import rotary.torch`)", ""]
    modules = (("rotary", module_all(pkg / "__init__.py"), ["__init__.py", "_rotary.pyi"]),
               ("rotary.torch", module_all(pkg / "torch.py"), ["torch.py", "_torch_flash.py"]),
               ("rotary.prologue_torch", module_all(pkg / "prologue_torch.py"), ["prologue_torch.py"]))
    for module, names, files in modules:
        defs = python_defs(files)
        out += [f"### `{module}`", ""]
        for name in names:
            node = defs.get(name) or resolve_def(name, pkg / files[0])
            if node is None:
                out += [f"#### `{name}`", "", "(a constant or alias; see the module's docstring)", ""]
                continue
            out += describe(name, node)
    return "\n".join(out)


def render() -> str:
    head = ("<!-- docs/api.md: the API reference, GENERATED by scripts/gen_api_doc.py from include/rotary/*.h and the "
            "Python sources and stubs; do not edit (python/tests/test_api_doc.py checks it is current). -->\n"
            "# API reference\n\n"
            "Every public declaration with its documentation, in header order, and every Python name that the\n"
            "packages export (`__all__`). The public API and its versioning: CONTRIBUTING.md (\"Versioning\").\n"
            "Narrative guides: [layouts.md](layouts.md), [scaling.md](scaling.md), [cli.md](cli.md),\n"
            "[errors.md](errors.md).\n\n")
    text = head + cpp_section() + "\n" + python_section()
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print("docs/api.md is out of date: run python3 scripts/gen_api_doc.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
