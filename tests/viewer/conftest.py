from tests.history.fleet import grown_fleet
from tests.viewer.browser import browser, fleet_viewer

__all__ = ["browser", "fleet_viewer", "grown_fleet"]
