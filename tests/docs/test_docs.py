"""The documentation says what the declarations say, and is all reachable: the generated family and option
tables are committed as the code makes them and cover every declaration, every page is in the site's navigation
and linked from the README and the home page, and the README stays short."""

import importlib.util
import re
from pathlib import Path

from laya_robustness.families import declared
from laya_robustness.pytest_plugin.pytest_options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_families_page_lists_every_declared_family():
    page = (DOCS / "families.md").read_text()
    missing = [f.name for f in declared() if f"| `{f.name}` |" not in page]
    assert not missing, f"docs/families.md does not list {missing}"


def test_the_options_page_lists_every_option_with_its_default():
    page = (DOCS / "options.md").read_text()
    for opt in OPTIONS:
        if opt.flag != "--families":  # its default is the list of every family
            assert f"| `{opt.flag}`" in page and f"| `{opt.default}` |" in page, opt.flag


def test_the_python_api_page_lists_every_option_as_an_argument():
    page = (DOCS / "python-api.md").read_text()
    for opt in OPTIONS:
        assert f"| `{opt.field}` | `{opt.flag}` |" in page, opt.flag


def test_the_committed_generated_tables_are_what_the_code_makes_now():
    hooks = _hooks()
    parts = {page.name: [m.group(1) for m in hooks.PART.finditer(page.read_text())] for page in DOCS.glob("*.md")}
    assert {name: parts[name] for name in ("families.md", "options.md", "python-api.md")} == {
        "families.md": ["families"], "options.md": ["options"], "python-api.md": ["arguments"]}
    stale = {name: hooks.stale_parts((DOCS / name).read_text()) for name in parts}
    stale = {name: names for name, names in stale.items() if names}
    assert not stale, f"stale generated parts {stale}: run `{hooks.WRITE_COMMAND}` and commit the pages it rewrites"


def test_a_build_puts_in_each_table_once_and_as_the_code_makes_it():
    hooks = _hooks()
    page = (DOCS / "families.md").read_text()
    built = hooks.on_page_markdown(page.replace("| `orig` |", "| `origin` |"))
    assert built == page and built.count("| family | kind |") == 1


def test_an_unknown_or_unclosed_generated_part_stops_the_build():
    import pytest

    with pytest.raises(KeyError, match="unknown generated part 'famlies'"):
        _hooks().on_page_markdown("<!-- generated: famlies -->\n<!-- end generated: famlies -->\n")
    with pytest.raises(ValueError, match="generated part 'families' has no line `<!-- end generated: families -->`"):
        _hooks().on_page_markdown("<!-- generated: families -->\n| old table |\n")


def test_every_page_is_linked_from_the_readme_and_from_the_home_page():
    def linked(page: Path) -> set[str]:
        return set(re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()))

    readme, index = linked(ROOT / "README.md"), linked(DOCS / "index.md")
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert [p for p in pages if f"docs/{p}" not in readme] == [], "README.md's list of pages does not link these"
    assert [p for p in pages if p != "index.md" and p not in index] == [], "docs/index.md's table does not link these"


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
