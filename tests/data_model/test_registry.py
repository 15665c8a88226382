"""The one registry type (``laya_robustness.registry``): names in the order added, a duplicate refused naming both,
an unknown name told with its close matches and the known names, references loaded on first use, entry points of
installed packages (a broken one named, and left out of listings), and the four registries built on it."""

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from laya_robustness.registry import BrokenEntry, BrokenEntryWarning, DuplicateName, Registry, UnknownName

ROOT = Path(__file__).resolve().parents[2]


def install(site: Path, package: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]]) -> None:
    """Install ``package`` into ``site`` as pip leaves it: its modules and a dist-info folder with entry_points.txt
    (group -> {name: "module:object"})."""
    site.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{package.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {ref}\n" for name, ref in names.items()) + "\n"
        for group, names in entry_points.items()))
    (info / "RECORD").write_text("")


def test_entries_keep_the_order_they_were_added_in():
    reg = Registry("thing")
    for number, name in enumerate(("zeta", "alpha", "mid")):
        reg.add(name, number)
    assert reg.names() == ("zeta", "alpha", "mid") and list(reg) == ["zeta", "alpha", "mid"] and len(reg) == 3
    assert reg.entries() == (("zeta", 0), ("alpha", 1), ("mid", 2))
    assert reg.get("alpha") == 1 and "mid" in reg and "other" not in reg
    reg.discard("alpha")
    assert reg.names() == ("zeta", "mid") and reg.find("alpha") is None


def first_maker():
    return 1


def second_maker():
    return 2


def test_a_name_added_twice_is_refused_naming_both_entries():
    reg = Registry("widget", added="declared")
    reg.add("w", first_maker)
    with pytest.raises(DuplicateName) as raised:
        reg.add("w", second_maker)
    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == (f"widget 'w' is declared twice: by {__name__}.first_maker and by "
                                 f"{__name__}.second_maker")
    assert reg.get("w") is first_maker


def test_an_unknown_name_is_told_with_its_close_matches_and_the_known_names():
    reg = Registry("family")
    for name in ("text", "image", "option_order"):
        reg.add(name, object())
    with pytest.raises(KeyError) as raised:
        reg.get("txet")
    assert isinstance(raised.value, UnknownName)
    assert raised.value.args[0] == "unknown family 'txet'; did you mean text? (known: image, option_order, text)"
    assert raised.value.close == ("text",) and raised.value.known == ("image", "option_order", "text")
    with pytest.raises(UnknownName) as raised:
        reg.get("zzz")
    assert raised.value.args[0] == "unknown family 'zzz' (known: image, option_order, text)"


def test_a_module_object_reference_is_loaded_on_its_first_get(tmp_path, monkeypatch):
    (tmp_path / "lazy_thing_mod.py").write_text("VALUE = {'made': True}\n")
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.delitem(sys.modules, "lazy_thing_mod", raising=False)
    reg = Registry("thing")
    reg.add("lazy", "lazy_thing_mod:VALUE")
    assert reg.names() == ("lazy",) and "lazy_thing_mod" not in sys.modules
    assert reg.get("lazy") == {"made": True} and "lazy_thing_mod" in sys.modules
    assert reg.get("lazy") is sys.modules["lazy_thing_mod"].VALUE


def test_a_reference_that_does_not_load_is_named_and_left_out_of_listings():
    reg = Registry("thing")
    reg.add("good", 1)
    reg.add("gone", "no_such_module_for_the_registry:thing")
    with pytest.raises(BrokenEntry) as raised:
        reg.get("gone")
    assert str(raised.value).startswith("thing 'gone': 'no_such_module_for_the_registry:thing' cannot be loaded: "
                                        "ModuleNotFoundError")
    assert reg.names() == ("good",)
    reg.add("typo", "laya_robustness.registry:NoSuchThing")
    with pytest.warns(BrokenEntryWarning, match="thing 'typo': 'laya_robustness.registry:NoSuchThing' cannot be "
                                                "loaded: AttributeError"):
        assert reg.entries() == (("good", 1),)
    with pytest.raises(BrokenEntry):  # broken stays broken, without a second import
        reg.get("typo")


def test_adapt_makes_the_entry_from_what_a_reference_loads_and_may_refuse_it():
    def adapt(name, obj):
        if not callable(obj):
            raise TypeError(f"{obj!r} is not callable")
        return (name, obj)

    reg = Registry("maker", adapt=adapt)
    reg.add("direct", first_maker)  # an object is the entry as given
    reg.add("later", f"{__name__}:second_maker")
    reg.add("value", "laya_robustness.registry:__doc__")
    assert reg.get("direct") is first_maker and reg.get("later") == ("later", second_maker)
    with pytest.raises(BrokenEntry, match="maker 'value': 'laya_robustness.registry:__doc__' cannot be loaded: "
                                          "TypeError: .* is not callable"):
        reg.get("value")


ENTRY_MODULES = {
    "reg_things": """
        LOADS = []
        def thing():
            return "thing"
        LOADS.append("reg_things")
    """,
    "reg_adds_its_own": """
        from reg_target import TARGET
        TARGET.add("self_added", ("by the module",))
        TARGET.add("other_added", ("also by the module",))
    """,
    "reg_broken": """
        raise RuntimeError("this plug-in is broken")
    """,
}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An installed package with entry points under ``laya_robustness.test_registry``: one object, one module that
    adds its own entries when imported, one that raises, one named as a name already taken."""
    site = tmp_path / "site"
    install(site, "reg-plugins", ENTRY_MODULES, {"laya_robustness.test_registry": {
        "thing": "reg_things:thing", "self_added": "reg_adds_its_own", "broken": "reg_broken",
        "taken": "reg_things:thing"}})
    monkeypatch.syspath_prepend(site)
    for module in ("reg_things", "reg_adds_its_own", "reg_broken", "reg_target"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return site


def test_entry_points_are_found_by_name_and_loaded_on_first_use(site, monkeypatch):
    import types

    reg = Registry("thing")
    reg.add("taken", first_maker)
    target = types.ModuleType("reg_target")
    target.TARGET = reg
    monkeypatch.setitem(sys.modules, "reg_target", target)
    with pytest.warns(BrokenEntryWarning) as told:
        reg.load_entry_points("laya_robustness.test_registry")
    assert [str(w.message) for w in told] == [
        "entry point 'taken = reg_things:thing' (group laya_robustness.test_registry, package reg-plugins) is left "
        f"out: thing 'taken' is registered already, by {__name__}.first_maker"]
    reg.load_entry_points("laya_robustness.test_registry")  # once per group
    assert reg.names() == ("taken", "broken", "self_added", "thing")
    assert "reg_things" not in sys.modules
    assert reg.get("thing")() == "thing" and sys.modules["reg_things"].LOADS == ["reg_things"]
    assert "reg_adds_its_own" not in sys.modules
    assert reg.get("self_added") == ("by the module",)
    assert reg.names() == ("taken", "broken", "self_added", "thing", "other_added")
    with pytest.raises(BrokenEntry) as raised:
        reg.get("broken")
    assert str(raised.value) == ("thing 'broken': entry point 'broken = reg_broken' (group "
                                 "laya_robustness.test_registry, package reg-plugins) cannot be loaded: "
                                 "RuntimeError: this plug-in is broken")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # told once, when it broke
        assert [n for n, _ in reg.entries()] == ["taken", "self_added", "thing", "other_added"]


def test_an_unknown_name_loads_the_waiting_modules_first(site, monkeypatch):
    import types

    reg = Registry("thing")
    target = types.ModuleType("reg_target")
    target.TARGET = reg
    monkeypatch.setitem(sys.modules, "reg_target", target)
    with pytest.warns(BrokenEntryWarning, match="entry point 'broken = reg_broken'"):
        reg.load_entry_points("laya_robustness.test_registry")
        assert reg.get("other_added") == ("also by the module",)  # added by the self_added entry point's module


PLUGINS = """
    from laya_robustness.families import Family, declare
    from laya_robustness.run.executors.local import LocalExecutor


    def build(rows, seed):
        return [row.derive("toy_gray", "gray") for row in rows]


    declare(Family(name="toy_gray", build=build, summary="a toy family", variants=("gray",), default=False))


    class ToyExecutor(LocalExecutor):
        pass


    class ToyScorer:
        identity = {"model": "toy"}

        def __init__(self, model, **settings):
            self.model, self.settings = model, settings

        def score_batch(self, rows):
            return []

        def score_predict(self, rows, use_cache=True):
            return []


    class ToyProtocol:
        probabilities = False

        @classmethod
        def connect(cls, transport, model, entry, server, max_tokens):
            return None
"""

CHECKS = """
    import warnings

    import pytest

    from laya_robustness.registry import BrokenEntry, BrokenEntryWarning

    warnings.simplefilter("error", BrokenEntryWarning)
    # families: declared by the module its entry point names; a broken one is left out, named, until asked for
    from laya_robustness.families import declared, family_names, get_family
    with pytest.warns(BrokenEntryWarning, match="entry point 'broken_family = toy_missing_module'"):
        assert "toy_gray" in family_names()
    assert [f.name for f in declared()][-1] == "toy_gray" and get_family("toy_gray").summary == "a toy family"
    with pytest.raises(BrokenEntry, match="family 'broken_family': entry point 'broken_family = toy_missing_module' "
                                          r"\\(group laya_robustness.families, package toy-plugins\\)"):
        get_family("broken_family")
    # executors: --executor takes it; a broken one is named where it is asked for
    from laya_robustness.run.executors.registry import executor_class, executor_entry, executor_names
    from laya_robustness.run.inputs.options import parse_executor, parse_scorer
    with pytest.warns(BrokenEntryWarning, match="executor 'broken': entry point 'broken = toy_plugins:Missing'"):
        assert executor_names() == ("local", "ray", "distributed", "toy")
    assert parse_executor("toy") == "toy" and executor_class("toy").__name__ == "ToyExecutor"
    with pytest.raises(BrokenEntry, match="AttributeError"):
        executor_entry("broken")
    # scorers: --scorer takes the name; load_scorer calls the factory as a plug-in's
    from laya_robustness.scoring.base import ScorerContractError
    from laya_robustness.scoring.factory import load_scorer
    assert parse_scorer("toy") == "toy"
    scorer = load_scorer("toy", "m", batch_size=3)
    assert type(scorer).__name__ == "ToyScorer" and scorer.model == "m"
    assert scorer.settings == {"device": "cpu", "precision": "auto", "batch_size": 3, "attn_implementation": "eager"}
    with pytest.raises(ScorerContractError, match="scorer 'broken': entry point 'broken = toy_plugins:Missing'"):
        load_scorer("broken", "m")
    # served protocols: tried before the built-in ones; a broken one left out, named
    from laya_robustness.scoring.served.scorer import PROTOCOLS, protocols
    with pytest.warns(BrokenEntryWarning, match="served protocol 'broken'"):
        assert [p.__name__ for p in protocols()] == ["ToyProtocol", *(p.__name__ for p in PROTOCOLS)]
    print("all four registries took the plug-ins")
"""


def test_the_four_registries_take_entry_points_of_an_installed_package(tmp_path):
    """Installed as pip leaves a package: a family, an executor, a scorer and a served protocol, each with a broken
    neighbour that stops nothing else."""
    site = tmp_path / "site"
    install(site, "toy-plugins", {"toy_plugins": PLUGINS}, {
        "laya_robustness.families": {"toy_gray": "toy_plugins", "broken_family": "toy_missing_module"},
        "laya_robustness.executors": {"toy": "toy_plugins:ToyExecutor", "broken": "toy_plugins:Missing"},
        "laya_robustness.scorers": {"toy": "toy_plugins:ToyScorer", "broken": "toy_plugins:Missing"},
        "laya_robustness.protocols": {"toy": "toy_plugins:ToyProtocol", "broken": "toy_plugins:Missing"},
    })
    script = tmp_path / "checks.py"
    script.write_text(textwrap.dedent(CHECKS))
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": f"{site}"})
    assert done.returncode == 0, done.stderr
    assert "all four registries took the plug-ins" in done.stdout
