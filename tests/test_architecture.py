"""The package's shape (docs/architecture.md): layers import one way, no import cycles, few top-level modules."""
import subprocess
import sys
from pathlib import Path

import pytest

import odelab

PACKAGE = Path(odelab.__file__).parent
PYPROJECT = PACKAGE.parent / "pyproject.toml"


def test_layers_contract_is_kept():
    """import-linter's layers contract from pyproject.toml (cli ← analysis ← training ← interop|data ← models ←
    kernels ← solvers ← systems)."""
    script = Path(sys.executable).parent / "lint-imports"
    if not script.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    run = subprocess.run([str(script), "--config", str(PYPROJECT), "--no-cache"], capture_output=True, text=True,
                         cwd=PACKAGE.parent)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def test_no_import_cycles():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("odelab")
    cycles = []
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            chain = graph.find_shortest_chain(importer=imported, imported=importer)
            if chain:
                cycles.append((importer, *chain))
    assert not cycles, cycles


def test_nothing_imports_the_cli():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("odelab")
    importers = {m for m in graph.find_modules_that_directly_import("odelab.cli")
                 if not m.startswith("odelab.cli")} - {"odelab.__main__"}
    assert not importers


def test_at_most_two_top_level_modules():
    modules = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(modules) <= 2, modules


def test_public_api_is_declared_and_importable():
    for name in odelab.__all__:
        assert hasattr(odelab, name), name
    import odelab.cells as cells  # the documented module path of the presets

    assert cells.PRESETS["lem"] is odelab.cells.PRESETS["lem"]
