"""In-process gate runs (``pytester.runpytest``) forget the test modules they wrote, never the libraries."""

import sys

import pytest

pytest_plugins = ["pytester"]


class _Seen:
    """A plugin handing the inner run a list to put the classes it imported in."""

    def __init__(self):
        self.classes = []

    @pytest.fixture
    def seen(self):
        return self.classes


def test_an_in_process_run_keeps_the_library_modules_it_imported_and_forgets_its_test_modules(pytester):
    pytester.makepyfile(written_helper="VALUE = 1\n", test_imports="""
def test_imports(seen):
    import written_helper
    from transformers.models.idefics3 import modeling_idefics3
    import datasets
    assert written_helper.VALUE == 1
    seen.extend([modeling_idefics3.Idefics3ForConditionalGeneration, datasets.Features])
""")
    pytester.syspathinsert()
    seen = _Seen()
    pytester.runpytest("test_imports.py", "-p", "no:randomly", plugins=[seen]).assert_outcomes(passed=1)
    from transformers.models.idefics3.modeling_idefics3 import Idefics3ForConditionalGeneration
    from datasets import Features

    assert seen.classes == [Idefics3ForConditionalGeneration, Features]
    assert seen.classes[0] is Idefics3ForConditionalGeneration and seen.classes[1] is Features
    assert "written_helper" not in sys.modules and "test_imports" not in sys.modules
