"""The whole suite: tests import podkit and podkit_cli as installed (``pip install -e .``) and the
test doubles in testing/ from the project root (pytest.ini's ``pythonpath``)."""
