"""The README documents what the declarations say: every family, every option."""

from pathlib import Path

from laya_robustness.families import declared
from laya_robustness.pytest_plugin.options import OPTIONS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def test_every_family_is_in_the_readme():
    missing = [f.name for f in declared() if f.name != "orig" and f"`{f.name}`" not in README]
    assert not missing, f"README.md does not mention the families {missing}"


def test_every_option_is_in_the_readme_with_its_default():
    for opt in OPTIONS:
        if opt.flag == "--families":
            continue  # its default is the list of every family, documented as "all"
        assert f"| `{opt.flag}` | `{opt.default}` |" in README, opt.flag
    assert "| `--families` | every family |" in README
