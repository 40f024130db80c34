from tests.history.fleet import grown_fleet

__all__ = ["grown_fleet"]
