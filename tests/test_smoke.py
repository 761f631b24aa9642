from datetime import timedelta

import herdsched


def test_public_names_import() -> None:
    assert herdsched.parse_interval("5m") == timedelta(minutes=5)
    assert set(herdsched.__all__) <= set(dir(herdsched))
