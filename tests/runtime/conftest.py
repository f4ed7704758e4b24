import pytest


def pytest_collection_modifyitems(config, items):
    # Everything under tests/runtime spawns or builds torch models.
    for item in items:
        if "tests/runtime" in str(item.fspath) and "test_runtime_config" not in str(item.fspath):
            item.add_marker(pytest.mark.runtime)
