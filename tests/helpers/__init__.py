"""What the project's own tests share: fakes, builders of rows, records and report folders, the gate project of the
plugin tests, the real servers and torchrun worlds some tests start, and the fixtures (``fixtures.py``) that
``tests/conftest.py`` gives every test."""
