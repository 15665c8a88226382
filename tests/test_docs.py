"""The documentation says what the declarations say, and is all reachable: the generated family and option
tables cover every declaration, every page is in the site's navigation, and the README stays short."""

import importlib.util
import re
from pathlib import Path

from laya_robustness.families import declared
from laya_robustness.pytest_plugin.options import OPTIONS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_families_page_lists_every_declared_family():
    table = _hooks().on_page_markdown((DOCS / "families.md").read_text())
    missing = [f.name for f in declared() if f"| `{f.name}` |" not in table]
    assert not missing, f"docs/families.md does not list {missing}"


def test_the_options_page_lists_every_option_with_its_default():
    page = _hooks().on_page_markdown((DOCS / "options.md").read_text())
    for opt in OPTIONS:
        if opt.flag != "--families":  # its default is the list of every family
            assert f"| `{opt.flag}`" in page and f"| `{opt.default}` |" in page, opt.flag
    assert "<!-- generated" not in page


def test_the_python_api_page_lists_every_option_as_an_argument():
    page = _hooks().on_page_markdown((DOCS / "python-api.md").read_text())
    for opt in OPTIONS:
        assert f"| `{opt.field}` | `{opt.flag}` |" in page, opt.flag
    assert "<!-- generated" not in page


def test_an_unknown_generated_part_stops_the_build():
    import pytest

    with pytest.raises(KeyError, match="unknown generated part 'famlies'"):
        _hooks().on_page_markdown("<!-- generated: famlies -->\n")


def test_every_page_is_in_the_navigation_and_every_link_between_pages_exists():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert [p for p in pages if f": {p}" not in nav] == []
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+\.(?:md|png))(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.name} links to {target}, which does not exist"


def test_the_readme_fits_on_two_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 60 and max(map(len, lines)) <= 160
